"""Short fixed-size bags side by side (device diagnostics for docs/perf/change-25.md).

For [B, L] lookups with L of 1-4 rows: the general forward kernel (one team per bag) against
the short-bag kernel (several bags per team step) with 4 or 8 vectors in flight per lane,
8 or 16 blocks per SM, or a grid with one step per team (run 42, change 28), each next to a
plain copy of the case's compulsory bytes.
Median of 100 cold calls (the benchmark's Timer: clean L2 flush, head start)."""

import torch

import reference_kernels as rk
from benchmarks.harness import Suite, bag_bytes, table, zipf_indices
from reference_kernels.tuning import overrides_from_spec, tuned

CASES = [(dim, dtype, batch, pooling) for dim, dtype in ((32, torch.float32), (128, torch.float32),
                                                         (128, torch.bfloat16))
         for batch in (32768, 131072) for pooling in (1, 2, 4)]
FULL_GRID = 1 << 30  # blocks per SM beyond any case's steps: a grid with one step per team
VARIANTS: list[tuple[str, int, int, str | None]] = [
    ("general", 0, 8, None), ("short 4v", 4, 8, None), ("short 4v 16/SM", 4, 16, None),
    ("short 4v one step/team", 4, FULL_GRID, None), ("short 8v one step/team", 8, FULL_GRID, None)]
def main() -> None:
    suite = Suite(reps=100, quick=False, seed=11)
    tables = {(dim, dtype): table(1_000_000, dim, dtype, suite.gen) for dim, dtype, _, _ in CASES}
    for dim, dtype, batch, pooling in CASES:
        weight = tables[(dim, dtype)]
        idx = zipf_indices(batch * pooling, 1_000_000, 0.0, suite.gen).view(batch, pooling)
        comp, _ = bag_bytes(weight, idx, None, False, batch * dim)
        copy_us = suite.same_size_copy_us(comp)
        torch_us = suite.timer.median_us(lambda: torch.nn.functional.embedding_bag(idx, weight))

        def pct(us: float) -> float:
            return 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps

        line = [f"d{dim} {str(dtype)[6:]:8s} B{batch:<6d} L{pooling}: copy {copy_us:5.1f}us {pct(copy_us):3.0f}% "
                f"torch {torch_us:6.1f}"]
        reference = None
        for label, vectors, per_sm, tune in VARIANTS:
            knobs = tuned(short_step_vectors=vectors, short_grid_per_sm=per_sm,
                          overrides=overrides_from_spec(tune or ""))
            with knobs, torch.no_grad():
                out = rk.embedding_bag(idx, weight, check_indices=False)
                if reference is None:
                    reference = out.float()
                torch.testing.assert_close(out.float(), reference, rtol=2e-2, atol=2e-2)
                us = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, check_indices=False))
            line.append(f"{label} {us:6.1f}us {pct(us):3.0f}%")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
