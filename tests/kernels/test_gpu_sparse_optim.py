"""GPU tests: sparse gradients and the fused backward + optimizer against float64 references.

Fresh random inputs every run (seed printed), outputs poisoned with NaN. Inputs have
duplicates inside and across bags, Zipf-hot rows, empty bags, padding rows and both
offset layouts. The sparse gradient is compared with torch's (coalesced) within the
pooled bound of kernel_bounds.py; each fused optimizer with the unfused reference (torch's
sparse gradient in float64, then ``optim.reference_update`` in float64) within the bound of
``fused_tolerance`` (docs/kernels.md, "Fused optimizers: error bound"); rows nobody looked
up, and their state, must be bit-identical before and after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from kernel_bounds import (  # noqa: E402
    HALF_MIN_SUBNORMAL,
    U32,
    UNIT_ROUNDOFF,
    assert_within,
    gamma,
    pooled_tolerance,
)

import reference_kernels as rk  # noqa: E402
from reference_kernels import optim  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs")]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = ["fixed", "csr", "csr_last"]
SPECS = {
    "sgd": optim.SGD(lr=0.05, weight_decay=0.01),
    "adagrad": optim.RowWiseAdagrad(lr=0.05, eps=1e-6, weight_decay=0.01, initial_accumulator_value=0.1),
    "adam": optim.Adam(lr=0.01, betas=(0.8, 0.95), eps=1e-6),
}


def zipf_rows(n: int, rows: int, gen: torch.Generator, alpha: float = 1.05) -> torch.Tensor:
    """Zipf-skewed rows (rank r with weight 1 / r^alpha), ranks scattered over the table."""
    ranks = torch.arange(1, rows + 1, device="cuda", dtype=torch.float64)
    draw = torch.multinomial(ranks.pow(-alpha), n, replacement=True, generator=gen)
    perm = torch.randperm(rows, device="cuda", generator=gen)
    return perm[draw]


def make_lookups(layout: str, batch: int, pooling: int, rows: int, gen: torch.Generator,
                 padding_idx: int | None) -> dict[str, Any]:
    """Half the positions Zipf-hot, half uniform; a row repeated inside one bag and across
    bags; empty bags (CSR); the padding row planted when there is one."""
    lengths = (torch.full((batch,), pooling, device="cuda") if layout == "fixed"
               else torch.randint(0, 2 * pooling + 1, (batch,), generator=gen, device="cuda"))
    if layout != "fixed":
        lengths[0] = 0
        lengths[1] = max(int(lengths[1]), 4)
    n = int(lengths.sum())
    flat = torch.where(torch.rand(n, generator=gen, device="cuda") < 0.5, zipf_rows(n, rows, gen),
                       torch.randint(0, rows, (n,), generator=gen, device="cuda"))
    start = 0 if layout == "fixed" else int(lengths[0])
    flat[start:start + 3] = flat[start + 3]  # duplicates inside a bag (and across, by the Zipf half)
    if padding_idx is not None:
        flat[start + 4::7] = padding_idx
    if layout == "fixed":
        return {"input": flat.view(batch, pooling), "offsets": None, "include_last_offset": False}
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    return {"input": flat, "offsets": offsets if layout == "csr_last" else offsets[:-1],
            "include_last_offset": layout == "csr_last"}


def torch_sparse_grad(weight: torch.Tensor, lk: dict[str, Any], mode: str, grad_out: torch.Tensor,
                      psw: torch.Tensor | None, padding_idx: int | None) -> torch.Tensor:
    """torch's sparse gradient of weight (in weight's dtype), coalesced."""
    w = weight.detach().clone().requires_grad_()
    out = F.embedding_bag(lk["input"], w, lk["offsets"], mode=mode, sparse=True, per_sample_weights=psw,
                          include_last_offset=lk["include_last_offset"], padding_idx=padding_idx)
    out.backward(grad_out.to(out.dtype))
    assert w.grad is not None
    return w.grad.coalesce()


def sparse_bound(weight: torch.Tensor, lk: dict[str, Any], mode: str, grad_out: torch.Tensor,
                 psw: torch.Tensor | None, padding_idx: int | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(reference rows' gradient, their sum of |contributions|, most contributions to a row), float64."""
    ref = torch_sparse_grad(weight.double(), lk, mode, grad_out.double(), None if psw is None else psw.double(),
                            padding_idx)
    absg = torch_sparse_grad(weight.double(), lk, mode, grad_out.double().abs(),
                             None if psw is None else psw.double().abs(), padding_idx)
    flat = lk["input"].reshape(-1)
    terms = int(torch.bincount(flat).max()) + (1 if mode == "mean" else 0)
    return ref, absg, terms


# ---------------------------------------------------------------- sparse gradients


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode, use_psw, padding", [("sum", False, False), ("sum", True, True), ("mean", False, True),
                                                   ("mean", False, False)])
def test_sparse_gradient_equals_torch(dtype: torch.dtype, layout: str, mode: str, use_psw: bool, padding: bool,
                                      gen: torch.Generator) -> None:
    rows, dim = 500, 24
    pad = 7 if padding else None
    lk = make_lookups(layout, 64, 6, rows, gen, pad)
    weight = torch.randn(rows, dim, generator=gen, device="cuda").to(dtype).requires_grad_()
    psw = torch.rand(lk["input"].shape, generator=gen, device="cuda").to(dtype) if use_psw else None
    out = rk.embedding_bag(lk["input"], weight, lk["offsets"], mode=mode, sparse=True, per_sample_weights=psw,
                           include_last_offset=lk["include_last_offset"], padding_idx=pad)
    grad_out = torch.randn(out.shape, generator=gen, device="cuda").to(dtype)
    out.backward(grad_out)
    ours = weight.grad
    assert ours is not None and ours.is_sparse and ours.dtype == dtype
    ours = ours.coalesce()
    expected = torch_sparse_grad(weight, lk, mode, grad_out, psw, pad)
    assert torch.equal(ours.indices(), expected.indices()), "touched rows differ from torch's"
    ref, absg, terms = sparse_bound(weight, lk, mode, grad_out, psw, pad)
    assert_within(ours.values(), ref.values(), pooled_tolerance(ref.values(), absg.values(), terms, dtype),
                  f"sparse {mode} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sparse_gradient_of_embedding_and_modules(dtype: torch.dtype, gen: torch.Generator) -> None:
    rows, dim = 300, 16
    idx = zipf_rows(40 * 5, rows, gen).view(40, 5)
    idx[0, :3] = 3
    emb = rk.Embedding(rows, dim, padding_idx=3, sparse=True, device="cuda", dtype=dtype)
    ref_emb = torch.nn.Embedding(rows, dim, padding_idx=3, sparse=True, device="cuda", dtype=torch.float64)
    with torch.no_grad():
        ref_emb.weight.copy_(emb.weight)
    grad_out = torch.randn(40, 5, dim, generator=gen, device="cuda").to(dtype)
    emb(idx).backward(grad_out)
    ref_emb(idx).backward(grad_out.double())
    ours, ref = emb.weight.grad.coalesce(), ref_emb.weight.grad.coalesce()
    assert torch.equal(ours.indices(), ref.indices())
    absg = torch.zeros_like(ref_emb.weight).index_add_(0, idx.view(-1), grad_out.double().abs().view(-1, dim))
    terms = int(torch.bincount(idx.view(-1)).max())
    assert_within(ours.values(), ref.values(), pooled_tolerance(ref.values(), absg[ref.indices()[0]], terms, dtype),
                  "embedding sparse")
    bag = rk.EmbeddingBag(rows, dim, mode="sum", sparse=True, device="cuda", dtype=dtype)
    bag(idx).backward(grad_out[:, 0])
    expected = torch_sparse_grad(bag.weight, {"input": idx, "offsets": None, "include_last_offset": False}, "sum",
                                 grad_out[:, 0], None, None)
    assert torch.equal(bag.weight.grad.coalesce().indices(), expected.indices())


def test_sparse_gradient_of_table_batched_module(gen: torch.Generator) -> None:
    sizes, dim, batch = [50, 1000, 7], 32, 20
    tbe = TableBatchedEmbeddingBag(sizes, dim, mode="mean", device="cuda", sparse=True)
    lengths = torch.randint(0, 6, (len(sizes) * batch,), generator=gen, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    table_of = torch.repeat_interleave(torch.arange(len(sizes), device="cuda").repeat_interleave(batch), lengths)
    indices = (torch.rand(int(lengths.sum()), generator=gen, device="cuda")
               * torch.tensor(sizes, device="cuda")[table_of]).long()
    out = tbe(indices, offsets)
    grad_out = torch.randn(out.shape, generator=gen, device="cuda")
    out.backward(grad_out)
    dense = torch.zeros_like(tbe.weight, dtype=torch.float64)
    for t in range(len(sizes)):
        w = tbe.table(t).detach().double().requires_grad_()
        lo, hi = offsets[t * batch], offsets[(t + 1) * batch]
        o = F.embedding_bag(indices[lo:hi], w, offsets[t * batch:(t + 1) * batch] - lo, mode="mean")
        o.backward(grad_out[:, t * dim:(t + 1) * dim].double())
        start = int(tbe.table_rows[t])
        dense[start:start + sizes[t]] = w.grad
    ours = tbe.weight.grad.coalesce()
    assert ours.is_sparse
    torch.testing.assert_close(ours.to_dense().double(), dense, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- fused optimizers


def fused_tolerance(spec: optim.OptimizerSpec, w0: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor,
                    rows: torch.Tensor, g: torch.Tensor, e: torch.Tensor, step: int,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                 torch.Tensor]:
    """(reference weight, state1, state2 and their tolerances) for the touched rows, float64.

    The gradient's error bound e (per element) is propagated through the update by
    evaluating the float64 reference at g + e*sign, g - e*sign, g + e and g - e and taking
    the largest change, doubled; the update's own float32 arithmetic adds 16 u32 of the
    old and new values, and rounding to a 16-bit weight one unit roundoff (two with
    stochastic rounding) plus half the smallest subnormal."""
    def run(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w, a, b = w0.clone(), s1.clone(), s2.clone()
        optim.reference_update(spec, w, a, b, rows, grad, step)
        return w, a, b

    ref = run(g)
    spread = [torch.zeros_like(t) for t in ref]
    for variant in (g + e * g.sign(), g - e * g.sign(), g + e, g - e):
        for k, t in enumerate(run(variant)):
            spread[k] = torch.maximum(spread[k], (t - ref[k]).abs())
    units = 2 if spec.stochastic_rounding and dtype != torch.float32 else 1  # stochastic: up to one whole unit
    u_w = UNIT_ROUNDOFF[dtype] * units
    tols = []
    for k, (new, old) in enumerate(zip(ref, (w0, s1, s2), strict=False)):
        tol = 2 * spread[k] + 16 * U32 * (new.abs() + old.abs())
        if k == 0:
            tol = tol + u_w * new.abs() + units * HALF_MIN_SUBNORMAL[dtype]
        tols.append(tol)
    return ref[0], ref[1], ref[2], tols[0], tols[1], tols[2]


def check_step(spec: optim.OptimizerSpec, dtype: torch.dtype, weight: torch.Tensor, state: Any,
               w_before: torch.Tensor, s_before: tuple[torch.Tensor, torch.Tensor], lk: dict[str, Any], mode: str,
               grad_out: torch.Tensor, psw: torch.Tensor | None, pad: int | None) -> None:
    """Our fused step (already taken) against the float64 reference from the same start."""
    ref_g, absg, terms = sparse_bound(w_before, lk, mode, grad_out, psw, pad)
    rows = ref_g.indices()[0]
    g = ref_g.values()
    e = gamma(terms) * absg.values() + U32 * g.abs()
    w64, a64, b64 = w_before.double(), s_before[0].double(), s_before[1].double()
    rw, ra, rb, tw, ta, tb = fused_tolerance(spec, w64, a64, b64, rows, g, e, state.step, dtype)
    assert_within(weight.detach()[rows], rw[rows], tw[rows], f"{spec} weight {dtype}")
    if isinstance(spec, optim.RowWiseAdagrad):
        assert_within(state.state1[rows], ra[rows], ta[rows], "adagrad state")
    if isinstance(spec, optim.Adam):
        assert_within(state.state1[rows], ra[rows], ta[rows], "adam exp_avg")
        assert_within(state.state2[rows], rb[rows], tb[rows], "adam exp_avg_sq")
    untouched = torch.ones(weight.shape[0], dtype=torch.bool, device="cuda")
    untouched[rows] = False
    assert torch.equal(weight.detach()[untouched], w_before[untouched]), "an untouched row changed"
    for now, before in zip((state.state1, state.state2), s_before, strict=False):
        if now.numel():
            assert torch.equal(now[untouched], before[untouched]), "an untouched row's state changed"


@pytest.mark.parametrize("path", ["passes", "two_step"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("layout, mode, use_psw, padding", [("fixed", "sum", True, False), ("csr", "mean", False, True),
                                                            ("csr_last", "sum", False, True)])
def test_fused_optimizer_equals_float64_reference(dtype: torch.dtype, name: str, layout: str, mode: str,
                                                  use_psw: bool, padding: bool, path: str, gen: torch.Generator,
                                                  tune: Callable[..., None]) -> None:
    """path: the update inside the backward's passes, or the compact gradient + sparse_update.cu
    (forced here; taken by itself for rows wider than one column tile, e.g. dim 1040)."""
    tune(fuse_into_passes=path == "passes")
    rows, dim = 2000, 40 if path == "passes" else 1040
    pad = 11 if padding else None
    bag = rk.EmbeddingBag(rows, dim, mode=mode, padding_idx=pad, device="cuda", dtype=dtype,
                          include_last_offset=layout == "csr_last", optimizer=SPECS[name])
    with torch.no_grad():
        bag.weight.copy_(torch.randn(rows, dim, generator=gen, device="cuda"))
    for _ in range(3):  # three steps: the state is non-trivial from the second on
        lk = make_lookups(layout, 128, 8, rows, gen, pad)
        psw = torch.rand(lk["input"].shape, generator=gen, device="cuda").to(dtype) if use_psw else None
        w_before = bag.weight.detach().clone()
        state = bag.fused_state(bag.weight)
        s_before = (state.state1.clone(), state.state2.clone())
        out = bag(lk["input"], lk["offsets"], psw)
        grad_out = torch.randn(out.shape, generator=gen, device="cuda").to(dtype)
        out.backward(grad_out)
        assert bag.weight.grad is None
        check_step(SPECS[name], dtype, bag.weight, state, w_before, s_before, lk, mode, grad_out, psw, pad)


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_table_batched_module_and_determinism(name: str, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Two modules from the same start, the same Zipf-hot lookups (hot rows span many chunks):
    bit-identical weights and state; and the first step against per-table references."""
    sizes, dim, batch = [3000, 40, 900], 64, 512
    spec = SPECS[name]
    mods = [TableBatchedEmbeddingBag(sizes, dim, device="cuda", dtype=dtype, optimizer=spec) for _ in range(2)]
    with torch.no_grad():
        mods[1].weight.copy_(mods[0].weight)
    for _ in range(2):
        lengths = torch.randint(0, 30, (len(sizes) * batch,), generator=gen, device="cuda")
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        table_of = torch.repeat_interleave(torch.arange(len(sizes), device="cuda").repeat_interleave(batch), lengths)
        sz = torch.tensor(sizes, device="cuda")[table_of]
        indices = zipf_rows(int(lengths.sum()), 40, gen, 1.2) % sz
        grad_out = torch.randn(batch, len(sizes) * dim, generator=gen, device="cuda").to(dtype)
        for m in mods:
            m(indices, offsets).backward(grad_out)
        assert torch.equal(mods[0].weight, mods[1].weight), "fused update is not bit-reproducible"
        for a, b in zip((mods[0].optimizer_state.state1, mods[0].optimizer_state.state2),
                        (mods[1].optimizer_state.state1, mods[1].optimizer_state.state2), strict=False):
            assert torch.equal(a, b)
    # the table-batched fused step against the reference, per table through one big table
    m = mods[0]
    w_before = m.weight.detach().clone()
    state = m.optimizer_state
    s_before = (state.state1.clone(), state.state2.clone())
    lengths = torch.randint(0, 12, (len(sizes) * batch,), generator=gen, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    table_of = torch.repeat_interleave(torch.arange(len(sizes), device="cuda").repeat_interleave(batch), lengths)
    indices = (torch.rand(int(lengths.sum()), generator=gen, device="cuda")
               * torch.tensor(sizes, device="cuda")[table_of]).long()
    grad_out = torch.randn(batch, len(sizes) * dim, generator=gen, device="cuda").to(dtype)
    m(indices, offsets).backward(grad_out)
    # the same lookups as one embedding_bag over the whole weight: global rows, bags b*T + t
    global_rows = indices + m.table_rows[table_of]
    t_count = len(sizes)
    bag_ids = torch.arange(t_count * batch, device="cuda")
    order = (bag_ids % batch) * t_count + bag_ids // batch  # table-major bag -> row of grad_out.view(-1, dim)
    lk = {"input": global_rows, "offsets": offsets, "include_last_offset": True}
    grad_rows = torch.empty(t_count * batch, dim, dtype=dtype, device="cuda")
    grad_rows[:] = grad_out.view(-1, dim)[order]
    check_step(spec, dtype, m.weight, state, w_before, s_before, lk, "sum", grad_rows, None, None)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_stochastic_rounding_is_seeded_and_within_one_unit(dtype: torch.dtype, gen: torch.Generator) -> None:
    rows, dim, lr = 8000, 64, 1e-3
    spec = optim.SGD(lr=lr, stochastic_rounding=True)
    mods = [rk.EmbeddingBag(rows, dim, mode="sum", device="cuda", dtype=dtype, optimizer=spec) for _ in range(2)]
    for m in mods:
        m.optimizer_seed = 1234
    with torch.no_grad():
        mods[1].weight.copy_(mods[0].weight)
    lk = {"input": torch.randint(0, rows, (1024, 4), generator=gen, device="cuda"), "offsets": None,
          "include_last_offset": False}
    grad_out = torch.randn(1024, dim, generator=gen, device="cuda").to(dtype)
    w_before = mods[0].weight.detach().clone()
    for m in mods:
        m(lk["input"]).backward(grad_out)
    assert torch.equal(mods[0].weight, mods[1].weight), "the same seed must give the same bits"
    state = mods[0].optimizer_state
    check_step(spec, dtype, mods[0].weight, state, w_before, (state.state1, state.state2), lk, "sum", grad_out,
               None, None)
    # unbiased: most updates are below half a unit (round to nearest would drop them), yet the
    # rounded steps along the exact update's direction average to its size
    ref_g = torch_sparse_grad(w_before.double(), lk, "sum", grad_out.double(), None, None)
    touched = ref_g.indices()[0]
    exact = -lr * ref_g.values()
    taken = mods[0].weight.double()[touched] - w_before.double()[touched]
    ratio = float((taken * exact.sign()).mean() / exact.abs().mean())
    assert 0.95 < ratio < 1.05, f"stochastic rounding is biased: mean step / exact step = {ratio:.3f}"


def test_fused_embedding_module(gen: torch.Generator) -> None:
    rows, dim = 700, 8
    emb = rk.Embedding(rows, dim, padding_idx=5, device="cuda", optimizer=optim.RowWiseAdagrad(lr=0.1))
    idx = zipf_rows(300, rows, gen).view(30, 10)
    idx[0] = 5
    w_before = emb.weight.detach().clone()
    grad_out = torch.randn(30, 10, dim, generator=gen, device="cuda")
    emb(idx).backward(grad_out)
    assert emb.weight.grad is None
    state = emb.optimizer_state
    g = torch.zeros(rows, dim, dtype=torch.float64, device="cuda").index_add_(
        0, idx.view(-1), grad_out.double().view(-1, dim))
    touched = torch.unique(idx.view(-1))
    touched = touched[touched != 5]
    w64 = w_before.double()
    s64 = torch.zeros(rows, dtype=torch.float64, device="cuda")
    optim.reference_update(emb.optimizer, w64, s64, s64[:0], touched, g[touched], 1)
    torch.testing.assert_close(emb.weight.double(), w64, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(state.state1.double(), s64, rtol=1e-5, atol=1e-7)
    assert torch.equal(emb.weight[5], w_before[5]), "the padding row must not move"


# ---------------------------------------------------------------- the chunk pass's shared-memory copies

ASYNC_SHAPES = [(192, 6, 128), (200, 16, 64), (256, 1, 128), (520, 3, 128), (128, 6, 128), (32, 8, 128)]


@pytest.mark.parametrize("dim, ahead, block", ASYNC_SHAPES, ids=[f"d{d}-ahead{a}-block{b}" for d, a, b in ASYNC_SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["sparse", *SPECS])
@pytest.mark.parametrize("layout, mode, use_psw, padding",
                         [("fixed", "sum", True, False), ("csr", "mean", False, True)])
def test_async_chunk_pass_equals_register_chunk_pass(name: str, dtype: torch.dtype, dim: int, ahead: int, block: int,
                                                     layout: str, mode: str, use_psw: bool, padding: bool,
                                                     gen: torch.Generator, tune: Callable[..., None]) -> None:
    """The chunk pass that copies gradient rows into shared memory ahead of its walk
    (ASYNC_AHEAD) sums the same positions in the same order as the one that loads them into
    registers: the sparse gradient, and each fused optimizer's weights and state after two
    steps, are bit-identical. The copies are forced onto every shape here (the planner takes
    them for wide rows only). Widths: a partly idle last vector column (200), two column tiles
    (520 float32: the compact gradient), narrow teams (32: four to a warp), one position ahead
    and as many as the window."""
    from reference_kernels import plan, tuning
    from reference_kernels.launch import device_props

    rows, pad = 1500, (9 if padding else None)
    spec = None if name == "sparse" else SPECS[name]
    start = torch.randn(rows, dim, generator=gen, device="cuda").to(dtype)
    steps = []
    for _ in range(2):
        lk = make_lookups(layout, 256, 10, rows, gen, pad)
        psw = torch.rand(lk["input"].shape, generator=gen, device="cuda").to(dtype) if use_psw else None
        steps.append((lk, psw, torch.randn(256, dim, generator=gen, device="cuda").to(dtype)))
    forced = {"backward_async_ahead": ahead, "backward_async_block": block, "backward_async_max_unroll": 8}
    results = []
    for knobs in ({"backward_async_ahead": 0}, forced):
        tune(**knobs)
        bag = rk.EmbeddingBag(rows, dim, mode=mode, padding_idx=pad, device="cuda", dtype=dtype,
                              include_last_offset=False, sparse=spec is None, optimizer=spec)
        with torch.no_grad():
            bag.weight.copy_(start)
        grads = []
        for lk, psw, grad_out in steps:
            bag(lk["input"], lk["offsets"], psw).backward(grad_out)
            if spec is None:
                grads.append(bag.weight.grad.coalesce())
                bag.weight.grad = None
        fused = None if spec is None else bag.fused_state(bag.weight)
        state = [] if fused is None else [fused.state1.clone(), fused.state2.clone()]
        results.append((bag.weight.detach().clone(), grads, state))
    call = plan.BackwardCall(grad_dtype=0, elem_bytes=start.element_size(), dim=dim, grad_align=16,
                             num_positions=2560, row_type="int", has_psw=use_psw, has_scale=mode == "mean",
                             grad_f32=False)
    with tuning.tuned(**forced):
        chunk_pass, _ = plan.plan_backward(call, device_props(start.device), tuning.current())
    assert dict(chunk_pass.defines).get("ASYNC_AHEAD", 0) >= 1, "the shape must take the shared-memory copies"
    (w0, g0, s0), (w1, g1, s1) = results
    assert torch.equal(w0, w1), "weights differ"
    for a, b in zip(g0, g1, strict=True):
        assert torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values()), "sparse gradients differ"
    for a, b in zip(s0, s1, strict=True):
        assert torch.equal(a, b), "optimizer state differs"
