"""Ours against FBGEMM's TBE forward on the skewed (Zipf) cases of issue 27, side by side.

    python3 -m benchmarks fbgemm_skew [--fbgemm DIR] [--reps 100] [--only NAME,...] [--ncu]
                                      [--host] [--json FILE]

Each case: FBGEMM's output is compared with ours first (a wrong argument would time the wrong
thing), then both are timed cold (the suite's Timer: L2 flushed, head start, median of
``--reps``). ``--ncu``: no timing; each case's call runs once (ours, then FBGEMM) between
cudaProfilerStart/Stop, for ``ncu --profile-from-start off``. ``--host``: host time per eager
call of the 1M x 128 B2048 L20 sum call (ours without and with the index check, torch,
FBGEMM) and a cProfile of ours.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks import fbgemm_peer
from benchmarks.harness import DCN_POOLING, DCN_ROW_CAP, DCN_ROWS, DEV, Timer, geomean, host_us, table_batch
from reference_kernels import diagnostics
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import overrides_from_spec, tuned


@dataclass(frozen=True)
class Case:
    name: str
    rows: list[int]
    dim: int
    batch: int
    pooling: list[int]
    alpha: float
    dtype: torch.dtype
    mode: str = "sum"
    psw: bool = False  # per-sample weights (sum)
    single: bool = False  # one table through embedding_bag (the sweep's calls), not the table-batched module


def cases() -> list[Case]:
    dcn_rows = [min(r, DCN_ROW_CAP) for r in DCN_ROWS]
    out: list[Case] = []
    for alpha in (0.0, 1.05, 1.2):
        for dtype in (torch.float32, torch.float16):
            tag = "f32" if dtype == torch.float32 else "f16"
            out.append(Case(f"12x500Kx128 L150 a{alpha} {tag}", [500_000] * 12, 128, 2048, [150] * 12, alpha, dtype))
            out.append(Case(f"DCNv2 B6912 a{alpha} {tag}", dcn_rows, 128, 6912, DCN_POOLING, alpha, dtype))
    for dim in (32, 64):
        for alpha in (0.0, 1.05):
            out.append(Case(f"8x1Mx{dim} B16384 L20 a{alpha} f32", [1_000_000] * 8, dim, 16384, [20] * 8, alpha,
                            torch.float32))
    out.append(Case("2x10Mx192 B65536 L32 a1.15 f16", [10_000_000] * 2, 192, 65536, [32, 32], 1.15, torch.float16))
    # the suite's other cases below FBGEMM: mean and per-sample weights, wide rows, the sweep's skewed bags
    for alpha in (0.0, 1.05, 1.2):
        for dtype in (torch.float32, torch.float16):
            tag = "f32" if dtype == torch.float32 else "f16"
            out.append(Case(f"DCNv2 B6912 a{alpha} {tag} mean", dcn_rows, 128, 6912, DCN_POOLING, alpha, dtype,
                            "mean"))
            out.append(Case(f"DCNv2 B6912 a{alpha} {tag} psw", dcn_rows, 128, 6912, DCN_POOLING, alpha, dtype,
                            psw=True))
            out.append(Case(f"12x500Kx128 L150 a{alpha} {tag} psw", [500_000] * 12, 128, 2048, [150] * 12, alpha,
                            dtype, psw=True))
    for alpha in (0.0, 1.15):
        for dtype in (torch.float32, torch.float16):
            tag = "f32" if dtype == torch.float32 else "f16"
            out.append(Case(f"2x10Mx192 B65536 L32 a{alpha} {tag} mean", [10_000_000] * 2, 192, 65536, [32, 32],
                            alpha, dtype, "mean"))
            out.append(Case(f"2x10Mx192 B65536 L32 a{alpha} {tag} psw", [10_000_000] * 2, 192, 65536, [32, 32],
                            alpha, dtype, psw=True))
    for dim in (32, 64):  # narrow rows: the mean and 16-bit variants (the loop above: float32 sum)
        for alpha in (0.0, 1.05, 1.2):
            for dtype, mode in ((torch.float32, "mean"), (torch.float16, "sum"), (torch.float16, "mean")):
                tag = "f32" if dtype == torch.float32 else "f16"
                out.append(Case(f"8x1Mx{dim} B16384 L20 a{alpha} {tag} {mode}", [1_000_000] * 8, dim, 16384,
                                [20] * 8, alpha, dtype, mode))
    for dim, pooling in ((128, 16), (32, 64)):
        for batch in (32768, 131072):
            for alpha in (0.0, 1.05, 1.15):
                out.append(Case(f"sweep d{dim} B{batch} L{pooling} a{alpha} csr f32", [1_000_000], dim, batch,
                                [pooling], alpha, torch.float32, single=True))
    return out


@dataclass
class Row:
    case: str
    ours_us: float
    fbgemm_us: float
    vs_fbgemm: float
    max_abs_diff: float


def build(case: Case, gen: torch.Generator) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    tbe = TableBatchedEmbeddingBag(case.rows, case.dim, case.mode, case.dtype, DEV)
    tbe.check_indices = False
    tb = table_batch(case.rows, case.batch, case.pooling, case.alpha, gen)
    psw = (torch.rand(tb.indices.numel(), generator=gen, device=DEV).to(case.dtype) if case.psw else None)
    starts = tbe.table_rows.tolist()
    peer = fbgemm_peer.FbgemmForward(tbe.weight.detach(), starts, tb.indices, tb.offsets, case.mode, psw)

    def ours() -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor
            if case.single:
                out = rk.embedding_bag(tb.indices, tbe.weight, tb.offsets, mode=case.mode, per_sample_weights=psw,
                                       include_last_offset=True, check_indices=False)
            else:
                out = tbe(tb.indices, tb.offsets, psw)
            return out

    return ours, peer


def variant_changes(spec: str) -> dict[str, object]:
    """``"MIN_BLOCKS=4,segment_max_avg=32"``: UPPER-case names are compile-time defines forced on
    the forward kernels, lower-case ones Tuning knobs (reference_kernels.tuning)."""
    defines = ",".join(item for item in spec.split(",") if item.split("=")[0].isupper())
    knobs: dict[str, object] = {name: int(value) for name, value in (item.split("=") for item in spec.split(",")
                                                                      if item and not item.split("=")[0].isupper())}
    return {**knobs, "overrides": overrides_from_spec(defines)}


def timed(args: argparse.Namespace, chosen: list[Case]) -> list[Row]:
    timer = Timer(args.reps)
    gen = torch.Generator(device=DEV).manual_seed(args.seed)
    rows = []
    for case in chosen:
        ours, peer = build(case, gen)
        expected = peer().float()
        diff = float((ours().float() - expected).abs().max())
        ours_us, fb_us = timer.median_us(ours), timer.median_us(peer)
        row = Row(case.name, ours_us, fb_us, fb_us / ours_us, diff)
        rows.append(row)
        print(f"{case.name:36s} ours {ours_us:8.1f} us  fbgemm {fb_us:8.1f} us  x{row.vs_fbgemm:5.2f}  "
              f"max|diff| {diff:.2e}", flush=True)
        for spec in args.variants:
            with tuned(**variant_changes(spec)):  # a variant that forces a tiling is checked too
                variant_diff = float((ours().float() - expected).abs().max())
                us = timer.median_us(ours)
            print(f"{'':36s} ours {us:8.1f} us  with {spec:28s} x{fb_us / us:5.2f}  max|diff| {variant_diff:.2e}",
                  flush=True)
        del ours, peer
        torch.cuda.empty_cache()
    print(f"geomean vs FBGEMM {geomean([r.vs_fbgemm for r in rows]):.3f}, "
          f"worst {min(r.vs_fbgemm for r in rows):.3f}", flush=True)
    return rows


def profiled(chosen: list[Case], seed: int) -> None:
    gen = torch.Generator(device=DEV).manual_seed(seed)
    for case in chosen:
        ours, peer = build(case, gen)
        for _ in range(3):
            ours(), peer()
        torch.cuda.synchronize()
        print(f"== {case.name}: ours then FBGEMM", flush=True)
        torch.cuda.profiler.start()
        ours()
        torch.cuda.synchronize()
        peer()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del ours, peer
        torch.cuda.empty_cache()


ROUNDS = 9  # host measurement: rounds of 400 calls of each function in turn


def host_overhead(seed: int) -> dict[str, float]:
    """Host µs per eager call of the 1M x 128 B2048 L20 sum call (GPU held busy): median of
    ROUNDS x 400 calls, the functions taking turns, and each one's paired ratio to torch's."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    weight = torch.randn(1_000_000, 128, generator=gen, device=DEV)
    idx = torch.randint(0, 1_000_000, (2048 * 20,), generator=gen, device=DEV)
    offsets = torch.arange(0, idx.numel() + 1, 20, device=DEV)
    peer = fbgemm_peer.FbgemmForward(weight, [0], idx, offsets, "sum")
    tbe = TableBatchedEmbeddingBag([1_000_000], 128, "sum", torch.float32, DEV)  # one table: FBGEMM's module shape
    tbe.check_indices = False
    checked_tbe = TableBatchedEmbeddingBag([1_000_000], 128, "sum", torch.float32, DEV)  # the default check
    torch_module = torch.nn.EmbeddingBag(1_000_000, 128, mode="sum", include_last_offset=True, device=DEV)
    calls: dict[str, Callable[[], object]] = {
        "ours TBE module (no check)": lambda: tbe(idx, offsets),
        "ours TBE module (default check)": lambda: checked_tbe(idx, offsets),
        "ours (no check)": lambda: rk.embedding_bag(idx, weight, offsets, mode="sum", include_last_offset=True,
                                                    check_indices=False),
        "ours (default check)": lambda: rk.embedding_bag(idx, weight, offsets, mode="sum",
                                                         include_last_offset=True),
        "torch": lambda: F.embedding_bag(idx, weight, offsets, mode="sum", include_last_offset=True),
        # the same call through torch's module: a module's call (ours: the TBE module) beside a module's
        "torch module": lambda: torch_module(idx, offsets),
        "fbgemm": peer,
    }
    calls["ours (no check)"]()  # plans the calls; with REFERENCE_KERNELS_HOST_PATH=wait, builds the host path
    print(f"compiled host path: {diagnostics.host_path_status()}", flush=True)
    python_path = {f"{name}, Python path": calls[name] for name in (
        "ours (no check)", "ours (default check)", "ours TBE module (no check)", "ours TBE module (default check)")}
    if diagnostics.host_path_status().state == "loaded":  # the same calls without it: what it saves
        calls.update(python_path)
    result = {}
    for grad in (False, True):
        weight.requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            # rounds of every call in turn: a drifting host (other tenants) shifts all of a round
            samples: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(ROUNDS):
                for name, fn in calls.items():
                    with diagnostics.python_host_path() if name in python_path else contextlib.nullcontext():
                        samples[name].append(host_us(fn, calls=400))
            for name, values in samples.items():
                key = f"{name}{' grad' if grad else ''}"
                result[key] = statistics.median(values)
                # paired: each round's ratio to torch's, then the median of the ratios
                ratio = statistics.median(v / t for v, t in zip(values, samples["torch"], strict=True))
                result[f"{key} / torch"] = ratio
                line = f"host per call {key:28s} {result[key]:7.1f} us  {ratio:5.2f}x torch's (paired median)"
                if "module" in name:  # a module's call: also beside torch's module (nn.EmbeddingBag)
                    ratio = statistics.median(v / t for v, t in zip(values, samples["torch module"], strict=True))
                    result[f"{key} / torch module"] = ratio
                    line += f", {ratio:5.2f}x torch's module's"
                print(line, flush=True)
    for grad in (False, True):  # where the host time goes: 300 calls while the GPU sleeps (queue never full)
        weight.requires_grad_(grad)
        fn = calls["ours (no check)"]
        with torch.set_grad_enabled(grad):
            fn()
            torch.cuda.synchronize()
            torch.cuda._sleep(1_000_000_000)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(300):
                fn()
            prof.disable()
            torch.cuda.synchronize()
        print(f"== cProfile, 300 calls of ours (no check), grad {grad}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fbgemm", help=f"FBGEMM's forward library directory (default ${fbgemm_peer.ENV_DIR})")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated substrings of case names")
    p.add_argument("--ncu", action="store_true")
    p.add_argument("--host", action="store_true")
    p.add_argument("--json")
    p.add_argument("--variant", dest="variants", action="append", default=[],
                   help="also time ours with these changes: compile-time defines (UPPER=1) and tuning knobs "
                        "(lower=1), e.g. MIN_BLOCKS=4,segment_max_avg=32; repeatable")
    args = p.parse_args()
    source = fbgemm_peer.locate(args.fbgemm)
    print(f"FBGEMM: {source}", flush=True)
    if not source.available:
        return 2
    wanted = [s for s in args.only.split(",") if s]
    chosen = [c for c in cases() if not wanted or any(w in c.name for w in wanted)]
    if args.ncu:
        profiled(chosen, args.seed)
        return 0
    info: dict[str, object] = {}
    if args.host:
        info["host_us"] = host_overhead(args.seed)
    else:
        info["rows"] = [asdict(r) for r in timed(args, chosen)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(info, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
