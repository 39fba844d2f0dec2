"""Quantized inference lookups, ours beside FBGEMM's IntNBitTableBatchedEmbeddingBagsCodegen (issue 54).

``python3 -m benchmarks quantized_suite --fbgemm DIR [--json FILE] [--quick]``: every case builds the
same quantized tables for both (FBGEMM's rows are ours byte for byte: ``quantized.to_fbgemm``), the
same int32 indices and offsets, fp16 output, and times both with the suite's method (harness.Timer:
L2 flushed, GPU head start, median of ``--reps`` calls; both on the same inputs, in the same process).
FBGEMM runs with ``bounds_check_mode=NONE`` (no index check; ours has none in this module either).
Ours gets each table's pooling factor as the geometry hint (``pooling_factors``; ``--no-hints``:
without it).

Bytes: *compulsory* = unique rows x row bytes (qparams and padding included) + indices + offsets +
output; ``% copy`` = compulsory bytes / time / the copy ceiling measured in the same run.
``vs FBGEMM`` = FBGEMM's median / ours. Before timing, the two outputs are compared (largest
difference relative to the largest |value|; FBGEMM's row-wise dequantization differs from ours
in its rounding, so they agree to fp16 output rounding, not bit for bit).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field

import torch

from benchmarks import harness
from benchmarks.training_suite import load_fbgemm
from reference_kernels import quantized as q
from reference_kernels import quantized_tbe
from reference_kernels.quantized_tbe import QuantizedTableBatchedEmbeddingBag

DEV = "cuda"
FBGEMM_FP8 = {"fp8_exponent_bits": 4, "fp8_exponent_bias": 7}


@dataclass(frozen=True)
class Case:
    name: str
    rows: tuple[int, ...]
    dims: tuple[int, ...]
    formats: tuple[str, ...]
    batch: int
    pooling: tuple[int, ...]
    alpha: float
    pooling_mode: str = "sum"


@dataclass
class Result:
    case: str
    formats: str
    batch: int
    alpha: float
    ours_us: float
    fbgemm_us: float | None
    compulsory_bytes: int
    pct_copy: float = 0.0
    fbgemm_pct_copy: float | None = None
    vs_fbgemm: float | None = None
    max_rel_diff: float | None = None
    notes: list[str] = field(default_factory=list)
    layouts_us: dict[str, float] = field(default_factory=dict)
    """--compare: ours under each of LAYOUTS (µs)."""
    layouts_diff: dict[str, float] = field(default_factory=dict)
    """--compare: each layout's largest difference from the first layout's output, relative to its
    largest |value| (fp32 sums in another order differ in the last bits; fp16 output rounding)."""


def dcn_case(fmt: str | tuple[str, ...], batch: int, alpha: float) -> Case:
    rows = tuple(min(r, harness.DCN_ROW_CAP) for r in harness.DCN_ROWS)
    formats = (fmt,) * len(rows) if isinstance(fmt, str) else fmt
    label = fmt if isinstance(fmt, str) else "mixed"
    return Case(f"DCNv2 26 tables d128 {label} B{batch} {'uniform' if alpha == 0 else f'zipf {alpha}'}", rows,
                (128,) * len(rows), formats, batch, tuple(harness.DCN_POOLING), alpha)


def all_cases(quick: bool) -> list[Case]:
    # DCNv2's mixed precisions: the four 40M-row tables (here 4M) in int4, the rest int8
    mixed = tuple("int4" if r >= 40_000_000 else "int8" for r in harness.DCN_ROWS)
    cases = []
    for fmt in ("int8", "int4"):
        cases.append(Case(f"4x4M d128 {fmt} B8192 L30 uniform", (4_000_000,) * 4, (128,) * 4, (fmt,) * 4, 8192,
                          (30,) * 4, 0.0))
        cases.append(Case(f"4x1M d64 {fmt} B16384 L20 uniform", (1_000_000,) * 4, (64,) * 4, (fmt,) * 4, 16384,
                          (20,) * 4, 0.0))
        cases.append(Case(f"4x4M d128 {fmt} B8192 L30 zipf 1.05", (4_000_000,) * 4, (128,) * 4, (fmt,) * 4, 8192,
                          (30,) * 4, 1.05))
        if quick:
            continue
        for batch in (512, 2048):
            cases.append(dcn_case(fmt, batch, 0.0))
            cases.append(dcn_case(fmt, batch, 1.05))
        cases.append(dcn_case(fmt, 16384, 0.0))
    for fmt in ("fp8_tablewise", "fp16"):
        cases.append(Case(f"4x4M d128 {fmt} B8192 L30 uniform", (4_000_000,) * 4, (128,) * 4, (fmt,) * 4, 8192,
                          (30,) * 4, 0.0))
    if not quick:
        cases.append(dcn_case(mixed, 2048, 0.0))
        cases.append(dcn_case(mixed, 16384, 1.05))
    return cases


def random_rows(fmt: str, rows: int, dim: int, gen: torch.Generator) -> q.QuantizedTable:
    """A table of random codes with sane qparams (quantizing 4M float rows per table would cost
    more than the whole measurement): the lookup's speed does not depend on the values."""
    stride = q.row_bytes(fmt, dim)
    data = torch.randint(0, 256, (rows, stride), dtype=torch.uint8, device=DEV, generator=gen)
    if fmt in ("int8", "int4"):
        qparams = torch.stack([torch.full((rows,), 0.01), torch.full((rows,), -0.5)], 1).half()
        data[:, :4] = qparams.to(DEV).view(torch.uint8)
    elif fmt == "fp8_rowwise":
        data[:, :4] = torch.full((rows, 1), 0.01).to(DEV).view(torch.uint8)
    elif fmt in ("fp16", "fp32"):
        dtype = torch.float16 if fmt == "fp16" else torch.float32
        data.view(dtype).normal_(generator=gen)
    return q.QuantizedTable(fmt, dim, data, 1.0 if fmt in q.TABLE_SCALED else None)


def fbgemm_module(case: Case, tables: list[q.QuantizedTable]) -> torch.nn.Module:
    from fbgemm_gpu.split_embedding_configs import SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode, EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

    specs = [("", t.rows, t.dim, getattr(SparseType, q.FBGEMM_TYPES[t.format]), EmbeddingLocation.DEVICE)
             for t in tables]
    module = IntNBitTableBatchedEmbeddingBagsCodegen(
        specs, pooling_mode=PoolingMode.SUM if case.pooling_mode == "sum" else PoolingMode.MEAN,
        device=torch.device(DEV), bounds_check_mode=BoundsCheckMode.NONE, output_dtype=SparseType.FP16,
        **FBGEMM_FP8)
    module.initialize_weights()
    for dest, t in zip(module.split_embedding_weights(split_scale_shifts=False), tables, strict=True):
        dest[0].copy_(q.to_fbgemm(t))
    return module


Shape = tuple[int, int, int, int]
# launch shapes tried by --sweep: (geometry policy, (rows in flight, blocks per SM, pipelined, lane bytes))
SWEEP: dict[str, list[tuple[str, Shape]]] = {
    "int8": [("fill", (4, 3, 0, 16)), ("fill", (2, 3, 1, 16)), ("fill", (8, 5, 0, 4)), ("fill", (4, 6, 0, 4)),
             ("fill", (8, 4, 0, 4))],
    "int4": [("fill", (4, 2, 1, 16)), ("fill", (2, 2, 1, 16)), ("fill", (4, 5, 0, 4)), ("fill", (8, 4, 0, 4)),
             ("fill", (4, 4, 1, 4))],
}
INT8_LIKE = ("int8", "fp8_rowwise", "fp8_tablewise", "int8_tablewise")


def layout(int8_like: Shape, int4: Shape) -> dict[str, Shape]:
    return {**dict.fromkeys(INT8_LIKE, int8_like), "int4": int4}


# --compare: every case timed under each of these launch layouts (LAUNCH_SHAPE entries of the
# byte-coded formats), FBGEMM once: the landed 16-byte chunks beside the 4-byte-word layouts.
LAYOUTS: dict[str, dict[str, Shape]] = {
    "chunk16": layout((2, 3, 1, 16), (2, 2, 1, 16)),
    "word4 r8": layout((8, 5, 0, 4), (8, 4, 0, 4)),
    "word4 r4": layout((4, 6, 0, 4), (4, 5, 0, 4)),
    "word4 r4p": layout((4, 5, 0, 4), (4, 4, 1, 4)),
    "word4 r16": layout((16, 3, 0, 4), (16, 3, 0, 4)),
}
SWEEP_CASES = ("4x4M d128 {} B8192 L30 uniform", "4x1M d64 {} B16384 L20 uniform", "4x4M d128 {} B8192 L30 zipf",
               "d128 {} B512 uniform", "d128 {} B2048 uniform", "d128 {} B16384 uniform")


def sweep(timer: harness.Timer, seed: int) -> dict[str, object]:
    """Time ours under each launch shape of SWEEP on its format's sweep cases, then keep the shape
    with the best geomean (it becomes quantized_tbe's shape for the rest of the run)."""
    found: dict[str, object] = {}
    for fmt, shapes in SWEEP.items():
        cases = [c for c in all_cases(False) if any(p.format(fmt) in c.name for p in SWEEP_CASES)]
        times: dict[str, list[float]] = {f"{pol} {shape}": [] for pol, shape in shapes}
        for case in cases:
            gen = torch.Generator(device=DEV).manual_seed(seed)
            tables = [random_rows(f, r, d, gen) for f, r, d in zip(case.formats, case.rows, case.dims, strict=True)]
            tb = harness.table_batch(list(case.rows), case.batch, list(case.pooling), case.alpha, gen)
            indices, offsets = tb.indices.int(), tb.offsets.int()
            module = QuantizedTableBatchedEmbeddingBag(tables, case.pooling_mode, torch.float16)
            for policy, shape in shapes:
                quantized_tbe.GEOMETRY_POLICY = policy
                quantized_tbe.LAUNCH_SHAPE[fmt] = shape
                times[f"{policy} {shape}"].append(timer.median_us(lambda: module(indices, offsets)))
            print(f"sweep {case.name}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in times.items()), flush=True)
        scores = {k: geomean(v) or math.inf for k, v in times.items()}
        best = min(scores, key=lambda k: scores[k])
        policy, shape = next((p, sh) for p, sh in shapes if f"{p} {sh}" == best)
        quantized_tbe.GEOMETRY_POLICY = policy
        quantized_tbe.LAUNCH_SHAPE[fmt] = shape
        found[fmt] = {"best": best, "geomean_us": scores, "times_us": times,
                      "cases": [c.name for c in cases]}
        print(f"sweep {fmt}: best {best} (geomean us {scores})", flush=True)
    return found


def compulsory_bytes(case: Case, tb: harness.TableBatch, tables: list[q.QuantizedTable]) -> int:
    unique = sum(int(torch.unique(i).numel()) * q.row_bytes(t.format, t.dim)
                 for i, t in zip(tb.per_table, tables, strict=True))
    return unique + 4 * (tb.indices.numel() + tb.offsets.numel()) + 2 * case.batch * sum(case.dims)


def run_case(case: Case, timer: harness.Timer, ceiling: float, fbgemm: bool, seed: int, hints: bool = True,
             layouts: dict[str, dict[str, Shape]] | None = None) -> Result:
    """One case, ours beside FBGEMM's; with ``layouts``, ours under each (the first is the result's
    ``ours_us``; quantized_tbe.LAUNCH_SHAPE is left as it was)."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    tables = [random_rows(f, r, d, gen) for f, r, d in zip(case.formats, case.rows, case.dims, strict=True)]
    tb = harness.table_batch(list(case.rows), case.batch, list(case.pooling), case.alpha, gen)
    indices, offsets = tb.indices.int(), tb.offsets.int()
    ours = QuantizedTableBatchedEmbeddingBag(tables, case.pooling_mode, torch.float16,
                                             pooling_factors=case.pooling if hints else None)
    nbytes = compulsory_bytes(case, tb, tables)
    result = Result(case.name, ",".join(sorted(set(case.formats))), case.batch, case.alpha, 0.0, None, nbytes)
    landed = dict(quantized_tbe.LAUNCH_SHAPE)
    first: torch.Tensor | None = None
    try:
        for name, shapes in (layouts or {"": {}}).items():
            quantized_tbe.LAUNCH_SHAPE.update(shapes)
            out = ours(indices, offsets).float()
            first = out if first is None else first
            result.layouts_diff[name] = float((out - first).abs().max() / first.abs().max().clamp(min=1e-30))
            result.layouts_us[name] = timer.median_us(lambda: ours(indices, offsets))
    finally:
        quantized_tbe.LAUNCH_SHAPE.update(landed)
    result.ours_us = next(iter(result.layouts_us.values()))
    if not layouts:
        result.layouts_us, result.layouts_diff = {}, {}
    result.pct_copy = 100 * nbytes / (result.ours_us * 1e-6) / 1e9 / ceiling
    if fbgemm and all(f in q.FBGEMM_TYPES for f in case.formats):
        theirs = fbgemm_module(case, tables)
        assert first is not None
        b = theirs(indices, offsets).float()
        result.max_rel_diff = float((first - b).abs().max() / b.abs().max().clamp(min=1e-30))
        result.fbgemm_us = timer.median_us(lambda: theirs(indices, offsets))
        result.fbgemm_pct_copy = 100 * nbytes / (result.fbgemm_us * 1e-6) / 1e9 / ceiling
        result.vs_fbgemm = result.fbgemm_us / result.ours_us
    return result


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _ratio_summary(ratios: list[float]) -> dict[str, object]:
    return {"geomean_vs_fbgemm": geomean(ratios), "min_vs_fbgemm": min(ratios) if ratios else None,
            "cases": len(ratios), "below_1.2": sum(1 for x in ratios if x < 1.2)}


def summary(results: list[Result]) -> dict[str, object]:
    out: dict[str, object] = {}
    for fmt in ("int8", "int4"):
        out[fmt] = _ratio_summary([r.vs_fbgemm for r in results if r.formats == fmt and r.vs_fbgemm])
        for name in dict.fromkeys(k for r in results for k in r.layouts_us):
            out[f"{fmt} {name}"] = _ratio_summary([r.fbgemm_us / r.layouts_us[name] for r in results
                                                   if r.formats == fmt and r.fbgemm_us and name in r.layouts_us])
    return out


def layouts_table(results: list[Result]) -> str:
    """--compare: µs and the ratio to FBGEMM under each layout, then each layout's output difference
    from the first's."""
    names = list(dict.fromkeys(k for r in results for k in r.layouts_us))
    lines = ["| case | FBGEMM µs | " + " | ".join(f"{n} µs (x)" for n in names) + " | diff vs first |",
             "| --- | ---: | " + " | ".join("---:" for _ in names) + " | ---: |"]
    for r in results:
        cells = [f"{r.layouts_us[n]:.1f}" + (f" ({r.fbgemm_us / r.layouts_us[n]:.2f})" if r.fbgemm_us else "")
                 if n in r.layouts_us else "–" for n in names]
        fb = "–" if r.fbgemm_us is None else f"{r.fbgemm_us:.1f}"
        diff = max(r.layouts_diff.values(), default=0.0)
        lines.append(f"| {r.case} | {fb} | " + " | ".join(cells) + f" | {diff:.1e} |")
    return "\n".join(lines)


def table(results: list[Result]) -> str:
    lines = ["| case | ours µs | % copy | FBGEMM µs | FBGEMM % copy | vs FBGEMM | max rel diff |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        fb = "–" if r.fbgemm_us is None else f"{r.fbgemm_us:.1f}"
        fbp = "–" if r.fbgemm_pct_copy is None else f"{r.fbgemm_pct_copy:.1f}"
        ratio = "–" if r.vs_fbgemm is None else f"{r.vs_fbgemm:.2f}"
        diff = "–" if r.max_rel_diff is None else f"{r.max_rel_diff:.1e}"
        lines.append(f"| {r.case} | {r.ours_us:.1f} | {r.pct_copy:.1f} | {fb} | {fbp} | {ratio} | {diff} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks quantized_suite", description=__doc__)
    parser.add_argument("--fbgemm", help="FBGEMM's unpacked inference pack (fbgemm-training-pack.sh, unpack.sh)")
    parser.add_argument("--tools", help="the folder holding fbgemm_training.py (its loader)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=54)
    parser.add_argument("--only", help="run the cases whose name holds this text")
    parser.add_argument("--no-hints", action="store_true", help="no pooling_factors hint (geometry from shapes)")
    parser.add_argument("--sweep", action="store_true", help="first pick each format's launch shape (SWEEP)")
    parser.add_argument("--compare", action="store_true",
                        help="time ours under each launch layout of LAYOUTS (FBGEMM once) and print them side by side")
    args = parser.parse_args(argv)
    reason = load_fbgemm(args.fbgemm, args.tools)
    if reason:
        print(reason, file=sys.stderr)
    timer = harness.Timer(args.reps)
    ceiling = harness.copy_ceiling_gbps(timer)
    print(f"device {torch.cuda.get_device_name()}; copy ceiling {ceiling:.0f} GB/s; FBGEMM: {reason or 'loaded'}",
          flush=True)
    swept = sweep(timer, args.seed) if args.sweep else {}
    results: list[Result] = []

    def report() -> dict[str, object]:
        return {"device": torch.cuda.get_device_name(), "copy_ceiling_gbps": ceiling, "fbgemm": reason or "loaded",
                "results": [asdict(r) for r in results], "summary": summary(results), "sweep": swept,
                "launch_shape": {k: list(v) for k, v in quantized_tbe.LAUNCH_SHAPE.items()},
                "layouts": {k: {f: list(v) for f, v in sh.items()} for k, sh in LAYOUTS.items()} if args.compare
                else {}, "geometry_policy": quantized_tbe.GEOMETRY_POLICY}

    for case in all_cases(args.quick):
        if args.only and args.only not in case.name:
            continue
        try:
            r = run_case(case, timer, ceiling, not reason, args.seed, not args.no_hints,
                         LAYOUTS if args.compare else None)
            torch.cuda.empty_cache()
        except Exception as error:  # one case's failure is recorded, the rest still run
            print(f"{case.name}: {type(error).__name__}: {error}"[:400], flush=True)
            continue
        results.append(r)
        layouts = f", layouts {r.layouts_us}" if r.layouts_us else ""
        print(f"{r.case}: ours {r.ours_us:.1f} us ({r.pct_copy:.1f} % copy), FBGEMM {r.fbgemm_us} us, "
              f"x{r.vs_fbgemm}, diff {r.max_rel_diff}{layouts}", flush=True)
        if args.json:  # after every case: a run cut by a time limit keeps what it measured
            with open(args.json, "w") as f:
                json.dump(report(), f, indent=1)
    print(table(results))
    if args.compare:
        print(layouts_table(results))
    print(json.dumps(summary(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
