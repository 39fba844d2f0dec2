"""The bulk-copy paths (the one-hot gather, [B, 1] bags, CSR one-row bags) with the index
loaded a step ahead and a balanced one-wave grid, side by side (device diagnostics for
docs/perf-log.md, change 42).

Two questions, each a launcher knob, timed alternately (twice, median of 100 cold calls each;
every output checked against torch first):

* ``BULK_INDEX_AHEAD``: does each warp's step wait on its index load? Without it, a step's
  bulk copies start only once its lanes' indices arrive from DRAM (the L2 is flushed), so
  each stage's lifetime is an index round trip plus a row round trip. With it, the index of
  the warp's next step is loaded while this step's rows are in flight (the CSR entry loads
  the offsets two steps ahead and the index one).
* ``BULK_BALANCED_WAVE``: a one-wave grid strides warps over the steps, so when the steps
  are not a multiple of the wave's warps (d128 float32 B131072: 16384 steps over 3168 warps,
  5.17 each), the last round runs with a sixth of the warps and few bytes in flight. The
  balanced grid takes the fewest warps that keep each warp's count at the same ceiling
  (2731 warps with 6 steps each).

Policies: "old" (neither), "ahead", "balanced", "both", "1 step" (a grid of one step per
warp, the block scheduler refilling SMs), "both+wave" (both, and the one-wave grid for any
step count: the one-hot f32 case at 10.3 steps per warp). With INDEX_AHEAD 0 the CSR entry
still loads the offsets two steps ahead (one before this change)."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels import _launch
from reference_kernels.bench import Suite, bag_bytes, table, zipf_indices

DEV = "cuda"
# name: (BULK_BALANCED_WAVE, BULK_INDEX_AHEAD, BULK_MAX_STEPS_PER_WARP)
POLICIES = {"old": (False, 0, 8), "ahead": (False, 1, 8), "balanced": (True, 0, 8), "both": (True, 1, 8),
            "1 step": (True, 1, 0), "both+wave": (True, 1, 10**6)}


def use(policy: str) -> None:
    _launch.BULK_BALANCED_WAVE, _launch.BULK_INDEX_AHEAD, _launch.BULK_MAX_STEPS_PER_WARP = POLICIES[policy]


def side_by_side(suite: Suite, label: str, comp: int, call: object, expected: torch.Tensor) -> None:
    for policy in POLICIES:
        use(policy)
        assert torch.equal(call(), expected), (label, policy)  # type: ignore[operator]
    times: dict[str, list[float]] = {p: [] for p in POLICIES}
    for _ in range(2):
        for policy in POLICIES:
            use(policy)
            times[policy].append(suite.timer.median_us(call))  # type: ignore[arg-type]
    cells = []
    for policy in POLICIES:
        us = min(times[policy])
        pct = 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps
        cells.append(f"{policy} {us:6.1f} us {pct:5.1f}%")
    print(f"{label:40s} " + " | ".join(cells), flush=True)


def one_hot(suite: Suite, weight: torch.Tensor, n: int, alpha: float) -> None:
    idx = zipf_indices(n, weight.shape[0], alpha, suite.gen)
    row = weight.shape[1] * weight.element_size()
    comp = int(torch.unique(idx).numel()) * row + n * (idx.element_size() + row)
    label = f"gather {weight.shape[0] // 1000}Kx{weight.shape[1]} {str(weight.dtype)[6:]} N{n} a{alpha}"
    side_by_side(suite, label, comp, lambda: rk.embedding(idx, weight, check_indices=False),
                 F.embedding(idx, weight))


def one_row_bags(suite: Suite, weight: torch.Tensor, batch: int, alpha: float, csr: bool) -> None:
    idx = zipf_indices(batch, weight.shape[0], alpha, suite.gen)
    offsets = torch.arange(0, batch + 1, device=DEV) if csr else None
    idx = idx if csr else idx.view(batch, 1)
    comp, _ = bag_bytes(weight, idx, offsets, False, batch * weight.shape[1])
    label = f"bags {weight.shape[0] // 1000}Kx{weight.shape[1]} {str(weight.dtype)[6:]} B{batch} L1 a{alpha} " + (
        "csr" if csr else "fixed")

    def call() -> torch.Tensor:
        return rk.embedding_bag(idx, weight, offsets, include_last_offset=csr, check_indices=False)

    side_by_side(suite, label, comp, call, F.embedding_bag(idx, weight, offsets, include_last_offset=csr))


def main() -> None:
    suite = Suite(reps=100, quick=False, seed=42)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s; % of copy in compulsory bytes; policies: "
          + ", ".join(f"{k} = balanced {b}, index ahead {a}, max steps/warp {m}" for k, (b, a, m) in POLICIES.items()),
          flush=True)
    with torch.no_grad():
        weight = table(1_000_000, 128, torch.float32, suite.gen)
        for csr in (False, True):
            one_row_bags(suite, weight, 131072, 0.0, csr)
        one_row_bags(suite, weight, 131072, 1.15, False)
        one_row_bags(suite, weight, 32768, 0.0, True)
        weight = table(1_000_000, 128, torch.bfloat16, suite.gen)
        for csr in (False, True):
            one_row_bags(suite, weight, 131072, 0.0, csr)
        weight = table(1_000_000, 32, torch.float32, suite.gen)
        one_row_bags(suite, weight, 131072, 0.0, True)
        weight = table(1_000_000, 256, torch.float32, suite.gen)
        one_hot(suite, weight, 65536, 0.0)
        del weight
        torch.cuda.empty_cache()
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            weight = table(5_000_000, 128, dtype, suite.gen)
            one_hot(suite, weight, 262144, 0.0)
            if dtype == torch.float32:
                one_hot(suite, weight, 65536, 0.0)
                one_hot(suite, weight, 1 << 20, 0.0)
                one_hot(suite, weight, 262144, 1.15)
            del weight
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
