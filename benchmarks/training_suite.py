"""Training suite: ``python3 -m benchmarks training_suite [--quick] [--fbgemm DIR] --out PREFIX`` (repository root).

One training step (forward, backward, fused optimizer update) of three libraries on the same
tables, indices and output gradient, per case (docs/training.md):

* ours: ``TableBatchedEmbeddingBag(optimizer=SGD | RowWiseAdagrad)`` with its default index
  check (``--check none``: ``check_indices="ignore"``);
* FBGEMM: fbgemm-gpu 1.6.0's ``SplitTableBatchedEmbeddingBagsCodegen`` (EXACT_SGD,
  EXACT_ROWWISE_ADAGRAD), loaded by ``../shared/tools/fbgemm_training.py`` from ``--fbgemm DIR``
  (the folder ``fbgemm-training-pack.sh`` packs, unpacked by its ``unpack.sh``), with its default
  bounds check (WARNING; ``--check none``: NONE);
* torch: its fastest route, one ``F.embedding_bag`` over all tables with a sparse gradient, then
  ``torch.optim.SGD`` or ``torch.optim.Adagrad`` (element-wise: Adagrad-like, not row-wise).

Per library and case: GPU time per step (CUDA events, median of 20 steps, L2 flushed before
each, the GPU held asleep until the host has enqueued the step: harness.Timer), wall time per
step of 20 back-to-back steps (no synchronisation inside the loop: a step that synchronises or
spends more host time than GPU time shows here; the median of up to five loops, ours and FBGEMM's
taken in turn), and host time per step while the GPU sleeps (harness.host_us_unqueued: what
the host spends enqueueing one step, over 20 steps, or fewer where the GPU woke before the host
had enqueued them, as the DLRM step's launches fill the driver's launch queue; none where even
one step waits for the GPU). Before timing, one step of ours and one of FBGEMM from the same
weights: the rows they updated must agree (``check``).

Writes ``PREFIX.json`` (every figure, the environment, the summary), ``PREFIX.txt`` (the table) and
``PREFIX.host_profile.txt`` (per case, cProfile of 20 of our steps: where the host time goes).
``--only SUBSTRING`` runs the cases whose name contains it (a long suite in several calls).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks import harness

STEPS = 20  # timed steps per figure (GPU time: median; wall: back to back)
WALL_LOOPS = 5  # wall time: the median of this many loops of STEPS back-to-back steps ...
WALL_BUDGET_S = 0.5  # ... fewer where they would take longer than this (torch's slow routes: one)
LR = 0.01
EPS = 1e-8
OPTIMIZERS = ("sgd", "rowwise_adagrad")
ROOT = Path(__file__).resolve().parent.parent
# where fbgemm_training.py lives: ../shared/tools beside the checkout, or shared/tools inside it
TOOLS = [ROOT.parent / "shared" / "tools", ROOT / "shared" / "tools"]


@dataclass(frozen=True)
class Case:
    """One training configuration: tables of ``rows`` (one dim), B bags per table of ``pooling``
    lookups each (per table), indices uniform (alpha 0) or Zipf(alpha)."""

    name: str
    rows: tuple[int, ...]
    dim: int
    batch: int
    pooling: tuple[int, ...]
    alpha: float
    optimizer: str
    weights: str = "fp32"  # or "fp16" (float32 optimizer state either way)
    psw: bool = False  # per-sample weights (float32 weights only)

    @property
    def dtype(self) -> torch.dtype:
        return torch.float16 if self.weights == "fp16" else torch.float32


def _shapes() -> list[tuple[str, tuple[int, ...], int, int, tuple[int, ...]]]:
    """(label, rows, dim, batch, pooling) of the issue's shapes."""
    dcn_rows = tuple(min(r, harness.DCN_ROW_CAP) for r in harness.DCN_ROWS)
    return [
        ("4Mx128 B6912 L100", (4_000_000,), 128, 6912, (100,)),
        ("40Mx128 B6912 L27", (40_000_000,), 128, 6912, (27,)),
        ("10Mx192 B65536 L32", (10_000_000,), 192, 65536, (32,)),
        ("DCNv2 26 tables B6912", dcn_rows, 128, 6912, tuple(harness.DCN_POOLING)),
        ("narrow 8x1Mx32 B16384 L20", (1_000_000,) * 8, 32, 16384, (20,) * 8),
        ("narrow 8x1Mx64 B16384 L20", (1_000_000,) * 8, 64, 16384, (20,) * 8),
    ]


def _alpha_label(alpha: float) -> str:
    return "uniform" if alpha == 0 else f"zipf{alpha:g}"


def all_cases() -> list[Case]:
    """Every shape x (uniform, Zipf 1.05, Zipf 1.2) x both optimizers; 16-bit weights and
    per-sample weights on the 4M and DCNv2 shapes (uniform, Zipf 1.05)."""
    cases = []
    for label, rows, dim, batch, pooling in _shapes():
        for alpha in (0.0, 1.05, 1.2):
            for opt in OPTIMIZERS:
                cases.append(Case(f"{label} {_alpha_label(alpha)} {opt}", rows, dim, batch, pooling, alpha, opt))
    for label, rows, dim, batch, pooling in (_shapes()[0], _shapes()[3]):
        for alpha in (0.0, 1.05):
            for opt in OPTIMIZERS:
                tail = f"{_alpha_label(alpha)} {opt}"
                cases.append(Case(f"{label} fp16 {tail}", rows, dim, batch, pooling, alpha, opt, weights="fp16"))
                cases.append(Case(f"{label} psw {tail}", rows, dim, batch, pooling, alpha, opt, psw=True))
    return cases


QUICK = ("4Mx128 B6912 L100 uniform sgd", "4Mx128 B6912 L100 zipf1.05 sgd",
         "4Mx128 B6912 L100 zipf1.05 rowwise_adagrad",
         "40Mx128 B6912 L27 zipf1.05 sgd", "40Mx128 B6912 L27 zipf1.05 rowwise_adagrad",
         "narrow 8x1Mx32 B16384 L20 zipf1.05 rowwise_adagrad", "4Mx128 B6912 L100 fp16 zipf1.05 rowwise_adagrad",
         "4Mx128 B6912 L100 psw zipf1.05 sgd")


def quick_cases() -> list[Case]:
    """A subset that runs in a few minutes on one H100: each kind of case once."""
    by_name = {c.name: c for c in all_cases()}
    return [by_name[name] for name in QUICK]


@dataclass
class Figures:
    """One library's figures on one case (None: not run; ``error`` says why)."""

    gpu_us: float | None = None
    wall_us: float | None = None
    host_us: float | None = None
    error: str = ""


@dataclass
class CaseResult:
    case: str
    optimizer: str
    weights: str
    psw: bool
    alpha: float
    positions: int
    ours: Figures = field(default_factory=Figures)
    fbgemm: Figures = field(default_factory=Figures)
    torch: Figures = field(default_factory=Figures)
    host_profile: str = ""  # cProfile of our steps' host time (PREFIX.host_profile.txt)
    check: str = ""  # FBGEMM's and our updated rows: "ok (...)", "MISMATCH (...)" or why not checked
    gpu_vs_fbgemm: float | None = None  # FBGEMM's GPU time over ours: above 1, ours is faster
    gpu_vs_torch: float | None = None
    wall_vs_fbgemm: float | None = None
    wall_vs_torch: float | None = None


@dataclass
class Inputs:
    indices: torch.Tensor  # int64, every table's indices, table-major
    offsets: torch.Tensor  # int64, T * B + 1
    psw: torch.Tensor | None
    grad: torch.Tensor  # [B, T * dim], the weights' dtype
    starts: list[int]  # each table's first row in the concatenated weight


def make_inputs(case: Case, gen: torch.Generator) -> Inputs:
    tb = harness.table_batch(list(case.rows), case.batch, list(case.pooling), case.alpha, gen)
    n = tb.indices.numel()
    psw = torch.rand(n, generator=gen, device=harness.DEV) if case.psw else None
    grad = torch.randn(case.batch, len(case.rows) * case.dim, generator=gen, device=harness.DEV).to(case.dtype)
    starts = [0]
    for r in case.rows[:-1]:
        starts.append(starts[-1] + r)
    return Inputs(tb.indices, tb.offsets, psw, grad, starts)


def measure(step: Callable[[], object], timer: harness.Timer) -> Figures:
    """GPU time (median of STEPS cold steps), wall time per step (STEPS back to back: the median
    of up to WALL_LOOPS such loops, so that one stall of a shared host does not decide it) and
    host time per step (the GPU asleep: harness.host_us_unqueued) of ``step``."""
    return measure_side_by_side([step], timer)[0]


def measure_side_by_side(steps: list[Callable[[], object]], timer: harness.Timer) -> list[Figures]:
    """``measure`` of each step, their wall loops taken in turn (A B A B ...): the host machine's
    speed drifts by 10-20 % within a minute (docs/perf/change-59.md), so wall times compared
    between libraries are measured interleaved, not one library's minute after the other's."""
    gpu = [timer.median_us(step) for step in steps]
    loops: list[list[float]] = [[] for _ in steps]
    while (len(loops[0]) < WALL_LOOPS
           and sum(map(sum, loops)) * STEPS < WALL_BUDGET_S * 1e6 * len(steps)):
        for step, taken in zip(steps, loops, strict=True):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
            taken.append((time.perf_counter() - t0) / STEPS * 1e6)
    return [Figures(gpu_us=g, wall_us=statistics.median(taken), host_us=harness.host_us_unqueued(step))
            for step, g, taken in zip(steps, gpu, loops, strict=True)]


def host_profile(step: Callable[[], object], top: int = 25) -> str:
    """Where the host time of STEPS steps goes (cProfile, the GPU held asleep so that no step
    waits for it unless it synchronises): the top functions by their own time."""
    import cProfile
    import io
    import pstats

    step()
    torch.cuda.synchronize()
    torch.cuda._sleep(400_000_000)  # ~0.2 s: profiled steps run slower than plain ones
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(STEPS):
        step()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def ours_module(case: Case, check: str) -> Any:
    from reference_kernels import optim
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    spec = optim.SGD(lr=LR) if case.optimizer == "sgd" else optim.RowWiseAdagrad(lr=LR, eps=EPS)
    return TableBatchedEmbeddingBag(list(case.rows), case.dim, dtype=case.dtype, device=harness.DEV,
                                    optimizer=spec, check_indices="deferred" if check == "default" else "ignore")


def fbgemm_module(case: Case, check: str, initial: torch.Tensor, starts: list[int]) -> Any:
    import fbgemm_training

    precision = "fp16" if case.weights == "fp16" else "fp32"
    module = fbgemm_training.tbe(list(case.rows), case.dim, case.optimizer, lr=LR, eps=EPS, weights=precision,
                                 output=precision, bounds_check="warning" if check == "default" else "none")
    with torch.no_grad():
        for table, start, rows in zip(module.split_embedding_weights(), starts, case.rows, strict=True):
            table.copy_(initial[start:start + rows])
    return module


def compare_updates(case: Case, inputs: Inputs, ours: torch.Tensor, theirs: list[torch.Tensor],
                    initial_rows: torch.Tensor, rows: torch.Tensor) -> str:
    """Our and FBGEMM's weights on the rows one step updated (global ``rows``; ``initial_rows``
    their values before): equal within the float32 summation-order bound (1e-3 of the largest
    change) plus, for 16-bit weights, two units in the last place."""
    table_of = torch.searchsorted(torch.tensor(inputs.starts, device=rows.device), rows, right=True) - 1
    fb = torch.empty_like(initial_rows)
    for t, table in enumerate(theirs):
        pick = (table_of == t).nonzero().squeeze(1)
        fb[pick] = table[rows[pick] - inputs.starts[t]]
    mine = ours[rows].float()
    fb32, before = fb.float(), initial_rows.float()
    change = (mine - before).abs().max().item()
    ulps = 2 * 2.0**-10 if case.weights == "fp16" else 0.0
    bound = 1e-3 * change + ulps * mine.abs()
    worst = ((mine - fb32).abs() - bound).max().item()
    diff = (mine - fb32).abs().max().item()
    verdict = "ok" if worst <= 0 and change > 0 else "MISMATCH"
    return f"{verdict} (max |ours - fbgemm| {diff:.3g}, largest change {change:.3g}, {rows.numel()} rows)"


def _free() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _fail(error: BaseException) -> Figures:
    return Figures(error=f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300])


def fbgemm_into(result: CaseResult, fbgemm_reason: str,
                check_and_time: Callable[[], tuple[str, Figures, Figures]]) -> None:
    """FBGEMM's check and figures, and ours measured side by side with them, into ``result``
    (``check_and_time`` builds, checks and times it, its module freed on return), or why it did
    not run. A failure (out of memory, a refused case) is recorded in the case and the run goes
    on (ours then measured alone)."""
    if fbgemm_reason:
        result.fbgemm.error = result.check = fbgemm_reason
        return
    try:
        result.check, result.fbgemm, result.ours = check_and_time()
    except Exception as error:
        result.fbgemm = _fail(error)
        result.check = result.check or f"not checked: {result.fbgemm.error}"
    _free()


def run_case(case: Case, timer: harness.Timer, fbgemm_reason: str, check: str, seed: int) -> CaseResult:
    """FBGEMM first (built from our initial weights, checked against our first step, timed,
    freed), then ours, then torch from our weights: at most two copies of the tables at once."""
    gen = torch.Generator(device=harness.DEV).manual_seed(seed)
    inputs = make_inputs(case, gen)
    result = CaseResult(case.name, case.optimizer, case.weights, case.psw, case.alpha, inputs.indices.numel())
    ours: Any = ours_module(case, check)
    psw_args = () if inputs.psw is None else (inputs.psw,)

    def ours_step() -> None:
        ours(inputs.indices, inputs.offsets, *psw_args).backward(inputs.grad)

    fbgemm_into(result, fbgemm_reason, partial(check_and_time_fbgemm, case, inputs, ours, ours_step, check, timer))
    try:
        if result.ours.gpu_us is None:  # no FBGEMM beside it
            result.ours = measure(ours_step, timer)
        result.host_profile = host_profile(ours_step)
        from reference_kernels import check_index_errors

        check_index_errors()  # the deferred check found nothing (raises otherwise)
    except Exception as error:
        result.ours = _fail(error)
    weight = torch.nn.Parameter(ours.weight.detach().clone())
    ours = None  # its tables freed before torch's optimizer state is allocated
    _free()
    try:
        result.torch = measure(torch_step(case, inputs, weight), timer)
    except Exception as error:
        result.torch = _fail(error)
    del weight
    _free()
    _ratios(result)
    return result


def check_and_time_fbgemm(case: Case, inputs: Inputs, ours: Any, ours_step: Callable[[], None], check: str,
                          timer: harness.Timer) -> tuple[str, Figures, Figures]:
    """One step of each library from the same weights, their updated rows compared; then both
    libraries' figures, side by side. Returns (check, FBGEMM's figures, ours)."""
    fb = fbgemm_module(case, check, ours.weight.detach(), inputs.starts)
    psw_args = () if inputs.psw is None else (inputs.psw,)

    def fbgemm_step() -> None:
        fb(inputs.indices, inputs.offsets, *psw_args).backward(inputs.grad)

    bounds = inputs.offsets[::case.batch].tolist()
    touched = torch.cat([torch.unique(inputs.indices[bounds[t]:bounds[t + 1]]) + inputs.starts[t]
                         for t in range(len(case.rows))])
    initial_rows = ours.weight.detach()[touched].clone()
    ours_step()
    fbgemm_step()
    torch.cuda.synchronize()
    verdict = compare_updates(case, inputs, ours.weight.detach(), fb.split_embedding_weights(), initial_rows, touched)
    del touched, initial_rows
    theirs, ours_figures = measure_side_by_side([fbgemm_step, ours_step], timer)
    return verdict, theirs, ours_figures


def run_dlrm_case(timer: harness.Timer, fbgemm_reason: str, seed: int) -> CaseResult:
    """The whole DLRM step (benchmarks/training_dlrm.py), in run_case's order: FBGEMM checked
    against ours and timed, ours, torch."""
    from benchmarks import training_dlrm

    setup = training_dlrm.Setup(seed)
    result = CaseResult(training_dlrm.NAME, "sgd", "fp32", False, setup.cfg.zipf, setup.positions)
    model, ours_step, ours_losses = setup.ours()
    fbgemm_into(result, fbgemm_reason, partial(check_and_time_dlrm_fbgemm, setup, model, ours_step, ours_losses, timer))
    try:
        if result.ours.gpu_us is None:  # no FBGEMM beside it
            result.ours = measure(ours_step, timer)
        result.host_profile = host_profile(ours_step)
    except Exception as error:
        result.ours = _fail(error)
    del model, ours_step
    _free()
    try:
        result.torch = measure(setup.torch_step(), timer)
    except Exception as error:
        result.torch = _fail(error)
    _free()
    _ratios(result)
    return result


def check_and_time_dlrm_fbgemm(setup: Any, model: Any, ours_step: Callable[[], None], ours_losses: list[torch.Tensor],
                               timer: harness.Timer) -> tuple[str, Figures, Figures]:
    """One DLRM step of ours and of FBGEMM from the same weights, compared; then both libraries'
    figures, side by side (FBGEMM's model is freed on return)."""
    fb_model, fb_step, fb_losses = setup.fbgemm(EPS)
    rows = setup.touched()
    before = setup.init[rows]
    ours_step()
    fb_step()
    torch.cuda.synchronize()
    verdict = dlrm_check(ours_losses[0], fb_losses[0], model.embed.tbe.weight.detach()[rows],
                         setup.fbgemm_rows(fb_model)[rows], before)
    theirs, ours_figures = measure_side_by_side([fb_step, ours_step], timer)
    return verdict, theirs, ours_figures


def dlrm_check(ours_loss: torch.Tensor, fbgemm_loss: torch.Tensor, ours: torch.Tensor, theirs: torch.Tensor,
               before: torch.Tensor) -> str:
    """One DLRM step of each library from the same weights: the same loss (1e-5 relative: the
    forward's float32 sums in another order) and updated rows within compare_updates' bound."""
    change = (ours - before).abs().max().item()
    diff = (ours - theirs).abs().max().item()
    loss_diff = abs(ours_loss.item() - fbgemm_loss.item())
    ok = diff <= 1e-3 * change and change > 0 and loss_diff <= 1e-5 * abs(ours_loss.item())
    return (f"{'ok' if ok else 'MISMATCH'} (loss {ours_loss.item():.6f} vs {fbgemm_loss.item():.6f}; "
            f"max |ours - fbgemm| {diff:.3g}, largest change {change:.3g}, {ours.shape[0]} rows)")


def torch_step(case: Case, inputs: Inputs, weight: torch.nn.Parameter) -> Callable[[], None]:
    """torch's fastest route: global rows (index + its table's first row), one embedding_bag
    over the T * B bags with a sparse gradient, the output laid out as [B, T * dim], then the
    optimizer on the sparse gradient."""
    tables = len(case.rows)
    lengths = inputs.offsets[1:] - inputs.offsets[:-1]
    bag_table = torch.arange(tables * case.batch, device=harness.DEV) // case.batch
    starts = torch.tensor(inputs.starts, device=harness.DEV)
    position_start = torch.repeat_interleave(starts[bag_table], lengths, output_size=inputs.indices.numel())
    optimizer: torch.optim.Optimizer
    if case.optimizer == "sgd":
        optimizer = torch.optim.SGD([weight], lr=LR)
    else:
        optimizer = torch.optim.Adagrad([weight], lr=LR, eps=EPS)

    def step() -> None:
        rows = inputs.indices + position_start
        out = F.embedding_bag(rows, weight, inputs.offsets, mode="sum", sparse=True,
                              per_sample_weights=inputs.psw, include_last_offset=True)
        out.view(tables, case.batch, case.dim).transpose(0, 1).reshape(case.batch, -1).backward(inputs.grad)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _ratio(slow: float | None, fast: float | None) -> float | None:
    return None if slow is None or fast is None or fast <= 0 else slow / fast


def _ratios(r: CaseResult) -> None:
    r.gpu_vs_fbgemm = _ratio(r.fbgemm.gpu_us, r.ours.gpu_us)
    r.gpu_vs_torch = _ratio(r.torch.gpu_us, r.ours.gpu_us)
    r.wall_vs_fbgemm = _ratio(r.fbgemm.wall_us, r.ours.wall_us)
    r.wall_vs_torch = _ratio(r.torch.wall_us, r.ours.wall_us)


def load_fbgemm(directory: str | None, tools_dir: str | None = None) -> str:
    """'' when FBGEMM's training module loaded from ``directory``, else why not. The loader,
    fbgemm_training.py, from ``tools_dir``, else ../shared/tools or shared/tools (the device
    machine gets neither: copy it into the carried pack folder and name that)."""
    if not directory:
        return "no FBGEMM: --fbgemm DIR not given"
    if not Path(directory, "fbgemm_gpu").is_dir():
        return f"no FBGEMM: {directory}/fbgemm_gpu missing (unpack the pack with its unpack.sh first)"
    places = [Path(tools_dir)] if tools_dir else TOOLS
    tools = next((d for d in places if (d / "fbgemm_training.py").is_file()), None)
    if tools is None:
        return f"no FBGEMM: fbgemm_training.py not found in {' or '.join(map(str, places))}"
    sys.path.insert(0, str(tools))
    try:
        import fbgemm_training

        fbgemm_training.load(directory)
    except Exception as error:
        return f"no FBGEMM: loading failed: {type(error).__name__}: {error}"[:300]
    return ""


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(results: list[CaseResult]) -> dict[str, Any]:
    def stats(key: str) -> dict[str, Any]:
        values = [v for r in results if (v := getattr(r, key)) is not None]
        return {"geomean": _geomean(values), "min": min(values, default=None), "cases": len(values),
                "below_1": sum(v < 1.0 for v in values)}

    return {key: stats(key) for key in ("gpu_vs_fbgemm", "gpu_vs_torch", "wall_vs_fbgemm", "wall_vs_torch")} | {
        "checks_failed": [r.case for r in results if r.check.startswith("MISMATCH")],
        "wall_over_gpu_ours": {r.case: round(r.ours.wall_us / r.ours.gpu_us, 2) for r in results
                               if r.ours.wall_us and r.ours.gpu_us},
        # a step is host-bound where enqueueing it takes longer than running it (above 1)
        "host_over_gpu_ours": {r.case: round(r.ours.host_us / r.ours.gpu_us, 2) for r in results
                               if r.ours.host_us and r.ours.gpu_us},
        "host_us": {lib: stats_of([v for r in results if (v := getattr(r, lib).host_us) is not None])
                    for lib in ("ours", "fbgemm")}}


def stats_of(values: list[float]) -> dict[str, Any]:
    """Host µs per step over the cases: median, least, most."""
    if not values:
        return {"median": None, "min": None, "max": None}
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1]}


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def text_table(results: list[CaseResult], summary_: dict[str, Any]) -> str:
    head = (f"{'case':58s} {'ours':>7s} {'fbgemm':>7s} {'torch':>7s} {'xFB':>5s} {'xT':>5s} | "
            f"{'ours':>7s} {'fbgemm':>7s} {'torch':>7s} {'xFB':>5s} | {'ours':>6s} {'fbgemm':>6s}  check")
    lines = ["GPU time per step (us, median of 20, L2 flushed) | wall per step (us, 20 back to back, median of "
             f"up to {WALL_LOOPS} loops) | "
             "host us per step (GPU asleep)", head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.case:58s} {_fmt(r.ours.gpu_us):>7s} {_fmt(r.fbgemm.gpu_us):>7s} {_fmt(r.torch.gpu_us):>7s} "
                     f"{_fmt(r.gpu_vs_fbgemm, 2):>5s} {_fmt(r.gpu_vs_torch, 2):>5s} | {_fmt(r.ours.wall_us):>7s} "
                     f"{_fmt(r.fbgemm.wall_us):>7s} {_fmt(r.torch.wall_us):>7s} {_fmt(r.wall_vs_fbgemm, 2):>5s} | "
                     f"{_fmt(r.ours.host_us):>6s} {_fmt(r.fbgemm.host_us):>6s}  {r.check}")
        for lib in ("ours", "fbgemm", "torch"):
            error = getattr(r, lib).error
            if error and not (lib == "fbgemm" and error == r.check):
                lines.append(f"    {lib}: {error}")
    for key in ("gpu_vs_fbgemm", "gpu_vs_torch", "wall_vs_fbgemm", "wall_vs_torch"):
        s = summary_[key]
        lines.append(f"{key}: geomean {_fmt(s['geomean'], 3)}, min {_fmt(s['min'], 3)}, "
                     f"{s['below_1']} of {s['cases']} below 1.0")
    for lib, s in summary_["host_us"].items():
        lines.append(f"host us per step, {lib}: median {_fmt(s['median'])}, min {_fmt(s['min'])}, "
                     f"max {_fmt(s['max'])}")
    lines.append(f"update checks failed: {summary_['checks_failed'] or 'none'}")
    return "\n".join(lines) + "\n"


def training_dlrm_name() -> str:
    from benchmarks import training_dlrm

    return training_dlrm.NAME


def main_dlrm_alone(argv: list[str] | None = None) -> int:
    """The training suite's whole-DLRM-step case alone (benchmarks/training_dlrm.py):
    ``python3 -m benchmarks training_dlrm --out PREFIX [--fbgemm DIR] [--tools DIR]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main([*args, "--only", training_dlrm_name()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks training_suite", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output prefix: writes PREFIX.json and PREFIX.txt")
    parser.add_argument("--fbgemm", default=os.environ.get("FBGEMM_TRAINING_DIR"),
                        help="the unpacked fbgemm-training pack (unpack.sh's target)")
    parser.add_argument("--tools", default=None,
                        help="the folder holding fbgemm_training.py (default: ../shared/tools, shared/tools)")
    parser.add_argument("--quick", action="store_true", help="a few-minute subset (one case of each kind)")
    parser.add_argument("--only", default="", help="only the cases whose name contains this")
    parser.add_argument("--check", choices=("default", "none"), default="default",
                        help="index checks: each library's default (ours deferred, FBGEMM WARNING) or none")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("REFERENCE_KERNELS_HOST_PATH", "wait")  # as python3 -m benchmarks does
    if not torch.cuda.is_available():
        print("the training suite needs a CUDA GPU", file=sys.stderr)
        return 2
    cases = [c for c in (quick_cases() if args.quick else all_cases()) if args.only in c.name]
    fbgemm_reason = load_fbgemm(args.fbgemm, args.tools)
    if fbgemm_reason:
        print(fbgemm_reason, file=sys.stderr)
    timer = harness.Timer(reps=STEPS)
    results = []
    started = time.perf_counter()
    for case in cases:
        results.append(run_case(case, timer, fbgemm_reason, args.check, args.seed))
        r = results[-1]
        print(f"[{time.perf_counter() - started:6.0f} s] {case.name}: ours {_fmt(r.ours.gpu_us)} us "
              f"(wall {_fmt(r.ours.wall_us)}, host {_fmt(r.ours.host_us)}), fbgemm {_fmt(r.fbgemm.gpu_us)}, "
              f"torch {_fmt(r.torch.gpu_us)}; {r.check} {r.ours.error}", flush=True)
    if args.only in training_dlrm_name():
        results.append(run_dlrm_case(timer, fbgemm_reason, args.seed))
        r = results[-1]
        print(f"[{time.perf_counter() - started:6.0f} s] {r.case}: ours {_fmt(r.ours.gpu_us)} us "
              f"(wall {_fmt(r.ours.wall_us)}), fbgemm {_fmt(r.fbgemm.gpu_us)}, torch {_fmt(r.torch.gpu_us)}; "
              f"{r.check} {r.ours.error}", flush=True)
    summary_ = summary(results)
    report = {"environment": harness.environment(), "check": args.check, "fbgemm": fbgemm_reason or "loaded",
              "steps": STEPS, "lr": LR, "summary": summary_,
              "results": [{k: v for k, v in asdict(r).items() if k != "host_profile"} for r in results]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out}.json").write_text(json.dumps(report, indent=1) + "\n")
    table = text_table(results, summary_)
    Path(f"{out}.txt").write_text(table)
    Path(f"{out}.host_profile.txt").write_text("".join(f"== {r.case}: {STEPS} steps of ours\n{r.host_profile}\n"
                                                       for r in results))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
