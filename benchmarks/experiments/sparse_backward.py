"""Backward + optimizer update per training step: the fused path against torch's routes.

    python3 -m benchmarks sparse_backward --out results.md [--json results.json] [--quick]

For each case (the issue's single tables, suite 3's 10M x 192 table, DCNv2's 26 tables as
one table-batched module; uniform and Zipf 1.05 indices) and optimizer, three routes are
timed from the same forward (median of cold steps, L2 flushed, GPU time only; the timer of
``benchmarks.harness``):

* ours: ``out.backward(grad)`` of a module with a fused optimizer (sum pooling), the update
  inside the backward's passes; "two-step": the compact float32 gradient written first, then
  ``sparse_update.cu`` (the path for rows wider than one column tile); "sort alone": the
  stable sort of the rows that both begin with;
* torch sparse: ``F.embedding_bag(sparse=True)`` backward + ``torch.optim`` step
  (SGD / Adagrad / SparseAdam);
* torch dense: dense gradient + ``torch.optim`` with ``fused=True`` where torch has it
  (SGD, Adam), else its default (foreach) step.

Byte floor: indices + offsets + the output gradient + one read and one write of every
touched row and of its optimizer state (row-wise Adagrad: 4 bytes per row; Adam: two
float32 rows), at the measured copy bandwidth. torch has no row-wise Adagrad: its Adagrad
keeps a state per element (more bytes than ours); the table says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.harness import (
    DCN_POOLING,
    DCN_ROW_CAP,
    DCN_ROWS,
    Timer,
    copy_ceiling_gbps,
    zipf_indices,
)
from reference_kernels import optim
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import tuned

DEV = "cuda"


@dataclass
class Row:
    case: str
    optimizer: str
    ours_us: float
    ours_two_step_us: float  # the same with the compact float32 gradient written, then sparse_update.cu
    sort_us: float  # the stable sort of the lookups' rows alone (part of ours)
    torch_sparse_us: float
    torch_dense_us: float | None
    floor_us: float
    touched_rows: int
    speedup: float = 0.0
    pct_floor: float = 0.0


@dataclass(frozen=True)
class Case:
    name: str
    rows: list[int]  # one entry: a single table; several: a table-batched module
    dim: int
    batch: int
    pooling: list[int]
    alpha: float


def cases(quick: bool) -> list[Case]:
    out = []
    for a in (0.0, 1.05):
        out += [Case(f"4Mx128 B6912 L100 a{a}", [4_000_000], 128, 6912, [100], a),
                Case(f"40Mx128 B6912 L27 a{a}", [40_000_000], 128, 6912, [27], a),
                Case(f"10Mx192 B65536 L32 a{a} (suite 3)", [10_000_000], 192, 65536, [32], a),
                Case(f"DCNv2 26 tables B6912 a{a}", [min(r, DCN_ROW_CAP) for r in DCN_ROWS], 128, 6912,
                     DCN_POOLING, a)]
    return out[:2] if quick else out


SPECS: dict[str, Callable[[], Any]] = {
    "sgd": lambda: optim.SGD(lr=0.01),
    "rowwise_adagrad": lambda: optim.RowWiseAdagrad(lr=0.01),
    "adam": lambda: optim.Adam(lr=0.001),
}


def torch_optimizer(name: str, param: torch.Tensor, sparse: bool) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD([param], lr=0.01, **({} if sparse else {"fused": True}))
    if name == "adam":
        return torch.optim.SparseAdam([param], lr=0.001) if sparse else torch.optim.Adam([param], lr=0.001, fused=True)
    return torch.optim.Adagrad([param], lr=0.01)  # element-wise: torch has no row-wise Adagrad


def lookups(case: Case, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(table-local indices, T*B+1 offsets, global rows) of one step, table-major."""
    per_table = [zipf_indices(case.batch * p, r, case.alpha, gen)
                 for r, p in zip(case.rows, case.pooling, strict=False)]
    lengths = torch.tensor([p for p in case.pooling for _ in range(case.batch)], device=DEV)
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    starts = torch.tensor([0] + case.rows[:-1], device=DEV).cumsum(0)
    global_rows = torch.cat([i + s for i, s in zip(per_table, starts.tolist(), strict=False)])
    return torch.cat(per_table), offsets, global_rows


def floor_bytes(case: Case, name: str, indices: torch.Tensor, offsets: torch.Tensor,
                global_rows: torch.Tensor) -> tuple[int, int]:
    touched = int(torch.unique(global_rows).numel())
    row = case.dim * 4
    state = {"sgd": 0, "rowwise_adagrad": 4, "adam": 2 * row}[name]
    grad_out = case.batch * len(case.rows) * row
    moved = indices.numel() * 8 + offsets.numel() * 8 + grad_out + 2 * touched * (row + state)
    return moved, touched


def measure(case: Case, name: str, timer: Timer, gbps: float, gen: torch.Generator, dense: bool) -> Row:
    indices, offsets, global_rows = lookups(case, gen)
    total_rows = sum(case.rows)
    tables = len(case.rows)
    module = TableBatchedEmbeddingBag(case.rows, case.dim, device=DEV, optimizer=SPECS[name]())
    module.check_indices = False
    out = module(indices, offsets)
    grad = torch.randn(out.shape, generator=gen, device=DEV)
    # (the closures run before `del out` below; pyflakes cannot tell)
    ours = timer.median_us(lambda: out.backward(grad, retain_graph=True))  # noqa: F821
    with tuned(fuse_into_passes=False):
        two_step = timer.median_us(lambda: out.backward(grad, retain_graph=True))  # noqa: F821
    keys = global_rows.to(torch.int32)
    sort_us = timer.median_us(lambda: torch.sort(keys, stable=True))
    weight = module.weight.detach()
    del out, module
    # torch: one table of all rows, global indices, bags in table-major order (same bytes)
    grad_rows = grad.view(case.batch, tables, case.dim).transpose(0, 1).reshape(-1, case.dim).contiguous()
    routes: dict[bool, float | None] = {}
    for sparse in (True, False):
        if not sparse and not dense:
            routes[sparse] = None
            continue
        param = torch.nn.Parameter(weight)
        opt = torch_optimizer(name, param, sparse)
        t_out = F.embedding_bag(global_rows, param, offsets, mode="sum", sparse=sparse, include_last_offset=True)

        def step() -> None:  # timed before the `del` below (pyflakes cannot tell)
            t_out.backward(grad_rows, retain_graph=True)  # noqa: F821
            opt.step()  # noqa: F821
            param.grad = None  # noqa: F821

        routes[sparse] = timer.median_us(step)
        del t_out, opt, param
        torch.cuda.empty_cache()
    moved, touched = floor_bytes(case, name, indices, offsets, global_rows)
    floor = moved / (gbps * 1e9) * 1e6
    best = min(v for v in routes.values() if v is not None)
    row = Row(case.name, name, ours, two_step, sort_us, routes[True] or 0.0, routes[False], floor, touched)
    row.speedup, row.pct_floor = best / ours, 100 * floor / ours
    del weight
    torch.cuda.empty_cache()
    assert total_rows > 0
    return row


def table_md(rows: list[Row], gbps: float) -> str:
    lines = [f"Backward + update per step, H200, median of cold steps (L2 flushed); byte floor at the measured "
             f"copy bandwidth {gbps:.0f} GB/s; float32 weights and state, sum pooling, int64 indices.", "",
             "| case | optimizer | ours µs | ours two-step µs | sort alone µs | torch sparse µs | torch dense µs | "
             "speedup vs torch's fastest | byte floor µs | % of floor | touched rows |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dense = "—" if r.torch_dense_us is None else f"{r.torch_dense_us:,.0f}"
        lines.append(f"| {r.case} | {r.optimizer} | {r.ours_us:,.0f} | {r.ours_two_step_us:,.0f} | {r.sort_us:,.0f} | "
                     f"{r.torch_sparse_us:,.0f} | {dense} | "
                     f"{r.speedup:.2f}× | {r.floor_us:,.0f} | {r.pct_floor:.0f} % | {r.touched_rows:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="the first two cases only")
    parser.add_argument("--uniform-only", action="store_true", help="the uniform-index cases only")
    parser.add_argument("--no-dense", action="store_true", help="skip torch's dense route on tables over 8M rows")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    timer = Timer(args.reps)
    gbps = copy_ceiling_gbps(timer)
    gen = torch.Generator(device=DEV).manual_seed(0)
    rows = []
    for case in cases(args.quick):
        if args.uniform_only and case.alpha:
            continue
        for name in SPECS:
            big = sum(case.rows) > 20_000_000
            if name == "adam" and big:
                continue  # 40M x 128 x 3 float32 copies for each route: left out (memory and time)
            dense = not (args.no_dense and sum(case.rows) > 8_000_000)
            row = measure(case, name, timer, gbps, gen, dense)
            rows.append(row)
            print(f"{row.case:40s} {row.optimizer:16s} ours {row.ours_us:9.1f} us "
                  f"(two-step {row.ours_two_step_us:9.1f}, sort {row.sort_us:7.1f})  torch sparse "
                  f"{row.torch_sparse_us:9.1f}  dense {row.torch_dense_us or 0:9.1f}  x{row.speedup:5.2f}  "
                  f"{row.pct_floor:5.1f} % of floor", flush=True)
    text = table_md(rows, gbps)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbps": gbps, "rows": [asdict(r) for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
