"""Forward variants on tables of one width, side by side with FBGEMM's forward (issue 37's widths).

    python3 -m benchmarks width_variants --fbgemm DIR --widths 200,520 --specs ";UNROLL=4,MIN_BLOCKS=3"

The suite's ``widths`` group (4 tables of one width, B8192 L30, uniform and Zipf 1.05 indices,
float32 and float16) left widths 4, 44, 200 and 520 below FBGEMM. For each width, dtype, index
draw and mode (``--modes``) this times the launcher's pick under every spec of ``--specs``
(``;``-separated; the empty spec is the launcher's own pick) and FBGEMM's forward, alternately,
twice, median of ``--reps`` cold calls each (the smaller of the two medians is printed). Every
output is compared with FBGEMM's before it is timed. A spec is a comma list of ``NAME=VALUE``:
upper-case names are the kernel's compile-time defines (``tuning.overrides``), lower-case ones
the launcher's knobs (``reference_kernels.tuning.Tuning`` fields). The registers and spill
bytes of every forward variant compiled are printed at the end (docs/perf/change-57.md).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import torch

from benchmarks import fbgemm_peer
from benchmarks.harness import DEV, TABLE_BYTES, Timer, table_batch
from reference_kernels import diagnostics, tuning
from reference_kernels.tbe import TableBatchedEmbeddingBag

BATCH, POOLING, TABLES = 8192, 30, 4
KNOBS = {f.name: f.type for f in dataclasses.fields(tuning.Tuning)}


def knobs_of(spec: str) -> dict[str, Any]:
    """The ``tuned(...)`` changes of one spec: defines as overrides, the rest as knobs."""
    defines, changes = [], {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, value = item.split("=")
        if name.isupper():
            defines.append((name, int(value)))
        elif name not in KNOBS:
            raise SystemExit(f"unknown knob {name!r} in spec {spec!r}")
        else:
            changes[name] = value.lower() in ("1", "true") if KNOBS[name] in (bool, "bool") else int(value)
    return {"overrides": tuple(defines), **changes}


def run(width: int, dtype: torch.dtype, alpha: float, mode: str, specs: list[str], timer: Timer) -> None:
    rows = min(1_000_000, TABLE_BYTES // (width * dtype.itemsize))
    gen = torch.Generator(device=DEV).manual_seed(width)
    pooling = "sum" if mode == "psw" else mode
    tbe = TableBatchedEmbeddingBag([rows] * TABLES, width, pooling, dtype, DEV)
    tbe.check_indices = False
    tb = table_batch([rows] * TABLES, BATCH, [POOLING] * TABLES, alpha, gen)
    psw = torch.rand(tb.indices.shape, generator=gen, device=DEV).to(dtype) if mode == "psw" else None
    peer = fbgemm_peer.FbgemmForward(tbe.weight.detach(), [t * rows for t in range(TABLES)], tb.indices,
                                     tb.offsets, pooling, psw)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    times: dict[str, list[float]] = {spec: [] for spec in [*specs, "fbgemm"]}
    with torch.no_grad():
        expected = peer()
        for _ in range(2):
            times["fbgemm"].append(timer.median_us(peer))
            for spec in specs:
                with tuning.tuned(**knobs_of(spec)):
                    def ours() -> torch.Tensor:
                        out: torch.Tensor = tbe(tb.indices, tb.offsets, psw)
                        return out
                    torch.testing.assert_close(ours().float(), expected.float(), rtol=tol, atol=tol)
                    times[spec].append(timer.median_us(ours))
    theirs = min(times["fbgemm"])
    cells = [f"{spec or 'pick'}: {min(times[spec]):.1f} us x{theirs / min(times[spec]):.2f}" for spec in specs]
    label = f"4x{rows // 1000}Kx{width} a{alpha} {mode} {str(dtype).replace('torch.', '')}"
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
    for spec in specs:
        knobs_of(spec)  # a typo fails before any device work
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
