"""GPU tests of the backward's combine pass (embedding_bag_backward.cu): runs that cross chunks,
from two chunks to one row holding 90 % of a million positions.

The positions' sorted order is laid out on purpose (the sort is stable and by row, so a row's
run starts after every smaller row's): runs of exactly CHUNK_POS, CHUNK_POS + 1, 2 CHUNK_POS,
runs that start at a chunk's last position, runs whose piece counts sit on the combine's
boundaries (a team alone up to COMBINE_PROBE + 1 pieces, the whole block beyond; the block's
search for the run's end widening its stride after COMBINE_BLOCK chunk starts), a hot padding
run beside a hot row, a run covering the whole input. The positions are then shuffled over the
bags.

Exact: gradients are small integers (times powers of two), so every sum of them is exact in
float32 whatever its order: the plain gradient must equal the float64 reference bit for bit,
and a fused step must be within the update's own float32 rounding. Deterministic: with random
gradients, two runs from the same start give bit-identical gradients, weights and state.
Outputs start poisoned (NaN)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
from kernel_bounds import U32, assert_within, gamma  # noqa: E402
from test_gpu_sparse_optim import fused_tolerance  # noqa: E402

import reference_kernels as rk  # noqa: E402
from reference_kernels import launch, optim, plan, tuning  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs")]

BAG = 16  # positions per bag (fixed layout): mean's scale 1/16 is exact
SPECS: dict[str, optim.OptimizerSpec] = {
    "sgd": optim.SGD(lr=0.05, weight_decay=0.01),
    "adagrad": optim.RowWiseAdagrad(lr=0.05, eps=1e-6, weight_decay=0.01, initial_accumulator_value=0.1),
}


class Layout:
    """Row counts in sorted order: row i holds ``counts[i]`` consecutive sorted positions."""

    def __init__(self, n: int, dim: int, dtype: torch.dtype) -> None:
        self.n = n
        lanes = plan.RowTiling.for_row(dim, plan.vector_width(dim, dtype.itemsize, 0)).row_lanes
        self.chunk = plan.backward_chunk(n, lanes, launch.device_props(torch.device("cuda")).sms, tuning.current())
        self.counts: list[int] = []
        self.padding: int | None = None

    @property
    def used(self) -> int:
        return sum(self.counts)

    def run(self, length: int) -> int:
        assert length > 0 and self.used + length <= self.n, "the layout is longer than its positions"
        self.counts.append(length)
        return len(self.counts) - 1

    def start_at(self, offset: int) -> None:
        """Singleton rows until the next run starts ``offset`` positions into a chunk."""
        while self.used % self.chunk != offset % self.chunk:
            self.run(1)

    def run_of_pieces(self, pieces: int, start: int = 0) -> None:
        """The shortest run starting ``start`` positions into a chunk that spans ``pieces`` chunks
        (so leaves ``pieces`` partial sums)."""
        self.start_at(start)
        self.run((pieces - 1) * self.chunk - start + 1)

    def edges(self) -> None:
        c = self.chunk
        for start in (0, 1, c - 1):  # a chunk's first, second and last position
            for length in (c - 1, c, c + 1, 2 * c - 1, 2 * c, 2 * c + 1, 3):
                self.start_at(start)
                self.run(length)
        probe = plan.COMBINE_PROBE
        for pieces in (2, 3, probe, probe + 1, probe + 2, probe + 3):  # a team alone / the block
            self.run_of_pieces(pieces, 0)
            self.run_of_pieces(pieces, c - 1)

    def fill(self) -> None:
        """Singleton rows up to ``n`` positions."""
        for _ in range(self.n - self.used):
            self.run(1)

    def rows(self, gen: torch.Generator) -> torch.Tensor:
        """Each position's row, the positions shuffled (int64, on the GPU)."""
        assert self.used == self.n
        sorted_rows = torch.repeat_interleave(torch.arange(len(self.counts), device="cuda"),
                                              torch.tensor(self.counts, device="cuda"))
        return sorted_rows[torch.randperm(self.n, generator=gen, device="cuda")]


def hot_layout(n: int, dim: int, dtype: torch.dtype, *, padding: bool) -> Layout:
    """The edge runs, then one row with 90 % of the positions (with a hot padding run of 3 %
    after it when ``padding``), then singletons."""
    lay = Layout(n, dim, dtype)
    lay.edges()
    lay.run(int(0.9 * n))
    if padding:
        lay.padding = lay.run(int(0.03 * n))
        lay.run(lay.chunk + 1)  # a run right after the padding run, crossing a chunk
    lay.fill()
    return lay


def search_layout(n: int, dim: int) -> Layout:
    """Runs whose piece counts sit where the block's search for the end widens its stride."""
    lay = Layout(n, dim, torch.float32)
    widen = plan.COMBINE_PROBE + 1 + plan.COMBINE_BLOCK  # the first round's tests all hold beyond
    for pieces in (widen - 1, widen, widen + 1, widen + 2):
        lay.run_of_pieces(pieces, 0)
    lay.fill()
    return lay


def whole_layout(n: int, dim: int) -> Layout:
    lay = Layout(n, dim, torch.float32)
    lay.run(n)
    return lay


def integer_inputs(lay: Layout, dim: int, dtype: torch.dtype, gen: torch.Generator, psw: bool) -> dict[str, Any]:
    flat = lay.rows(gen)
    bags = lay.n // BAG
    grad_out = torch.randint(-4, 5, (bags, dim), generator=gen, device="cuda").to(dtype)
    weights = None
    if psw:  # powers of two: products stay exact
        weights = torch.tensor([0.5, 1.0, 2.0], device="cuda")[
            torch.randint(0, 3, (lay.n,), generator=gen, device="cuda")].to(dtype).view(bags, BAG)
    return {"input": flat.view(bags, BAG), "grad_out": grad_out, "psw": weights}


def reference_grad(lay: Layout, inputs: dict[str, Any], mode: str, dim: int) -> torch.Tensor:
    """The gradient of the sum (or mean) over each bag's rows, in float64 (padding skipped)."""
    flat = inputs["input"].reshape(-1)
    grad = torch.zeros(len(lay.counts) + 1, dim, dtype=torch.float64, device="cuda")
    scale = 1.0 / BAG if mode == "mean" else 1.0
    step = 1 << 16
    for lo in range(0, lay.n, step):  # a slice of positions at a time: n x dim float64 is large
        hi = min(lo + step, lay.n)
        rows = flat[lo:hi]
        terms = inputs["grad_out"][torch.arange(lo, hi, device="cuda") // BAG].double() * scale
        if inputs["psw"] is not None:
            terms = terms * inputs["psw"].reshape(-1)[lo:hi, None].double()
        keep = rows != (-1 if lay.padding is None else lay.padding)
        grad.index_add_(0, rows[keep], terms[keep])
    return grad


def module(lay: Layout, dim: int, dtype: torch.dtype, mode: str, spec: optim.OptimizerSpec | None,
           seed: int) -> rk.EmbeddingBag:
    bag = rk.EmbeddingBag(len(lay.counts) + 1, dim, mode=mode, padding_idx=lay.padding, device="cuda", dtype=dtype,
                          optimizer=spec)
    with torch.no_grad():  # the same start for every module of one seed
        start = torch.Generator(device="cuda").manual_seed(seed)
        bag.weight.copy_(torch.randn(bag.weight.shape, generator=start, device="cuda"))
    return bag


def step(bag: rk.EmbeddingBag, inputs: dict[str, Any]) -> None:
    bag(inputs["input"], None, inputs["psw"]).backward(inputs["grad_out"])


# what, mode, per-sample weights, padding
CASES = [("grad", "sum", True, True), ("sgd", "mean", False, False), ("adagrad", "sum", False, True)]


@pytest.mark.parametrize("dim", [4, 128, 520, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("what, mode, use_psw, padding", CASES)
def test_a_hot_row_and_every_run_boundary_sum_exactly(dim: int, dtype: torch.dtype, what: str, mode: str,
                                                       use_psw: bool, padding: bool, gen: torch.Generator) -> None:
    n = (1 << 20) if dim <= 128 else (1 << 18)
    lay = hot_layout(n, dim, dtype, padding=padding)
    inputs = integer_inputs(lay, dim, dtype, gen, use_psw)
    check_exact(lay, inputs, dim, dtype, what, mode)


@pytest.mark.parametrize("layout", ["search", "whole"])
@pytest.mark.parametrize("what", ["grad", "adagrad"])
def test_runs_where_the_end_search_widens_and_one_run_of_everything(layout: str, what: str,
                                                                     gen: torch.Generator) -> None:
    lay = search_layout(1 << 17, 128) if layout == "search" else whole_layout(1 << 17, 128)  # chunks of 32 on an H100
    inputs = integer_inputs(lay, 128, torch.float32, gen, psw=what == "grad")
    check_exact(lay, inputs, 128, torch.float32, what, "sum")


def check_exact(lay: Layout, inputs: dict[str, Any], dim: int, dtype: torch.dtype, what: str, mode: str) -> None:
    ref = reference_grad(lay, inputs, mode, dim)
    bag = module(lay, dim, dtype, mode, SPECS.get(what), seed=7)
    if what == "grad":
        step(bag, inputs)
        assert bag.weight.grad is not None
        # exact sums, then one rounding to the weight's dtype (the padding row's gradient: zeros)
        assert torch.equal(bag.weight.grad, ref.to(dtype)), f"{int((bag.weight.grad != ref.to(dtype)).sum())} differ"
        return
    spec = SPECS[what]
    w_before = bag.weight.detach().clone()
    state = bag.fused_state(bag.weight)
    assert state is not None
    s_before = (state.state1.clone(), state.state2.clone())
    step(bag, inputs)
    assert bag.weight.grad is None
    touched = torch.zeros(ref.shape[0], dtype=torch.bool, device="cuda")
    touched[inputs["input"].reshape(-1)] = True
    if lay.padding is not None:
        touched[lay.padding] = False
    rows = touched.nonzero().squeeze(1)
    g = ref[rows]
    # the gradient is exact: only the update's float32 arithmetic (row-wise Adagrad's squared sum
    # over the row: gamma(dim) relative) separates ours from the float64 reference
    e = (gamma(dim) + U32) * g.abs()
    w64, a64, b64 = w_before.double(), s_before[0].double(), s_before[1].double()
    rw, ra, _, tw, ta, _ = fused_tolerance(spec, w64, a64, b64, rows, g, e, state.step, dtype)
    assert_within(bag.weight.detach()[rows], rw[rows], tw[rows], f"{what} weight {dtype} dim {dim}")
    if isinstance(spec, optim.RowWiseAdagrad):
        assert_within(state.state1[rows], ra[rows], ta[rows], "row-wise Adagrad state")
    assert torch.equal(bag.weight.detach()[~touched], w_before[~touched]), "an untouched row changed"


@pytest.mark.parametrize("dim", [4, 128, 1024])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("what", ["grad", "sgd", "adagrad"])
def test_hot_rows_are_bit_reproducible(dim: int, dtype: torch.dtype, what: str, gen: torch.Generator) -> None:
    """Random (inexact) gradients: the order of every sum is fixed, so two runs agree bit for bit."""
    lay = hot_layout((1 << 20) if dim <= 128 else (1 << 18), dim, dtype, padding=True)
    flat = lay.rows(gen)
    bags = lay.n // BAG
    inputs = {"input": flat.view(bags, BAG), "grad_out": torch.randn(bags, dim, generator=gen, device="cuda").to(dtype),
              "psw": torch.rand(bags, BAG, generator=gen, device="cuda").to(dtype)}
    results = []
    for _ in range(2):
        bag = module(lay, dim, dtype, "sum", SPECS.get(what), seed=11)
        step(bag, inputs)
        state = bag.fused_state(bag.weight)
        out = [bag.weight.grad if what == "grad" else bag.weight.detach()]
        if state is not None:
            out += [state.state1, state.state2]
        assert all(bool(torch.isfinite(t).all()) for t in out), "an element was not written (poisoned NaN)"
        results.append([t.clone() for t in out])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b), f"{what} is not bit-reproducible"
