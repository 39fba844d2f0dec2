"""Forward variants on tables of one width, side by side with FBGEMM's forward (issue 37's widths).

    python3 -m benchmarks width_variants --fbgemm DIR --widths 200,520 --specs ";UNROLL=4,MIN_BLOCKS=3"

The suite's ``widths`` group (4 tables of one width, B8192 L30, uniform and Zipf 1.05 indices,
float32 and float16) left widths 4, 44, 200 and 520 below FBGEMM. For each width, dtype, index
draw and mode (``--modes``) this times the launcher's pick under every spec of ``--specs``
(``;``-separated; the empty spec is the launcher's own pick) and FBGEMM's forward, alternately,
twice, median of ``--reps`` cold calls each (the smaller of the two medians is printed). Every
output is compared with FBGEMM's before it is timed. A spec is fbgemm_skew's: a comma list of
``NAME=VALUE``, upper-case names the kernel's compile-time defines, lower-case ones the
launcher's knobs (``reference_kernels.tuning.Tuning`` fields). The registers and spill bytes of
every forward variant compiled are printed at the end (docs/perf/change-57.md).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from benchmarks import fbgemm_peer
from benchmarks.experiments.fbgemm_skew import Case, build, variant_changes
from benchmarks.harness import DEV, TABLE_BYTES, Timer
from reference_kernels import diagnostics, tuning

BATCH, POOLING, TABLES = 8192, 30, 4


def run(width: int, dtype: torch.dtype, alpha: float, mode: str, specs: list[str], timer: Timer) -> None:
    rows = min(1_000_000, TABLE_BYTES // (width * dtype.itemsize))
    label = f"4x{rows // 1000}Kx{width} a{alpha} {mode} {str(dtype).replace('torch.', '')}"
    case = Case(label, [rows] * TABLES, width, BATCH, [POOLING] * TABLES, alpha, dtype,
                "sum" if mode == "psw" else mode, psw=mode == "psw")
    ours, peer = build(case, torch.Generator(device=DEV).manual_seed(width))
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    times: dict[str, list[float]] = {spec: [] for spec in [*specs, "fbgemm"]}
    with torch.no_grad():
        expected = peer()
        for _ in range(2):
            times["fbgemm"].append(timer.median_us(peer))
            for spec in specs:
                with tuning.tuned(**variant_changes(spec)):
                    torch.testing.assert_close(ours().float(), expected.float(), rtol=tol, atol=tol)
                    times[spec].append(timer.median_us(ours))
    theirs = min(times["fbgemm"])
    cells = [f"{spec or 'pick'}: {min(times[spec]):.1f} us x{theirs / min(times[spec]):.2f}" for spec in specs]
    print(f"{label:28s} fbgemm {theirs:.1f} us | " + " | ".join(cells), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fbgemm", required=True, help="FBGEMM's forward library directory")
    parser.add_argument("--widths", default="4,44,200,520")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--alphas", default="0.0,1.05")
    parser.add_argument("--modes", default="sum", help="sum, mean and psw (sum with per-sample weights)")
    parser.add_argument("--specs", default="", help="';'-separated specs; the empty one is the launcher's pick")
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args(argv)
    fbgemm_peer.locate(args.fbgemm)
    specs = args.specs.split(";")
    for spec in specs:  # an unknown knob fails here, before any device work
        replace(tuning.current(), **variant_changes(spec))  # type: ignore[arg-type]
    timer = Timer(reps=args.reps)
    for width in (int(w) for w in args.widths.split(",")):
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            for alpha in (float(a) for a in args.alphas.split(",")):
                for mode in args.modes.split(","):
                    run(width, dtype, alpha, mode, specs, timer)
                    torch.cuda.empty_cache()
    for variant, (regs, local) in sorted(diagnostics.compile_stats().resources.items()):
        if variant.startswith("embedding_bag_forward"):
            print(f"registers {regs:3d} local {local:3d} B  {variant}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
