"""The launch path on a CPU: parameter packing (layout, alignment, per-thread buffers), each
forward entry's parameter kinds against its kernel's signature, the driver call and its error,
the choice between the custom op, the eager autograd Function and the plain implementation,
and the eager Function's gradients (kernels replaced by torch's CPU reference)."""

from __future__ import annotations

import ctypes
import re
import struct
import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from reference_kernels import KERNEL_DIR, api, launch, nvrtc, ops  # noqa: E402
from reference_kernels.nvrtc import F32, I32, I64, PTR  # noqa: E402


def _read_params(extra_address: int) -> tuple[list[int], bytes]:
    """The driver's view of a packed launch: the ``extra`` array and the buffer it points at."""
    extra = (ctypes.c_void_p * 5).from_address(extra_address)
    size = ctypes.c_size_t.from_address(extra[3]).value
    return [v or 0 for v in extra], ctypes.string_at(extra[1], size)


@pytest.mark.parametrize("kinds,offsets,size", [
    (PTR + I32 + I64, (0, 8, 16), 24),  # the i64 after an i32 starts at the next multiple of 8
    (I32 + F32 + PTR, (0, 4, 8), 16),
    (I32 + PTR + I32, (0, 8, 16), 20),  # no padding after the last parameter
    (F32 + I64 + F32 + I32, (0, 8, 16, 20), 24),
])
def test_parameters_are_laid_out_as_the_kernel_parameter_buffer(kinds: str, offsets: tuple[int, ...],
                                                                size: int) -> None:
    """Each parameter at the next multiple of its own size (CUDA's parameter buffer layout)."""
    signature = nvrtc.params(kinds)
    assert signature.size == size
    values = [1.5 if k == F32 else (-(2**40) if k == I64 else (-7 if k == I32 else 0xDEAD_BEEF_00))
              for k in kinds]
    extra, buffer = _read_params(signature.pack(values))
    assert extra[0] == 1 and extra[2] == 2 and extra[4] == 0  # BUFFER_POINTER, BUFFER_SIZE, END
    assert len(buffer) == size
    for kind, offset, value in zip(kinds, offsets, values, strict=True):
        assert struct.unpack_from("@" + kind, buffer, offset)[0] == value


def test_a_signature_is_shared_and_each_thread_packs_into_its_own_buffer() -> None:
    signature = nvrtc.params(PTR + I64)
    assert nvrtc.params(PTR + I64) is signature
    mine = signature.pack((1, 2))
    theirs: list[tuple[int, bytes]] = []

    def other_thread() -> None:  # its buffer lives as long as the thread: read it here
        address = signature.pack((3, 4))
        theirs.append((address, _read_params(address)[1]))

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert theirs[0][1] == struct.pack("@Pq", 3, 4)
    assert _read_params(mine)[1] == struct.pack("@Pq", 1, 2)  # untouched by the other thread
    assert signature.pack((5, 6)) == mine  # the same buffer again, refilled
    assert _read_params(mine)[1] == struct.pack("@Pq", 5, 6)


_KIND_OF_TYPE = {"i64": I64, "u64": I64, "int": I32, "float": F32}


def _kernel_kinds(source: str, entry: str) -> str:
    """The parameter kinds of ``entry`` as declared in ``source`` (pointers, i64, int, float)."""
    text = re.sub(r"//[^\n]*", "", (KERNEL_DIR / source).read_text())
    match = re.search(rf"\b{entry}\(([^)]*)\)\s*\{{", text)
    assert match, f"{entry} not found in {source}"
    kinds = ""
    for param in match.group(1).split(","):
        words = param.replace("__restrict__", "").split()
        kinds += PTR if "*" in param else _KIND_OF_TYPE[words[-2]]
    return kinds


@pytest.mark.parametrize("entry,source", [
    ("embedding_bag_forward", "embedding_bag_forward.cu"),
    ("embedding_bag_forward_short", "embedding_bag_forward.cu"),
    ("embedding_bag_forward_segmented", "embedding_bag_forward.cu"),
    ("embedding_bag_forward_bulk", "embedding_gather.cu"),
    ("embedding_gather_bulk", "embedding_gather.cu"),
])
def test_forward_parameter_kinds_match_the_kernel_signatures(entry: str, source: str) -> None:
    assert launch.FORWARD_KINDS[entry] == _kernel_kinds(source, entry)


@pytest.mark.parametrize("entry,source,signature", [
    ("embedding_bag_backward", "embedding_bag_backward.cu", launch.CHUNK_PARAMS),
    ("embedding_bag_backward_combine", "embedding_bag_backward.cu", launch.COMBINE_PARAMS),
    ("tbe_prepare", "lookup_prepare.cu", launch.PREPARE_PARAMS),
])
def test_backward_parameter_kinds_match_the_kernel_signatures(entry: str, source: str, signature: Any) -> None:
    assert signature.kinds == _kernel_kinds(source, entry)


@pytest.mark.parametrize("entry", ["embedding_gather", "embedding_gather_bulk"])
def test_gather_parameter_kinds_match_the_kernel_signatures(entry: str) -> None:
    assert launch.GATHER_KINDS[entry] == _kernel_kinds("embedding_gather.cu", entry)


def test_every_forward_gather_and_backward_launch_packs_its_values() -> None:
    """Over a spread of the golden table's call shapes (meta tensors, described device), each
    launch's values pack into its entry's signature: as many values as parameters, each of
    its kind (a pointer, an integer in range, a float)."""
    from tests.kernels import golden_picks

    packed: dict[str, int] = {}

    def pack_only(index: Any, fn: tuple[str, str, str], grid: int, block: int, signature: Any,
                  values: Any) -> None:
        assert len(values) == len(signature.kinds), (fn[1], values)
        signature.pack(values)
        packed[fn[1]] = packed.get(fn[1], 0) + 1

    combos = list(golden_picks.combinations())[::97]
    with golden_picks.recording():  # restores every launch hook when it ends
        launch._launch_packed = pack_only  # type: ignore[assignment]
        for combo in combos:
            golden_picks.picks_of(combo)
    backward = {"embedding_bag_backward", "embedding_bag_backward_combine"}
    assert set(packed) == set(launch.FORWARD_KINDS) | set(launch.GATHER_KINDS) | backward, packed


def test_launch_passes_the_packed_buffer_and_names_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    calls: list[tuple[Any, ...]] = []
    result = [driver.CUresult.CUDA_SUCCESS]

    def launch_kernel(*args: Any) -> tuple[Any]:
        calls.append(args)
        _, buffer = _read_params(args[-1])
        calls.append((buffer,))
        return (result[0],)

    monkeypatch.setattr(nvrtc, "_cu_launch_kernel", lambda: launch_kernel)
    signature = nvrtc.params(PTR + I64 + I32 + F32)
    nvrtc.launch_packed("fn", 7, 256, 99, signature, (0xABC0, 2**40, -3, 0.25))
    assert calls[0][:10] == ("fn", 7, 1, 1, 256, 1, 1, 0, 99, None)
    assert calls[1][0] == struct.pack("@Pqif", 0xABC0, 2**40, -3, 0.25)
    nvrtc.launch_packed("fn", 0, 256, 99, signature, (0, 0, 0, 0.0))  # an empty grid launches nothing
    assert len(calls) == 2
    result[0] = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(nvrtc.LaunchError, match=r"CUDA_ERROR_INVALID_VALUE \(1\).*'Pqif'"):
        nvrtc.launch_packed(driver.CUfunction(1), 1, 32, 0, signature, (1, 2, 3, 0.5))


# --- which entry runs a call ------------------------------------------------------------------

def _entry_taken(monkeypatch: pytest.MonkeyPatch, weight: Any, psw: Any = None, compiling: bool = False) -> str:
    """Which entry an ``embedding_bag`` call on these tensors takes (each entry replaced by a recorder;
    the tensors on the CPU, their CUDA check skipped)."""
    import reference_kernels as rk

    taken: list[str] = []
    out = torch.zeros(1, 2)
    monkeypatch.setattr(api, "_require_cuda", lambda fn, **tensors: None)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    monkeypatch.setattr(ops, "embedding_bag_op", lambda *args: (taken.append("op"), (out, out))[1])
    monkeypatch.setattr(ops.EmbeddingBagFunction, "run", lambda *args: (taken.append("function"), out)[1])
    monkeypatch.setattr(launch, "bag_forward", lambda *args, **kwargs: (taken.append("forward"), (out, None))[1])
    indices = torch.zeros(3, 1, dtype=torch.int64)
    rk.embedding_bag(indices, weight, mode="sum", per_sample_weights=psw, check_indices=False)
    return taken[0]


def test_torch_compile_traces_the_registered_op(monkeypatch: pytest.MonkeyPatch) -> None:
    weight = torch.zeros(4, 2, requires_grad=True)
    assert _entry_taken(monkeypatch, weight, compiling=True) == "op"
    assert _entry_taken(monkeypatch, weight.detach(), compiling=True) == "op"


def test_eager_calls_take_the_autograd_function_only_when_a_gradient_may_flow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    weight, psw = torch.zeros(4, 2), torch.ones(3, 1)
    assert _entry_taken(monkeypatch, weight, psw) == "forward"
    assert _entry_taken(monkeypatch, weight.requires_grad_(True), psw) == "function"
    assert _entry_taken(monkeypatch, weight.detach(), psw.requires_grad_(True)) == "function"
    with torch.no_grad():
        assert _entry_taken(monkeypatch, weight, psw) == "forward"


def test_eager_embedding_takes_its_function_only_when_a_gradient_may_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    import reference_kernels as rk

    monkeypatch.setattr(api, "_require_cuda", lambda fn, **tensors: None)
    taken: list[str] = []
    monkeypatch.setattr(ops.EmbeddingFunction, "run", lambda *args: taken.append("function"))
    monkeypatch.setattr(ops, "embedding_impl", lambda *args: taken.append("forward"))
    weight, indices = torch.zeros(4, 2), torch.zeros(3, dtype=torch.int64)
    rk.embedding(indices, weight, check_indices=False)
    rk.embedding(indices, weight.requires_grad_(True), check_indices=False)
    with torch.no_grad():
        rk.embedding(indices, weight, check_indices=False)
    assert taken == ["forward", "function", "forward"]


def _traced_code(monkeypatch: pytest.MonkeyPatch, check: object, requires_grad: bool) -> str:
    """The code of the graph torch.compile records (never run) for one embedding_bag call on the CPU."""
    import reference_kernels as rk

    monkeypatch.setattr(api, "_require_cuda", lambda fn, **tensors: None)
    graphs: list[Any] = []

    def record(graph: Any, example_inputs: Any) -> Any:
        graphs.append(graph)
        return lambda *args: (torch.zeros(3, 4),)

    torch._dynamo.reset()
    compiled = torch.compile(lambda w, i: rk.embedding_bag(i, w, mode="sum", check_indices=check),
                             backend=record, fullgraph=True)
    compiled(torch.randn(10, 4, requires_grad=requires_grad), torch.randint(0, 10, (3, 2)))
    return str(graphs[0].code)


def test_dynamo_traces_the_registered_op_not_the_eager_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the CPU: torch.compile sees the op (the graph is recorded, never run)."""
    code = _traced_code(monkeypatch, False, requires_grad=True)
    assert "torch.ops.reference_kernels.embedding_bag.default" in code
    assert "EmbeddingBagFunction" not in code


@pytest.mark.parametrize(("check", "expected"), [(True, "sync"), (None, "deferred"), ("warn", "warn")])
def test_dynamo_traces_the_resolved_check_mode_into_the_check_op(monkeypatch: pytest.MonkeyPatch, check: object,
                                                                   expected: str) -> None:
    """The check mode is resolved to a CheckMode in the traced code and reaches the check op as its
    plain name (fullgraph: the enum breaks no graph)."""
    from reference_kernels import index_check

    for name in (index_check.MODE_ENV, index_check.SKIP_ENV):
        monkeypatch.delenv(name, raising=False)
    code = _traced_code(monkeypatch, check, requires_grad=False)
    assert f"index_check.default(indices, None, None, 10, 1, '{expected}', 'embedding_bag')" in code


def test_the_custom_ops_keep_their_autograd_registration() -> None:
    """torch.compile's path: the ops (with fake implementations, tested elsewhere) still carry
    the autograd formula that the eager Functions reuse."""
    for op, backward in ((ops.embedding_bag_op, ops._backward_bag), (ops.embedding_op, ops._backward_embedding)):
        assert op._backward_fn is backward  # type: ignore[attr-defined]
    assert torch._C._dispatch_has_kernel_for_dispatch_key("reference_kernels::embedding_bag", "Autograd")


# --- the eager Function's gradients, with torch's CPU reference in place of the kernels ------

def _reference_forward(weight: Any, indices: Any, offsets: Any, *, num_bags: int, per_sample_weights: Any,
                       mode: str, padding_idx: int, need_argmax: bool, table_rows: Any = None) -> tuple[Any, Any]:
    """launch.bag_forward by torch's CPU kernel (argmax -1 in empty bags, as the kernels')."""
    flat = indices.reshape(-1)
    if offsets is None:
        offsets = torch.arange(0, flat.numel(), indices.shape[1])
    psw = None if per_sample_weights is None else per_sample_weights.reshape(-1)
    out, _, bag_size, argmax = torch.ops.aten._embedding_bag_forward_only(
        weight, flat, offsets, False, ("sum", "mean", "max").index(mode), False, psw, offsets.numel() > num_bags,
        padding_idx)
    return out, torch.where(bag_size[:, None] > 0, argmax, -1) if need_argmax else None


def _reference_backward(grad_out: Any, indices: Any, bag_of: Any, bag_size: int, num_weights: int,
                        per_sample_weights: Any, bag_scale: Any, padding_idx: int, scale: float = 1.0) -> Any:
    flat = indices.reshape(-1)
    bags = torch.arange(flat.numel()) // max(1, bag_size) if bag_of is None else bag_of
    keep = (bags >= 0) & (flat != padding_idx)
    factor = torch.full((flat.numel(),), scale)
    if per_sample_weights is not None:
        factor = factor * per_sample_weights.reshape(-1)
    if bag_scale is not None:
        factor = factor * bag_scale[bags.clamp(min=0)]
    rows = grad_out[bags.clamp(min=0)] * (factor * keep).unsqueeze(1)
    return torch.zeros(num_weights, grad_out.shape[1]).index_add_(0, flat, rows)


@pytest.fixture
def reference_kernels_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API on CPU tensors: no device check, torch's CPU embedding_bag as the forward kernel
    and an index_add as the backward kernel."""
    monkeypatch.setattr(api, "_require_cuda", lambda fn, **tensors: None)
    monkeypatch.setattr(launch, "bag_forward", _reference_forward)
    monkeypatch.setattr(ops, "embedding_bag_backward_op", _reference_backward)


@pytest.mark.usefixtures("reference_kernels_on_cpu")
@pytest.mark.parametrize("layout", ["fixed", "csr", "csr_last"])
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_eager_function_gradients_equal_torch(mode: str, with_psw: bool, layout: str) -> None:
    import reference_kernels as rk

    gen = torch.Generator().manual_seed(27)
    weight = torch.randn(30, 6, generator=gen)
    indices = torch.randint(0, 30, (5, 4), generator=gen)
    offsets = None
    if layout != "fixed":
        indices = indices.reshape(-1)
        offsets = torch.tensor([0, 3, 3, 9, 14, 20] if layout == "csr_last" else [0, 3, 3, 9, 14])
    psw = torch.rand(indices.shape, generator=gen) if with_psw else None
    grad_out = torch.randn(5, 6, generator=gen)
    results = []
    for fn in (rk.embedding_bag, F.embedding_bag):
        w = weight.clone().requires_grad_(True)
        p = None if psw is None else psw.clone().requires_grad_(True)
        out = fn(indices, w, offsets, mode=mode, per_sample_weights=p, include_last_offset=layout == "csr_last",
                 padding_idx=2, **({"check_indices": False} if fn is rk.embedding_bag else {}))
        if fn is rk.embedding_bag:
            assert type(out.grad_fn).__name__ == "EmbeddingBagFunctionBackward"
        out.backward(grad_out)
        results.append((out.detach(), w.grad, None if p is None else p.grad))
    (ours, ours_w, ours_p), (ref, ref_w, ref_p) = results
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(ours_w, ref_w)
    if with_psw:
        torch.testing.assert_close(ours_p, ref_p)


@pytest.mark.usefixtures("reference_kernels_on_cpu")
def test_eager_embedding_function_gradient_equals_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import reference_kernels as rk

    monkeypatch.setattr(launch, "gather", lambda weight, flat: weight[flat])
    gen = torch.Generator().manual_seed(27)
    weight = torch.randn(20, 5, generator=gen)
    indices = torch.randint(0, 20, (4, 6), generator=gen)
    grad_out = torch.randn(4, 6, 5, generator=gen)
    grads = []
    for fn in (rk.embedding, F.embedding):
        w = weight.clone().requires_grad_(True)
        out = fn(indices, w, padding_idx=3, **({"check_indices": False} if fn is rk.embedding else {}))
        if fn is rk.embedding:
            assert type(out.grad_fn).__name__ == "EmbeddingFunctionBackward"
        out.backward(grad_out)
        grads.append(w.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_the_host_overhead_measurement_runs_without_a_gpu() -> None:
    """tests/kernels/host_overhead.py (the CPU lower bound of a call's host time) still drives
    the whole Python path, with and without the default index check and a gradient, and puts
    the process's ledgers and flags back."""
    pytest.importorskip("cuda.bindings.driver")  # the measurement drives cuda-bindings (the kernels extra)
    from reference_kernels import index_check
    from tests.kernels import host_overhead

    before = (index_check.FLAGS, index_check._FLAGS_DEVICE_PTR, index_check._LEDGERS)
    results = host_overhead.measure(calls=20)
    assert set(results) == {f"check={check} grad={grad}" for check in ("ignore", "deferred")
                            for grad in (False, True)}
    assert all(0 < us < 10_000 for us in results.values())
    assert (index_check.FLAGS, index_check._FLAGS_DEVICE_PTR, index_check._LEDGERS) == before


def test_the_host_overhead_check_case_checks_inside_the_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement's default-check case launches the lookup alone, its kernel checking the
    indices (CHECK, with the ledger's arguments), and makes its device's ledger (on the CPU) on
    the way; with fused_index_check off the check pass runs first, as before."""
    pytest.importorskip("cuda.bindings.driver")  # the measurement drives cuda-bindings (the kernels extra)
    from reference_kernels import index_check, tuning
    from tests.kernels import host_overhead

    launched: list[tuple[str, tuple[object, ...]]] = []
    launch_packed = launch._launch_packed
    monkeypatch.setattr(launch, "_launch_packed", lambda index, fn, grid, block, signature, values: (
        launched.append((signature.kinds, tuple(values))), launch_packed(index, fn, grid, block, signature, values)))
    with host_overhead.without_gpu(stubbed=False):
        host_overhead.issue_case(requires_grad=False, check=True)()
        assert [book.words.device.type for book in index_check._LEDGERS.values()] == ["cpu"]
        book = next(iter(index_check._LEDGERS.values()))
        lock, record, flag = book.pointers["deferred"]
        with tuning.tuned(fused_index_check=False):
            host_overhead.issue_case(requires_grad=False, check=True)()
    check_kinds = PTR + I64 + I64 + PTR + I64 + PTR + I64 + I64 + PTR + PTR + PTR + PTR + PTR + PTR + I64 + I64
    general = launch.FORWARD_KINDS["embedding_bag_forward"]
    assert [kinds for kinds, _ in launched] == [general, check_kinds, general]
    ledger = launched[0][1][-6:]
    assert ledger[:3] == (lock, record, flag) and ledger[3] > 0 and ledger[4:] == (1, 1_000_000)  # token, op, rows
    assert launched[2][1][-6:] == (0,) * 6  # after the pass, the lookup does not check


def test_the_manifest_passes_every_parameter_of_its_build_entries() -> None:
    """reference_kernels/kernel_manifest.yaml (what `compliance verify reference_kernels` builds
    and launches) gives each build entry one argument per kernel parameter, and ships every
    header the source includes: a short argument list makes the launch fail (the driver
    rejects the parameter buffer)."""
    import yaml

    manifest = yaml.safe_load((KERNEL_DIR / "kernel_manifest.yaml").read_text())
    for kernel in manifest["kernels"]:
        build = kernel["build"]
        if build["kind"] != "nvrtc":
            continue
        assert len(build["arguments"]) == len(_kernel_kinds(build["source"], build["entry"])), kernel["id"]
        included = re.findall(r'#include "([^"]+)"', (KERNEL_DIR / build["source"]).read_text())
        for header in included:
            nested = re.findall(r'#include "([^"]+)"', (KERNEL_DIR / header).read_text())
            assert {header, *nested} <= set(kernel["sources"]), (kernel["id"], header, nested)
