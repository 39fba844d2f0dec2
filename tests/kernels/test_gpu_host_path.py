"""GPU tests of the compiled host path (reference_kernels/host.py, csrc/host_path.cpp): the calls
it serves give the Python path's output bit for bit and torch's values; the calls it must not
serve (a gradient, max_norm, sync checks, unusual tensors) are left to the Python path; a check
inside one of its lookups reports at the next call; knob changes and CUDA graph capture hold.

Each case calls twice: the first call is planned by the Python path (which registers the plan
with the library), the second is the library's. Fresh random inputs every run (the seed is
printed on failure); outputs prefilled with NaN.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import reference_kernels as rk  # noqa: E402
from reference_kernels import diagnostics, host  # noqa: E402
from tests.kernels.test_gpu_index_check import _bags as _inputs  # noqa: E402  (random fixed / CSR bags)

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs")]


@pytest.fixture
def library(drained_ledger: None) -> Any:
    """The loaded library (built by the first CUDA call when the setting is wait), with the
    default check mode and no error left over (drained_ledger)."""
    if host.setting() == "off":
        pytest.skip("REFERENCE_KERNELS_HOST_PATH=off")
    rk.embedding_bag(torch.zeros((1, 1), dtype=torch.int64, device="cuda"), torch.zeros((2, 4), device="cuda"),
                     check_indices=False)
    if host.setting() == "auto":
        pytest.skip("REFERENCE_KERNELS_HOST_PATH=auto builds in the background; the tests need wait")
    assert host.status().state == "loaded", host.status()
    return host.LOADED[0].library


def _python_path(call: Any) -> Any:
    """``call()`` with the library hidden: the Python path's result."""
    with diagnostics.python_host_path():
        return call()


def _served(library: Any, call: Any) -> tuple[Any, bool]:
    before = library.served_count()
    out = call()
    return out, library.served_count() == before + 1


def _reports(library: Any, call: Any) -> list[tuple[torch.Tensor, str]]:
    """``call()`` through the library, then through the Python path: each output and what the
    next explicit check reports (its error, or its warnings joined)."""
    reports = []
    for through_library in (True, False):
        with contextlib.nullcontext() if through_library else diagnostics.python_host_path():
            out, served = _served(library, call)
        assert served == through_library
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                rk.check_index_errors()
                reports.append((out, "; ".join(str(w.message) for w in caught)))
            except rk.EmbeddingIndexError as error:
                reports.append((out, str(error)))
    return reports


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@pytest.mark.parametrize("case", range(48))
def test_served_calls_equal_the_python_path_and_torch(case: int, library: Any, gen: torch.Generator) -> None:
    """A random call shape per case (dtype, width, layout, index dtype, mode, per-sample
    weights, padding_idx, check mode): the library's launch equals the Python path's bit for bit
    and torch's in float64; unchecked calls are always served."""
    rng = random.Random(gen.initial_seed() + case)
    dtype_name = rng.choice(list(DTYPES))
    dtype = DTYPES[dtype_name]
    dim = rng.choice([1, 3, 16, 32, 64, 96, 128, 192, 256, 1000])
    layout = rng.choice(["fixed", "csr", "csr_last"])
    mode = rng.choice(["sum", "mean", "max", "psw"])
    check = rng.choice([False, None, "deferred", "warn", "ignore"])
    rows = rng.randrange(1, 50_000)
    idx, offsets = _inputs(gen, rows, rng.randrange(1, 3000), rng.choice([1, 2, 5, 20, 64]), layout,
                           rng.choice([torch.int32, torch.int64]))
    weight = torch.randn(rows, dim, generator=gen, device="cuda").to(dtype)
    psw = torch.rand(idx.shape, generator=gen, device="cuda").to(dtype) if mode == "psw" else None
    padding_idx = rng.choice([None, rng.randrange(rows), -1])
    bag_mode = "sum" if mode == "psw" else mode

    def call() -> torch.Tensor:
        return rk.embedding_bag(idx, weight, offsets, mode=bag_mode, per_sample_weights=psw,
                                include_last_offset=layout == "csr_last", padding_idx=padding_idx,
                                check_indices=check)

    call()  # the library misses; the Python path plans the call and registers its plan
    expected = _python_path(call)
    out, served = _served(library, call)
    assert served, (dtype_name, dim, layout, mode, check)
    assert torch.equal(out.isnan(), expected.isnan()) and torch.equal(out.nan_to_num(), expected.nan_to_num())
    reference = F.embedding_bag(idx.long(), weight.double(), None if offsets is None else offsets.long(),
                                mode=bag_mode, per_sample_weights=None if psw is None else psw.double(),
                                include_last_offset=layout == "csr_last", padding_idx=padding_idx)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), reference, rtol=tolerance, atol=tolerance)
    assert rk.check_index_errors() is None


@pytest.mark.parametrize("case", range(24))
def test_served_calls_with_a_gradient_equal_the_python_path_and_torch(case: int, library: Any,
                                                                     gen: torch.Generator) -> None:
    """With a gradient (the weight's, the per-sample weights' or both): the library launches the
    forward and attaches its backward node; outputs and gradients equal the Python path's and
    torch's in float64 (max mode's gradient adds with atomics: equal within rounding; with 16-bit
    rows only the output is compared, see below)."""
    rng = random.Random(gen.initial_seed() + 1000 + case)
    dtype = rng.choice([torch.float32, torch.float32, torch.float16])
    dim = rng.choice([3, 32, 64, 128, 256])
    layout = rng.choice(["fixed", "csr", "csr_last"])
    mode = rng.choice(["sum", "mean", "max", "psw"])
    check = rng.choice([False, None, "warn"])
    rows = rng.randrange(1, 20_000)
    idx, offsets = _inputs(gen, rows, rng.randrange(1, 2000), rng.choice([1, 4, 20]), layout,
                           rng.choice([torch.int32, torch.int64]))
    weight = torch.randn(rows, dim, generator=gen, device="cuda").to(dtype)
    psw = torch.rand(idx.shape, generator=gen, device="cuda").to(dtype) if mode == "psw" else None
    weight_grad = psw is None or rng.random() < 0.7
    padding_idx = rng.choice([None, rng.randrange(rows)])
    bag_mode = "sum" if mode == "psw" else mode
    grad_out = torch.randn(idx.shape[0] if offsets is None else offsets.numel() - (layout == "csr_last"), dim,
                           generator=gen, device="cuda").to(dtype)

    def run() -> tuple[torch.Tensor, ...]:
        w = weight.detach().clone().requires_grad_(weight_grad)
        p = None if psw is None else psw.detach().clone().requires_grad_(True)
        out = rk.embedding_bag(idx, w, offsets, mode=bag_mode, per_sample_weights=p,
                               include_last_offset=layout == "csr_last", padding_idx=padding_idx, check_indices=check)
        wanted = [t for t in (w, p) if t is not None and t.requires_grad]
        return (out.detach(), *torch.autograd.grad(out, wanted, grad_out))

    run()  # the library misses; the Python path plans, registers the plans and the check pass
    expected = _python_path(run)
    results, served = _served(library, run)
    assert served, (dtype, dim, layout, mode, check, weight_grad)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    if mode == "max" and dtype != torch.float32:
        # 16-bit max: ties between rows make either one a valid winner, and the gradient adds in
        # 16 bits with atomics, in an order that changes from run to run: the outputs only
        results, expected = results[:1], expected[:1]
    for got, want in zip(results, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance, equal_nan=True)
    double_weight = weight.double().requires_grad_(weight_grad)
    double_psw = None if psw is None else psw.double().requires_grad_(True)
    reference = F.embedding_bag(idx.long(), double_weight, None if offsets is None else offsets.long(), mode=bag_mode,
                                per_sample_weights=double_psw, include_last_offset=layout == "csr_last",
                                padding_idx=padding_idx)
    wanted = [t for t in (double_weight, double_psw) if t is not None and t.requires_grad]
    reference_results = (reference.detach(), *torch.autograd.grad(reference, wanted, grad_out.double()))
    for got, want in zip(results, reference_results[:len(results)], strict=True):
        torch.testing.assert_close(got.double(), want, rtol=tolerance, atol=tolerance)


def test_a_bad_index_in_a_served_call_surfaces_at_the_next_call(library: Any, gen: torch.Generator) -> None:
    rows = 5000  # bags of 20 rows of 128 floats: a shape whose lookup checks its own indices
    weight = torch.randn(rows, 128, generator=gen, device="cuda")
    idx = torch.randint(0, rows, (20480,), generator=gen, device="cuda")
    offsets = torch.arange(0, 20480, 20, device="cuda")
    rk.embedding_bag(idx, weight, offsets, mode="sum")  # planned and registered
    bad = idx.clone()
    position = random.Random(gen.initial_seed()).randrange(20480)
    bad[position] = rows + 3
    _, served = _served(library, lambda: rk.embedding_bag(bad, weight, offsets, mode="sum"))
    assert served
    torch.cuda.synchronize()  # let the check run, so that its flag is set before the next call
    with pytest.raises(rk.EmbeddingIndexError, match=f"index {rows + 3} at position {position} "):
        rk.embedding_bag(idx, weight, offsets, mode="sum")  # the library leaves it to Python: the flag is set
    assert rk.check_index_errors() is None


@pytest.mark.parametrize("mode", ["deferred", "warn"])
def test_a_served_check_pass_reports_as_the_python_path(mode: str, library: Any, gen: torch.Generator) -> None:
    """Max mode's calls keep the check pass (their kernel does not check): through the library,
    the same output (bad indices read as row 0) and the same report as through the Python path."""
    rows = 4000
    weight = torch.randn(rows, 64, generator=gen, device="cuda")
    idx = torch.randint(0, rows, (3000,), generator=gen, device="cuda", dtype=torch.int32)
    offsets = torch.arange(0, 3000, 6, device="cuda", dtype=torch.int32)
    rng = random.Random(gen.initial_seed())
    bad = idx.clone()
    for position in rng.sample(range(3000), 5):
        bad[position] = rng.choice([rows, -1, rows + 77])

    def call(indices: torch.Tensor) -> torch.Tensor:
        return rk.embedding_bag(indices, weight, offsets, mode="max", check_indices=mode)

    call(idx)  # planned and registered: the negative plan, the pass, the clean lookup
    (library_out, library_report), (python_out, python_report) = _reports(library, lambda: call(bad))
    assert library_report == python_report and "out of range" in library_report
    assert torch.equal(library_out, python_out)


def test_warn_mode_in_a_served_call_warns_at_the_next_call(library: Any, gen: torch.Generator) -> None:
    weight = torch.randn(300, 64, generator=gen, device="cuda")
    idx = torch.randint(0, 300, (512, 20), generator=gen, device="cuda")
    rk.embedding_bag(idx, weight, mode="mean", check_indices="warn")
    bad = idx.clone()
    bad[7, 3] = -2
    out, served = _served(library, lambda: rk.embedding_bag(bad, weight, mode="mean", check_indices="warn"))
    assert served
    torch.cuda.synchronize()  # the flag is set before the next call
    fixed = bad.clone()
    fixed[7, 3] = 0  # warn mode reads a bad index as row 0
    torch.testing.assert_close(out, F.embedding_bag(fixed, weight, mode="mean"))
    with pytest.warns(rk.EmbeddingIndexWarning, match="index -2 at position 143 "):
        rk.embedding_bag(idx, weight, mode="mean", check_indices="warn")


def test_calls_it_must_not_serve_take_the_python_path(library: Any, gen: torch.Generator) -> None:
    """max_norm, a sync check, non-contiguous tensors, a tensor subclass, sparse=True with a
    gradient, a functorch transform: the Python path runs (and is right)."""
    weight = torch.randn(1000, 32, generator=gen, device="cuda")
    idx = torch.randint(0, 1000, (256, 4), generator=gen, device="cuda")
    rk.embedding_bag(idx, weight, mode="sum", check_indices=False)  # registered
    rk.embedding_bag(idx, weight, mode="sum", check_indices=False)
    calls = {
        "max_norm": lambda: rk.embedding_bag(idx, weight.clone(), mode="sum", max_norm=1.0),
        "sync": lambda: rk.embedding_bag(idx, weight, mode="sum", check_indices="sync"),
        "strided indices": lambda: rk.embedding_bag(idx.t().contiguous().t(), weight, mode="sum"),
        "strided weight": lambda: rk.embedding_bag(idx, weight.t().contiguous().t(), mode="sum"),
        "subclass": lambda: rk.embedding_bag(idx, weight.as_subclass(_Marked), mode="sum"),
    }
    for name, call in calls.items():
        out, served = _served(library, call)
        assert not served, name
        torch.testing.assert_close(out.detach().as_subclass(torch.Tensor),
                                   F.embedding_bag(idx, weight, mode="sum", max_norm=1.0 if name == "max_norm"
                                                   else None), msg=name)
    sparse_weight = weight.detach().clone().requires_grad_(True)
    rk.embedding_bag(idx, sparse_weight, mode="sum", check_indices=False)  # the dense call's plan, registered
    out, served = _served(library, lambda: rk.embedding_bag(idx, sparse_weight, mode="sum", sparse=True,
                                                            check_indices=False))
    assert not served
    (grad,) = torch.autograd.grad(out.sum(), sparse_weight)
    assert grad.is_sparse  # torch's sparse COO gradient, as sparse=True asks
    before = library.served_count()
    with pytest.raises(RuntimeError, match="functorch transforms"):  # the Python path's Function (no setup_context)
        torch.func.grad(lambda w: rk.embedding_bag(idx, w, mode="sum", check_indices=False).sum())(weight)
    assert library.served_count() == before
    with torch.no_grad():  # no gradient can flow: served
        _, served = _served(library, lambda: rk.embedding_bag(idx, weight.detach().requires_grad_(True), mode="sum",
                                                              check_indices=False))
    assert served


class _Marked(torch.Tensor):
    pass


def test_a_knob_change_forgets_the_registered_plans(library: Any, gen: torch.Generator, tune: Any) -> None:
    weight = torch.randn(2000, 128, generator=gen, device="cuda")
    idx = torch.randint(0, 2000, (2048, 20), generator=gen, device="cuda")
    def call() -> torch.Tensor:
        return rk.embedding_bag(idx, weight, mode="sum", check_indices=False)

    call()
    _, served = _served(library, call)
    assert served
    tune(segment_max_avg=31)  # a new knobs object: the library must not launch the old plans
    out, served = _served(library, call)
    assert not served
    torch.testing.assert_close(out, F.embedding_bag(idx, weight, mode="sum"))
    _, served = _served(library, call)
    assert served


def test_the_module_without_a_gradient_is_served(library: Any, gen: torch.Generator) -> None:
    bag = rk.EmbeddingBag(3000, 64, mode="mean").cuda()
    bag.check_indices = False
    idx = torch.randint(0, 3000, (512, 6), generator=gen, device="cuda")
    with torch.no_grad():
        bag(idx)
        out, served = _served(library, lambda: bag(idx))
    assert served
    torch.testing.assert_close(out, F.embedding_bag(idx, bag.weight, mode="mean"))


def test_a_served_call_captures_in_a_cuda_graph(library: Any, gen: torch.Generator) -> None:
    weight = torch.randn(8000, 128, generator=gen, device="cuda")  # checks inside the lookup (as above)
    idx = torch.randint(0, 8000, (20480,), generator=gen, device="cuda")
    offsets = torch.arange(0, 20480, 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # plans, registers, creates the ledger
        rk.embedding_bag(idx, weight, offsets, mode="sum")
        rk.embedding_bag(idx, weight, offsets, mode="sum")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    before = library.served_count()
    with torch.cuda.graph(graph):
        out = rk.embedding_bag(idx, weight, offsets, mode="sum")
    assert library.served_count() == before + 1
    idx.copy_(torch.randint(0, 8000, (20480,), generator=gen, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, F.embedding_bag(idx, weight, offsets, mode="sum"))


def test_a_served_forward_and_backward_capture_in_a_cuda_graph(library: Any, gen: torch.Generator) -> None:
    """With a gradient and the default check: the library's pass, lookup and backward node, captured."""
    weight = torch.randn(8000, 64, generator=gen, device="cuda").requires_grad_(True)
    idx = torch.randint(0, 8000, (8192,), generator=gen, device="cuda")
    offsets = torch.arange(0, 8192, 16, device="cuda")
    grad_out = torch.randn(512, 64, generator=gen, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.autograd.grad(rk.embedding_bag(idx, weight, offsets, mode="mean"), weight, grad_out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    before = library.served_count()
    with torch.cuda.graph(graph):
        (grad,) = torch.autograd.grad(rk.embedding_bag(idx, weight, offsets, mode="mean"), weight, grad_out)
    assert library.served_count() == before + 1
    idx.copy_(torch.randint(0, 8000, (8192,), generator=gen, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    reference = weight.detach().clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(F.embedding_bag(idx, reference, offsets, mode="mean"), reference, grad_out)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)
    assert rk.check_index_errors() is None


# ---------------------------------------------------------------------------------------------
# The table-batched module (TableBatchedEmbeddingBag): served by the library's tbe

def _table_batch(gen: torch.Generator, sizes: list[int], bags: int, longest: int,
                 index_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CSR bags of 0..longest rows per table, table-major, each index in its own table's range;
    and each position's table size (for new indices under the same offsets)."""
    lengths = torch.randint(0, longest + 1, (len(sizes) * bags,), generator=gen, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    bound = torch.tensor(sizes, device="cuda").repeat_interleave(bags).repeat_interleave(lengths)
    indices = (torch.rand(int(offsets[-1]), generator=gen, device="cuda") * bound).long()
    return indices.to(index_dtype), offsets.to(index_dtype), bound


def _per_table_reference(module: Any, indices: torch.Tensor, offsets: torch.Tensor, psw: torch.Tensor | None,
                         mode: str, bags: int) -> torch.Tensor:
    """torch's embedding_bag per table, in float64, side by side as the module's [B, T * dim]."""
    parts = []
    for t in range(module.table_rows.numel()):
        lo, hi = int(offsets[t * bags]), int(offsets[(t + 1) * bags])
        table_offsets = (offsets[t * bags:(t + 1) * bags + 1] - lo).long()
        parts.append(F.embedding_bag(indices[lo:hi].long(), module.table(t).detach().double(), table_offsets,
                                     mode=mode, include_last_offset=True,
                                     per_sample_weights=None if psw is None else psw[lo:hi].double()))
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("case", range(24))
def test_served_table_batched_calls_equal_the_python_path_and_torch(case: int, library: Any,
                                                                     gen: torch.Generator) -> None:
    """A random table-batched call per case (tables, dtype, width, mode, per-sample weights, check
    mode, index dtype, with or without the weight's gradient): the library's launches equal the
    Python path's bit for bit (forward and gradient) and torch's per table in float64."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    rng = random.Random(gen.initial_seed() + 2000 + case)
    dtype = DTYPES[rng.choice(list(DTYPES))]
    dim = rng.choice([4, 32, 64, 128, 192])
    tables = rng.choice([1, 3, 12, 70])
    sizes = [rng.randrange(1, 30_000 if tables <= 12 else 3000) for _ in range(tables)]
    mode = rng.choice(["sum", "mean", "max", "psw"])
    bag_mode = "sum" if mode == "psw" else mode
    grad = mode != "max" and rng.random() < 0.5
    bags = rng.randrange(1, 600)
    module = TableBatchedEmbeddingBag(sizes, dim, bag_mode, dtype, "cuda")
    module.check_indices = rng.choice([False, None, "deferred", "warn"])
    indices, offsets, _ = _table_batch(gen, sizes, bags, rng.choice([1, 4, 30]),
                                       rng.choice([torch.int32, torch.int64]))
    psw = torch.rand(indices.shape, generator=gen, device="cuda").to(dtype) if mode == "psw" else None
    grad_out = torch.randn(bags, len(sizes) * dim, generator=gen, device="cuda").to(dtype)

    def run() -> tuple[torch.Tensor, ...]:
        module.weight.grad = None
        with torch.set_grad_enabled(grad):
            out = module(indices, offsets, psw)
        if not grad:
            return (out,)
        out.backward(grad_out)
        return out.detach(), module.weight.grad

    run()  # the library misses; the Python path plans, registers the lookup and the table pass
    expected = _python_path(run)
    results, served = _served(library, run)
    assert served, (dtype, dim, len(sizes), mode, module.check_indices, grad)
    for got, want in zip(results, expected, strict=True):
        assert torch.equal(got, want)  # the same kernels on the same inputs, a deterministic backward
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    reference = _per_table_reference(module, indices, offsets, psw, bag_mode, bags)
    torch.testing.assert_close(results[0].double(), reference, rtol=tolerance, atol=tolerance)
    assert rk.check_index_errors() is None


@pytest.mark.parametrize("mode", ["deferred", "warn"])
def test_a_served_table_batched_check_reports_as_the_python_path(mode: str, library: Any,
                                                                gen: torch.Generator) -> None:
    """Bad indices (past their own table's rows, negative) in a served call: the same output (read
    as row 0 of their table) and the same report, at the next check, as through the Python path."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    sizes = [500, 40, 3000]
    module = TableBatchedEmbeddingBag(sizes, 64, "sum", torch.float32, "cuda")
    module.check_indices = mode
    indices, offsets, _ = _table_batch(gen, sizes, 256, 8, torch.int64)
    module(indices, offsets)  # planned and registered
    rng = random.Random(gen.initial_seed())
    bad = indices.clone()
    for position in rng.sample(range(int(offsets[256])), 3):  # table 0's positions (500 rows)
        bad[position] = rng.choice([500, -1, 577])  # 500, 577: inside the weight, past table 0's rows
    (library_out, library_report), (python_out, python_report) = _reports(library, lambda: module(bad, offsets))
    assert library_report == python_report and "out of range" in library_report
    assert torch.equal(library_out, python_out)


def test_a_served_table_batched_forward_and_backward_capture_in_a_cuda_graph(library: Any,
                                                                             gen: torch.Generator) -> None:
    """The module with its default check and a gradient: the library's pass, lookup and backward
    node, captured and replayed on new indices."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    sizes = [4000, 300, 9000]
    module = TableBatchedEmbeddingBag(sizes, 32, "mean", torch.float32, "cuda")
    indices, offsets, bound = _table_batch(gen, sizes, 512, 6, torch.int64)
    grad_out = torch.randn(512, 96, generator=gen, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.autograd.grad(module(indices, offsets), module.weight, grad_out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    before = library.served_count()
    with torch.cuda.graph(graph):
        (grad,) = torch.autograd.grad(module(indices, offsets), module.weight, grad_out)
    assert library.served_count() == before + 1
    indices.copy_((torch.rand(indices.shape, generator=gen, device="cuda") * bound).long())  # same offsets
    graph.replay()
    torch.cuda.synchronize()
    reference_module = TableBatchedEmbeddingBag(sizes, 32, "mean", torch.float32, "cuda")
    with torch.no_grad():
        reference_module.weight.copy_(module.weight)
    with diagnostics.python_host_path():
        (expected,) = torch.autograd.grad(reference_module(indices, offsets), reference_module.weight, grad_out)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)
    assert rk.check_index_errors() is None


@pytest.mark.parametrize("optimizer, dtype, mode, psw", [
    ("sparse", torch.float32, "sum", False), ("sgd", torch.float32, "sum", True),
    ("rowwise_adagrad", torch.float32, "mean", False), ("rowwise_adagrad", torch.float16, "sum", False),
    ("adam", torch.float32, "sum", False), ("sgd", torch.bfloat16, "mean", False)])
def test_served_training_steps_equal_the_python_path(library: Any, gen: torch.Generator, optimizer: str,
                                                     dtype: torch.dtype, mode: str, psw: bool) -> None:
    """A module with a sparse gradient or a fused optimizer: from the second step on the library
    serves the forward (the check pass and lookup) and hands the backward to the module's own;
    three steps give the Python path's weights, optimizer state and sparse gradients bit for bit."""
    from reference_kernels import optim
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    specs = {"sgd": optim.SGD(lr=0.05), "rowwise_adagrad": optim.RowWiseAdagrad(lr=0.05),
             "adam": optim.Adam(lr=0.01)}
    sizes, dim, batch = [3000, 500, 7000], 64, 256
    modules = []
    for _ in range(2):
        module = TableBatchedEmbeddingBag(sizes, dim, mode, dtype=dtype, device="cuda", sparse=optimizer == "sparse",
                                          optimizer=specs.get(optimizer))
        module.optimizer_seed = 5
        modules.append(module)
    with torch.no_grad():
        modules[1].weight.copy_(modules[0].weight)
    lengths = torch.randint(0, 12, (len(sizes) * batch,), generator=gen, device="cuda")
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), torch.cumsum(lengths, 0)])
    bounds = offsets[::batch].tolist()
    idx = torch.cat([torch.randint(0, s, (bounds[t + 1] - bounds[t],), generator=gen, device="cuda")
                     for t, s in enumerate(sizes)])
    weights = torch.rand(idx.shape, generator=gen, device="cuda", dtype=dtype) if psw else None
    grads = [torch.randn(batch, len(sizes) * dim, generator=gen, device="cuda", dtype=dtype) for _ in range(3)]
    served_steps = []
    for grad in grads:
        out, served = _served(library, lambda: modules[0](idx, offsets, weights))
        served_steps.append(served)
        assert out.grad_fn is not None
        out.backward(grad)
        with diagnostics.python_host_path():
            modules[1](idx, offsets, weights).backward(grad)
        if optimizer == "sparse":
            first, second = (m.weight.grad.coalesce() for m in modules)
            assert torch.equal(first.indices(), second.indices()) and torch.equal(first.values(), second.values())
            for m in modules:
                m.weight.grad = None
    assert served_steps[1:] == [True, True], served_steps
    assert torch.equal(modules[0].weight, modules[1].weight)
    if optimizer != "sparse":
        first_state, second_state = (m.optimizer_state for m in modules)
        assert first_state is not None and second_state is not None
        assert first_state.step == second_state.step == 3
        for a, b in ((first_state.state1, second_state.state1), (first_state.state2, second_state.state2)):
            assert (a is None and b is None) or torch.equal(a, b)
