"""When do suite 1's warps start and finish? (device diagnostics for docs/perf-log.md, change 29.)

scripts/fixed_cost.py found suite 1's kernel streams as fast as a copy but carries a fixed cost
~5.5 us larger. This script compiles a copy of embedding_bag_forward.cu (in a temporary
directory; the committed source is untouched) whose general kernel also writes, per team, the
global timer when the team starts, when its first rows have arrived and when it has issued its
result, and its SM, into the argmax buffer (unused by sum). Launched exactly as the launcher
does, after the benchmark's clean L2 flush and head start; the call's event time next to it.
The spread of the start times is the launch; the spread of the end times is the tail."""
import shutil
import statistics
import tempfile
from pathlib import Path

import torch

from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite, table, zipf_indices

STAMP = 'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"({name}));'
PATCHES = [  # (anchor in the general kernel, text inserted after it)
    ("  const i64 col0 = (work % col_tiles) * (i64)TILE_COLS;\n",
     "  u64 t_start, t_first = 0, t_end; u32 smid;\n  " + STAMP.format(name="t_start") + "\n"
     '  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));\n'),
    ("        add_row(acc, x[u], w[u], row[u], dim, col0, row_lane);\n      }\n",
     "      if (t_first == 0) { " + STAMP.format(name="t_first") + " }\n"),
    ("  if (group == 0) store_result(acc, col0, row_lane, out, argmax, out_row, dim);\n",
     "  " + STAMP.format(name="t_end") + "\n"
     "  if (team_lane == 0) { argmax[4 * work] = (i64)t_start; argmax[4 * work + 1] = (i64)t_first;\n"
     "    argmax[4 * work + 2] = (i64)t_end; argmax[4 * work + 3] = smid; }\n"),
]


def traced_source(tmp: Path) -> None:
    for name in ("common.cuh", "embedding_bag_forward.cu"):
        shutil.copy(_nvrtc.KERNEL_DIR / name, tmp / name)
    src = (tmp / "embedding_bag_forward.cu").read_text()
    general = src.index("embedding_bag_forward(")
    for anchor, text in PATCHES:
        at = src.index(anchor, general) + len(anchor)
        src = src[:at] + text + src[at:]
    (tmp / "embedding_bag_forward.cu").write_text(src)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


suite = Suite(reps=100, quick=False, seed=61)
with tempfile.TemporaryDirectory() as tmp_dir:
    traced_source(Path(tmp_dir))
    _nvrtc.KERNEL_DIR = Path(tmp_dir)
    _launch._PLANS.clear()
    for dtype, pooling in ((torch.float32, 150), (torch.bfloat16, 150), (torch.float32, 1200)):
        weight = table(5_000_000, 128, dtype, suite.gen)
        batch, dim = 2048, 128
        idx = zipf_indices(batch * pooling, 5_000_000, 0.0, suite.gen).view(batch, pooling)
        plan = _launch._forward_plan(weight, idx, "sum", False, False, pooling)
        out = torch.empty(batch, dim, dtype=dtype, device="cuda")
        trace = torch.zeros(batch * plan.col_tiles * 4, dtype=torch.int64, device="cuda")
        grid = -(-batch * plan.col_tiles * plan.team // _launch.BLOCK)
        args = [(weight.data_ptr(), _nvrtc.PTR), (dim, _nvrtc.I64), (idx.data_ptr(), _nvrtc.PTR),
                (idx.numel(), _nvrtc.I64), (0, _nvrtc.PTR), (0, _nvrtc.I64), (pooling, _nvrtc.I64),
                (batch, _nvrtc.I64), (plan.col_tiles, _nvrtc.I32), (0, _nvrtc.PTR), (-1, _nvrtc.I64), (0, _nvrtc.PTR),
                (batch, _nvrtc.I64), (dim, _nvrtc.I64), (out.data_ptr(), _nvrtc.PTR), (trace.data_ptr(), _nvrtc.PTR)]

        def call() -> None:
            _launch._launch_on(weight, plan.fn, grid, args)

        call()
        torch.testing.assert_close(out.float(), torch.nn.functional.embedding_bag(idx, weight, mode="sum").float(),
                                   rtol=2e-2, atol=2e-2)
        event_us = suite.timer.median_us(call)  # the trace holds the last timed call
        t = trace.view(-1, 4).cpu().tolist()
        t0 = min(r[0] for r in t)
        start = [(r[0] - t0) / 1e3 for r in t]
        first = [(r[1] - t0) / 1e3 for r in t]
        end = [(r[2] - t0) / 1e3 for r in t]
        sm_end = {}
        for r, e in zip(t, end):
            sm_end[r[3]] = max(sm_end.get(r[3], 0.0), e)
        ticks = len({r[0] for r in t})
        print(f"{str(dtype)[6:]} B{batch} L{pooling}: event time {event_us:.1f} us, {len(t)} teams, "
              f"{len(sm_end)} SMs, {ticks} distinct start stamps", flush=True)
        for label, values in (("start", start), ("first rows added", first), ("result issued", end),
                              ("SM's last result", list(sm_end.values()))):
            print(f"  {label:18s} us after the first start: min {min(values):6.2f} p10 {pct(values, .1):6.2f} "
                  f"median {statistics.median(values):6.2f} p90 {pct(values, .9):6.2f} max {max(values):6.2f}",
                  flush=True)
        del weight
        torch.cuda.empty_cache()
