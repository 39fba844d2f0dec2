"""GPU tests: tables of mixed widths in one TableBatchedEmbeddingBag (issue 37 item 4) against
torch's EmbeddingBag per table in float64: the forward (every mode, per-sample weights, 16-bit
weights, interleaved and untuned widths from 4 to 1024, short bags for the segmented kernel and
long ones for the general kernel), the dense and the sparse gradient, every fused optimizer
(stochastic rounding too) and a checkpoint round trip. Fresh random inputs every run (seed
printed), outputs poisoned with NaN, empty bags included."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from kernel_bounds import assert_within, pooled_tolerance  # noqa: E402
from test_gpu_sparse_optim import SPECS, check_step, zipf_rows  # noqa: E402

from reference_kernels import launch, optim  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs")]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
WIDTHS = {
    "interleaved": [64, 128, 64],
    "untuned": [4, 12, 36, 200, 520, 1000, 1024],
    "narrow_mixed": [20, 8, 44, 8, 100, 20],
}


class Batch:
    """A table-batched batch: T * B bags (table-major), some empty, half the positions Zipf-hot."""

    def __init__(self, sizes: list[int], batch: int, max_len: int, gen: torch.Generator,
                 index_dtype: torch.dtype = torch.int64) -> None:
        tables = len(sizes)
        lengths = torch.randint(0, max_len + 1, (tables * batch,), generator=gen, device="cuda")
        lengths[::7] = 0
        self.sizes, self.batch, self.lengths = sizes, batch, lengths
        self.offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        table_of = torch.arange(tables, device="cuda").repeat_interleave(batch).repeat_interleave(lengths)
        n = int(lengths.sum())
        bound = torch.tensor(sizes, device="cuda")[table_of]
        uniform = (torch.rand(n, generator=gen, device="cuda") * bound).long()
        self.indices = torch.where(torch.rand(n, generator=gen, device="cuda") < 0.5,
                                   zipf_rows(n, max(sizes), gen) % bound, uniform)
        self.indices, self.offsets = self.indices.to(index_dtype), self.offsets.to(index_dtype)

    def table(self, t: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        """Table t's indices and offsets (from 0), and where its positions lie."""
        lo, hi = int(self.offsets[t * self.batch]), int(self.offsets[(t + 1) * self.batch])
        return self.indices[lo:hi].long(), (self.offsets[t * self.batch:(t + 1) * self.batch] - lo).long(), lo, hi


def columns(dims: list[int]) -> list[int]:
    return [sum(dims[:t]) for t in range(len(dims))]


def module_for(sizes: list[int], dims: list[int], dtype: torch.dtype, gen: torch.Generator,
               **kwargs: Any) -> TableBatchedEmbeddingBag:
    module = TableBatchedEmbeddingBag(sizes, dims, dtype=dtype, device="cuda", **kwargs)
    with torch.no_grad():
        for group in module.groups:
            group.weight.copy_(torch.randn(group.weight.shape, generator=gen, device="cuda"))
    return module


F32, F16, BF16 = DTYPES
MODES = [("sum", False), ("sum", True), ("mean", False), ("max", False)]
# Every dtype, mode and bag length for interleaved widths; the untuned widths (each one of its
# own, 7 launches) in every dtype for sum and mean and once for the rest; narrow mixed widths in
# short bags. Each case compiles a variant per width (NVRTC, cached on disk), hence the choice.
FORWARD_CASES = ([("interleaved", dtype, *mode, max_len) for dtype in DTYPES for mode in MODES for max_len in (3, 60)]
                 + [("untuned", dtype, *mode, max_len) for dtype in DTYPES for mode in MODES[::2]
                    for max_len in (3, 60)]
                 + [("untuned", F32, "sum", True, 60), ("untuned", F16, "max", False, 3)]
                 + [("narrow_mixed", dtype, *mode, 3) for dtype in (F32, F16) for mode in MODES[:3]])


@pytest.mark.parametrize("name, dtype, mode, weighted, max_len", FORWARD_CASES, ids=str)
def test_forward_equals_embedding_bag_per_table(name: str, dtype: torch.dtype, mode: str, weighted: bool,
                                                max_len: int, gen: torch.Generator) -> None:
    """Short bags (the segmented kernel) and long ones (the general kernel), each width one launch
    with TABLE_COLS, every column written (poisoned output), within the pooled bound."""
    dims = WIDTHS[name]
    sizes = [300 + 50 * t for t in range(len(dims))]
    module = module_for(sizes, dims, dtype, gen, mode=mode)
    batch = Batch(sizes, 96, max_len, gen, torch.int32 if weighted else torch.int64)
    psw = torch.rand(batch.indices.shape, generator=gen, device="cuda").to(dtype) if weighted else None
    launch.clear_plans()
    with torch.no_grad():
        out = module(batch.indices, batch.offsets, psw)
    assert out.shape == (96, sum(dims)) and out.dtype == dtype
    plans = [p for p, _ in launch.planned_launches() if dict(p.defines).get("TABLE_COLS") == 1]
    assert len(plans) == len(set(dims))
    for t, (dim, col) in enumerate(zip(dims, columns(dims), strict=True)):
        idx, off, lo, hi = batch.table(t)
        w = module.table(t).detach().double()
        p = None if psw is None else psw[lo:hi].double()
        ref = F.embedding_bag(idx, w, off, mode=mode, per_sample_weights=p)
        if mode == "max":  # torch's max of an empty bag is 0, as ours; a maximum is exact
            torch.testing.assert_close(out[:, col:col + dim].double(), ref, rtol=0, atol=0)
            continue
        abs_ref = F.embedding_bag(idx, w.abs(), off, mode=mode, per_sample_weights=None if p is None else p.abs())
        terms = int(batch.lengths[t * 96:(t + 1) * 96].max()) + (mode == "mean")
        assert_within(out[:, col:col + dim], ref, pooled_tolerance(ref, abs_ref, terms, dtype), f"table {t}")


def reference_grads(module: TableBatchedEmbeddingBag, batch: Batch, dims: list[int], grad_out: torch.Tensor,
                    psw: torch.Tensor | None) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """Each table's weight gradient from torch in float64, the same with |grad_out| and |psw|
    (the sum of |contributions| per element), and the most contributions to one row."""
    grads = []
    for t, (dim, col) in enumerate(zip(dims, columns(dims), strict=True)):
        idx, off, lo, hi = batch.table(t)
        pair = []
        for sign in (lambda x: x, torch.abs):
            w = module.table(t).detach().double().requires_grad_()
            p = None if psw is None else sign(psw[lo:hi].double())
            F.embedding_bag(idx, w, off, mode=module.mode, per_sample_weights=p).backward(
                sign(grad_out[:, col:col + dim].double()))
            assert w.grad is not None
            pair.append(w.grad)
        terms = int(torch.bincount(idx).max()) if idx.numel() else 1
        grads.append((pair[0], pair[1], terms + (module.mode == "mean")))
    return grads


def table_grad(module: TableBatchedEmbeddingBag, t: int, sparse: bool) -> torch.Tensor:
    group = module.groups[int(module.table_meta[0, t])]
    start = group.row_starts[group.tables.index(t)]
    grad = group.weight.grad
    assert grad is not None and grad.is_sparse == sparse and grad.dtype == group.weight.dtype
    dense = grad.coalesce().to_dense() if sparse else grad
    return dense[start:start + module.table_sizes.tolist()[t]].double()


GRADIENT_CASES = ([("interleaved", dtype, *mode) for dtype in DTYPES for mode in MODES[:3]]
                  + [("untuned", F32, *mode) for mode in MODES[:3]] + [("untuned", BF16, "mean", False)])


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name, dtype, mode, weighted", GRADIENT_CASES, ids=str)
def test_gradient_equals_embedding_bag_per_table(sparse: bool, name: str, dtype: torch.dtype, mode: str,
                                                 weighted: bool, gen: torch.Generator) -> None:
    """Each width's backward on its columns of the output gradient: the dense gradient, and
    torch's sparse COO gradient with sparse=True, per table against torch in float64."""
    dims = WIDTHS[name]
    sizes = [200 + 40 * t for t in range(len(dims))]
    module = module_for(sizes, dims, dtype, gen, mode=mode, sparse=sparse)
    batch = Batch(sizes, 64, 12, gen)
    psw = torch.rand(batch.indices.shape, generator=gen, device="cuda").to(dtype) if weighted else None
    out = module(batch.indices, batch.offsets, psw)
    grad_out = torch.randn(out.shape, generator=gen, device="cuda").to(dtype)
    out.backward(grad_out)
    for t, (ref, abs_ref, terms) in enumerate(reference_grads(module, batch, dims, grad_out, psw)):
        assert_within(table_grad(module, t, sparse), ref, pooled_tolerance(ref, abs_ref, terms, dtype),
                      f"table {t} (width {dims[t]})")


def group_lookups(module: TableBatchedEmbeddingBag, g: int, batch: Batch,
                  grad_out: torch.Tensor) -> tuple[dict[str, Any], torch.Tensor]:
    """Width g's lookups as one embedding_bag over its weight (bags (k, b) of its tables k in
    order, rows from each table's first) and the output-gradient rows of those bags."""
    group = module.groups[g]
    dims = module.embedding_dims
    inputs, lengths, grads = [], [], []
    for k, t in enumerate(group.tables):
        idx, _, _, _ = batch.table(t)
        inputs.append(idx + group.row_starts[k])
        lengths.append(batch.lengths[t * batch.batch:(t + 1) * batch.batch])
        grads.append(grad_out[:, columns(dims)[t]:columns(dims)[t] + group.width])
    lens = torch.cat(lengths)
    offsets = torch.cat([lens.new_zeros(1), lens.cumsum(0)])
    return {"input": torch.cat(inputs), "offsets": offsets, "include_last_offset": True}, torch.cat(grads)


FUSED_CASES = ([(name, dtype, "interleaved") for name in SPECS for dtype in DTYPES]
               + [("sgd", F32, "untuned"), ("adagrad", F16, "untuned"), ("adam", BF16, "untuned")])


@pytest.mark.parametrize("name, dtype, widths", FUSED_CASES, ids=str)
def test_fused_optimizer_updates_every_width(name: str, dtype: torch.dtype, widths: str,
                                             gen: torch.Generator) -> None:
    """Two steps; each width's weight and state against the float64 reference of its lookups
    (check_step: the fused-optimizer bound), rows nobody looked up unchanged."""
    dims = WIDTHS[widths]
    sizes = [400 + 30 * t for t in range(len(dims))]
    spec = SPECS[name]
    module = module_for(sizes, dims, dtype, gen, optimizer=spec)
    for _ in range(2):
        batch = Batch(sizes, 64, 10, gen)
        before = list(zip([g.weight.detach().clone() for g in module.groups], module.fused_states(), strict=True))
        states = [(s.state1.clone(), s.state2.clone()) for _, s in before]
        out = module(batch.indices, batch.offsets)
        grad_out = torch.randn(out.shape, generator=gen, device="cuda").to(dtype)
        out.backward(grad_out)
        for g, group in enumerate(module.groups):
            assert group.weight.grad is None
            lk, grad_rows = group_lookups(module, g, batch, grad_out)
            check_step(spec, dtype, group.weight, before[g][1], before[g][0], states[g], lk, "sum", grad_rows, None,
                       None)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_stochastic_rounding_is_seeded_per_module(dtype: torch.dtype, gen: torch.Generator) -> None:
    """16-bit weights, float32 state: the module's seed drives every width (equal seeds, equal
    bits) and each step stays within the stochastic-rounding bound."""
    dims, sizes = WIDTHS["interleaved"], [3000, 2000, 1000]
    spec = optim.RowWiseAdagrad(lr=0.01, stochastic_rounding=True)
    modules = [module_for(sizes, dims, dtype, torch.Generator(device="cuda").manual_seed(3), optimizer=spec)
               for _ in range(2)]
    for m in modules:
        m.optimizer_seed = 1234
    batch = Batch(sizes, 128, 8, gen)
    m0 = modules[0]
    before = list(zip([g.weight.detach().clone() for g in m0.groups], m0.fused_states(), strict=True))
    states = [(s.state1.clone(), s.state2.clone()) for _, s in before]
    grad_out = torch.randn(128, sum(dims), generator=gen, device="cuda").to(dtype)
    for m in modules:
        m(batch.indices, batch.offsets).backward(grad_out)
    for a, b in zip(modules[0].groups, modules[1].groups, strict=True):
        assert torch.equal(a.weight, b.weight), "the same seed must give the same bits"
    assert all(s.state1.dtype == torch.float32 and s.seed == 1234 for s in m0.fused_states())
    for g, group in enumerate(m0.groups):
        lk, grad_rows = group_lookups(m0, g, batch, grad_out)
        check_step(spec, dtype, group.weight, before[g][1], before[g][0], states[g], lk, "sum", grad_rows, None, None)


def test_checkpoint_resumes_bit_for_bit(gen: torch.Generator) -> None:
    """Three steps straight, or one step, a state dict, a fresh module loaded from it and two
    steps: every width's weight and state bit for bit (Adam: the step count matters)."""
    dims, sizes = WIDTHS["untuned"], [500] * 7
    spec = optim.Adam(lr=0.01)
    straight = module_for(sizes, dims, torch.float32, torch.Generator(device="cuda").manual_seed(1), optimizer=spec)
    stopped = module_for(sizes, dims, torch.float32, torch.Generator(device="cuda").manual_seed(1), optimizer=spec)
    straight.optimizer_seed = stopped.optimizer_seed = 0
    batches = [Batch(sizes, 32, 6, gen) for _ in range(3)]
    grads = [torch.randn(32, sum(dims), generator=gen, device="cuda") for _ in range(3)]
    for b, g in zip(batches, grads, strict=True):
        straight(b.indices, b.offsets).backward(g)
    stopped(batches[0].indices, batches[0].offsets).backward(grads[0])
    resumed = module_for(sizes, dims, torch.float32, gen, optimizer=spec)
    resumed.load_state_dict(stopped.state_dict())
    for b, g in zip(batches[1:], grads[1:], strict=True):
        resumed(b.indices, b.offsets).backward(g)
    for a, b in zip(straight.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert a[0] == b[0] and torch.equal(a[1], b[1]), a[0]


@pytest.mark.usefixtures("drained_ledger")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["sgd", "adagrad"])
def test_mixed_width_steps_do_not_synchronise(name: str, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Whole steps (forward, each width's backward and fused update, the default index check)
    under sync debug mode "error"; the same steps outside it give the same bits."""
    dims, sizes = WIDTHS["interleaved"], [300, 200, 100]
    watched, plain = (module_for(sizes, dims, dtype, torch.Generator(device="cuda").manual_seed(5),
                                 optimizer=SPECS[name]) for _ in range(2))
    watched.optimizer_seed = plain.optimizer_seed = 7  # the state dicts hold it
    steps = [(Batch(sizes, 32, 6, gen), torch.randn(32, sum(dims), generator=gen, device="cuda").to(dtype))
             for _ in range(3)]
    for module in (watched, plain):  # kernels compiled, ledger and state created: the same first step
        module(steps[0][0].indices, steps[0][0].offsets).backward(steps[0][1])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for b, grad in steps[1:]:
            watched(b.indices, b.offsets).backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for b, grad in steps[1:]:
        plain(b.indices, b.offsets).backward(grad)
    for a, b in zip(watched.state_dict().values(), plain.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.usefixtures("drained_ledger")
def test_an_index_out_of_range_names_its_table() -> None:
    """One check over all tables, each index against its own table's rows, whatever its width."""
    import reference_kernels as rk

    module = TableBatchedEmbeddingBag([5, 7, 3], [8, 16, 8], device="cuda")
    module.check_indices = "sync"
    offsets = torch.tensor([0, 2, 4, 6], device="cuda")
    with pytest.raises(rk.EmbeddingIndexError, match="index 9 at position 3 is out of range for table 1 of 7 rows"):
        module(torch.tensor([0, 4, 6, 9, 0, 2], device="cuda"), offsets)
