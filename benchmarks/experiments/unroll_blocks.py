"""Rows in flight against blocks per SM for the general kernel on bags of 12-32 rows (device
diagnostics for docs/perf/change-40.md).

scripts/suite1_bound.py (run 86, deleted: docs/perf/deleted-experiments.md) found that a minimal
fixed-size bag kernel (units of exactly L rows,
output written) with 8 rows in flight per lane at 4 blocks per SM beats the same kernel with 16
rows at 2 blocks by 4.5 % (L16) and 9 % (L20), while ours matches the 16-row one. This script
times the package's own general kernel with its compile-time choices overridden (reference_kernels.tuning overrides:
UNROLL, MIN_BLOCKS, PERSISTENT), side by side, alternately, twice, median of 100 cold calls, each
output checked against torch first; the registers and local (spill) bytes of every variant are
printed at the end. Variants that spill are measured anyway: the question is whether the
occupancy is worth a register diet.

``--launcher``: the launcher's pick (change 40: float32 rows of one vector per lane stride with
8 rows in flight at 3 blocks per SM) against change 39's (UNROLL=16, MIN_BLOCKS=2) on every
kind of case the rule touches: d128 and d32 float32, fixed and CSR, every mode, per-sample
weights, uniform and Zipf 1.15, B 6912 to 131072. ``--wide``: the same question for rows of three
vectors per lane (suite 3's 192 columns); ``--wide-check`` the launcher's pick since change 41 there.
``--pos32`` (change 43): the general kernel with its positions, bags and rows in 32-bit registers
(POS32), at the launcher's occupancy and at 4 blocks per SM, on the cases above and on suite 1,
16-bit rows, suite 3's rows and long bags. ``--small-rows``: rows of 128 and 256 bytes (d32, d64
float32) whose pick is 16 rows in flight at 2 blocks per SM (bags of 33+ rows at d32, 17+ at d64;
per-sample weights or not), against 8 rows and 3 or 4 blocks and 16 rows at 3 or 4 blocks;
``--small-rows-check`` the launcher's pick since change 44 against the one before (16 rows, 2
blocks) on every mode, both layouts, uniform and Zipf indices, B 2048 to 131072."""
import sys

import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import Suite, bag_bytes, bag_indices, table
from reference_kernels import diagnostics
from reference_kernels.tuning import overrides_from_spec, tuned

DEV = "cuda"
SPECS = ["", "UNROLL=8,MIN_BLOCKS=4,PERSISTENT=0", "UNROLL=8,MIN_BLOCKS=4,PERSISTENT=1",
         "UNROLL=8,MIN_BLOCKS=3,PERSISTENT=1", "UNROLL=8,MIN_BLOCKS=3,PERSISTENT=0"]
# (rows, dim, batch, pooling, csr, mode, dtype)
CASES = [
    (1_000_000, 128, 32768, 16, False, "sum", torch.float32),
    (1_000_000, 128, 32768, 16, True, "sum", torch.float32),
    (1_000_000, 128, 16384, 20, False, "sum", torch.float32),
    (1_000_000, 128, 16384, 20, True, "mean", torch.float32),
    (1_000_000, 128, 32768, 12, True, "sum", torch.float32),
    (1_000_000, 128, 16384, 24, False, "max", torch.float32),
    (1_000_000, 128, 16384, 32, False, "sum", torch.bfloat16),
    (5_000_000, 128, 2048, 150, False, "sum", torch.float32),
]
LAUNCHER_SPECS = ["", "UNROLL=16,MIN_BLOCKS=2"]
# ``--wide``: rows of 3 vectors per lane (suite 3's 192 columns), whose pick was 4 rows (12
# vectors) in flight at 2 blocks per SM, striding (run 93: the first four specs); ``--wide-check``:
# the launcher's pick since change 41 against that one, on every mode (run 94)
WIDE_SPECS = ["", "UNROLL=2,MIN_BLOCKS=3", "UNROLL=2,MIN_BLOCKS=4", "UNROLL=2,MIN_BLOCKS=3,PERSISTENT=0"]
WIDE_CHECK_SPECS = ["", "UNROLL=4,MIN_BLOCKS=2,PERSISTENT=1"]
WIDE_CASES = [
    (10_000_000, 192, 65536, 32, False, "sum", torch.float32, 1.0, False),
    (10_000_000, 192, 65536, 32, False, "sum", torch.float16, 1.0, False),
    (10_000_000, 192, 65536, 32, False, "mean", torch.float32, 1.15, False),
    (1_000_000, 192, 16384, 20, True, "sum", torch.float32, 0.0, False),
]
WIDE_CHECK_CASES = [
    (10_000_000, 192, 65536, 32, False, "sum", torch.float32, 1.15, False),
    (10_000_000, 192, 65536, 32, True, "mean", torch.float32, 1.0, False),
    (10_000_000, 192, 65536, 32, False, "max", torch.float32, 1.0, False),
    (10_000_000, 192, 65536, 32, False, "max", torch.float32, 1.15, False),
    (1_000_000, 192, 32768, 16, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 192, 6912, 12, True, "sum", torch.float32, 0.0, False),
    (1_000_000, 192, 2048, 32, False, "sum", torch.float32, 0.0, False),
]
# (rows, dim, batch, pooling, csr, mode, dtype, alpha, psw): cases whose pick change 40 changes
LAUNCHER_CASES = [
    (1_000_000, 128, 32768, 16, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 128, 32768, 16, True, "max", torch.float32, 0.0, False),
    (1_000_000, 128, 16384, 20, False, "mean", torch.float32, 0.0, False),
    (1_000_000, 128, 16384, 20, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 128, 16384, 20, False, "sum", torch.float32, 1.15, False),
    (1_000_000, 128, 32768, 16, True, "sum", torch.float32, 1.05, False),
    (1_000_000, 128, 131072, 16, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 128, 131072, 16, True, "sum", torch.float32, 1.15, False),
    (1_000_000, 128, 6912, 12, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 128, 6912, 24, True, "mean", torch.float32, 0.0, False),
    (1_000_000, 32, 32768, 64, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 32, 131072, 64, True, "sum", torch.float32, 0.0, False),
    (1_000_000, 32, 131072, 64, False, "sum", torch.float32, 1.15, False),
    (1_000_000, 32, 32768, 64, True, "sum", torch.float32, 1.05, True),
]

POS32_SPECS = ["", "POS32=1", "POS32=1,MIN_BLOCKS=4"]
POS32_CASES = LAUNCHER_CASES + [
    (5_000_000, 128, 2048, 150, False, "sum", torch.float32, 0.0, False),
    (5_000_000, 128, 2048, 150, False, "sum", torch.bfloat16, 0.0, False),
    (1_000_000, 128, 16384, 32, False, "sum", torch.bfloat16, 0.0, False),
    (1_000_000, 128, 32768, 64, False, "sum", torch.float32, 0.0, False),
    (10_000_000, 192, 65536, 32, False, "sum", torch.float32, 1.0, False),
]

SMALL_ROWS_SPECS = ["", "UNROLL=8,MIN_BLOCKS=3", "UNROLL=8,MIN_BLOCKS=4", "MIN_BLOCKS=3", "MIN_BLOCKS=4"]
SMALL_ROWS_CASES = [
    (1_000_000, 32, 32768, 64, False, "sum", torch.float32, 0.0, True),
    (1_000_000, 32, 32768, 64, True, "sum", torch.float32, 1.05, True),
    (1_000_000, 32, 131072, 64, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 32, 131072, 64, False, "sum", torch.float32, 1.15, True),
    (1_000_000, 32, 16384, 40, True, "sum", torch.float32, 0.0, True),
    (5_000_000, 32, 2048, 150, False, "sum", torch.float32, 0.0, True),
    (1_000_000, 64, 16384, 20, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 64, 32768, 64, False, "sum", torch.float32, 0.0, True),
    (1_000_000, 64, 16384, 20, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 32768, 64, False, "mean", torch.float32, 0.0, False),
    (1_000_000, 64, 65536, 32, True, "sum", torch.float32, 1.15, False),
    (1_000_000, 64, 6912, 24, True, "max", torch.float32, 0.0, False),
]

# the pick before change 44 was change 39's (LAUNCHER_SPECS' second)
SMALL_ROWS_CHECK_CASES = [
    (1_000_000, 64, 16384, 20, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 16384, 20, True, "mean", torch.float32, 0.0, False),
    (1_000_000, 64, 16384, 20, False, "max", torch.float32, 0.0, False),
    (1_000_000, 64, 32768, 16, False, "sum", torch.float32, 1.15, False),
    (1_000_000, 64, 131072, 16, True, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 4224, 20, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 2048, 20, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 32768, 64, True, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 32768, 64, False, "max", torch.float32, 1.05, False),
    (5_000_000, 64, 2048, 150, False, "sum", torch.float32, 0.0, False),
    (1_000_000, 64, 6912, 24, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 64, 32768, 32, False, "sum", torch.float32, 1.15, True),
    (1_000_000, 64, 131072, 20, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 32, 6912, 48, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 32, 4224, 64, False, "sum", torch.float32, 0.0, True),
    (1_000_000, 32, 65536, 40, False, "sum", torch.float32, 1.15, True),
    (1_000_000, 32, 32768, 100, True, "sum", torch.float32, 0.0, True),
    (1_000_000, 32, 131072, 64, False, "sum", torch.float32, 0.0, True),
]


def case(suite: Suite, specs: list[str], rows: int, dim: int, batch: int, pooling: int, csr: bool, mode: str,
         dtype: torch.dtype, alpha: float = 0.0, psw: bool = False) -> None:
    weight = table(rows, dim, dtype, suite.gen)
    idx, offsets = bag_indices(batch, pooling, rows, alpha, csr, suite.gen)
    w = torch.rand(idx.shape, generator=suite.gen, device=DEV).to(dtype) if psw else None
    expected = F.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=w, include_last_offset=csr)
    tol = 1e-4 if dtype == torch.float32 else 2e-2

    def call() -> torch.Tensor:
        return rk.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=w, include_last_offset=csr,
                                check_indices=False)

    times: dict[str, list[float]] = {spec: [] for spec in specs}
    for _ in range(2):
        for spec in specs:
            with tuned(overrides=overrides_from_spec(spec)):
                torch.testing.assert_close(call(), expected, rtol=tol, atol=tol)
                times[spec].append(suite.timer.median_us(call))
    comp, _ = bag_bytes(weight, idx, offsets, psw, batch * dim)
    cells = []
    for spec in specs:
        us = min(times[spec])
        pct = 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps
        cells.append(f"{spec or 'default'}: {us:.1f} us {pct:.1f}%")
    label = (f"{rows // 1000}Kx{dim} B{batch} L{pooling} a{alpha} {'csr' if csr else 'fixed'} {mode}"
             f"{'+psw' if psw else ''} {dtype}").replace("torch.", "")
    print(f"{label:46s} " + " | ".join(cells), flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    suite = Suite(reps=100, quick=False, seed=40)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s", flush=True)
    choices = {"--launcher": (LAUNCHER_CASES, LAUNCHER_SPECS), "--wide": (WIDE_CASES, WIDE_SPECS),
               "--wide-check": (WIDE_CHECK_CASES, WIDE_CHECK_SPECS), "--pos32": (POS32_CASES, POS32_SPECS),
               "--small-rows": (SMALL_ROWS_CASES, SMALL_ROWS_SPECS),
               "--small-rows-check": (SMALL_ROWS_CHECK_CASES, LAUNCHER_SPECS)}
    cases, specs = choices.get(argv[0] if argv else "", (CASES, SPECS))
    with torch.no_grad():
        for c in cases:
            case(suite, specs, *c)
            torch.cuda.empty_cache()
    for variant, (regs, local) in diagnostics.compile_stats().resources.items():
        if variant.startswith("embedding_bag_forward "):
            print(f"registers {regs:3d} local {local:3d} B  {variant}")


if __name__ == "__main__":
    main()
