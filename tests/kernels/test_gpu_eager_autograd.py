"""GPU tests of the eager autograd path: outside torch.compile a call whose weight (or
per-sample weights) needs a gradient runs ``ops.EmbeddingBagFunction`` (the registered op's
own setup and backward, without the custom op's Python dispatch). Its results and gradients
equal torch's and the custom op's, double backward behaves as through the op, and forward plus
backward can be captured in a CUDA graph and replayed on new indices. The table-batched
module's eager path (``tbe.TBEFunction``) gives the op's results and gradients too."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import reference_kernels as rk  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs")]

ROWS, DIM, BAGS = 500, 64, 48


def _bags(layout: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
    """(input, offsets, include_last_offset): fixed [48, 7] or CSR bags of 0..14 rows (bag 0 empty)."""
    if layout == "fixed":
        return torch.randint(0, ROWS, (BAGS, 7), generator=gen, device="cuda"), None, False
    lengths = torch.randint(0, 15, (BAGS,), generator=gen, device="cuda")
    lengths[0] = 0
    ends = lengths.cumsum(0)
    indices = torch.randint(0, ROWS, (int(ends[-1]),), generator=gen, device="cuda")
    offsets = torch.cat([ends.new_zeros(1), ends])
    return indices, (offsets if layout == "csr_last" else offsets[:-1]), layout == "csr_last"


def _grads(fn: Any, weight: torch.Tensor, bags: tuple[torch.Tensor, torch.Tensor | None, bool], mode: str,
           psw: torch.Tensor | None, grad_out: torch.Tensor, **kwargs: Any) -> tuple[Any, ...]:
    indices, offsets, last = bags
    w = weight.detach().clone().requires_grad_(True)
    p = None if psw is None else psw.detach().clone().requires_grad_(True)
    out = fn(indices, w, offsets, mode=mode, per_sample_weights=p, include_last_offset=last, padding_idx=3,
             **kwargs)
    out.backward(grad_out)
    return out, w.grad, None if p is None else p.grad


@pytest.mark.parametrize("layout", ["fixed", "csr", "csr_last"])
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_eager_gradients_equal_torch(mode: str, with_psw: bool, layout: str, gen: torch.Generator) -> None:
    weight = torch.randn(ROWS, DIM, generator=gen, device="cuda")
    bags = _bags(layout, gen)
    psw = torch.rand(bags[0].shape, generator=gen, device="cuda") if with_psw else None
    grad_out = torch.randn(BAGS, DIM, generator=gen, device="cuda")
    ours, ours_w, ours_p = _grads(rk.embedding_bag, weight, bags, mode, psw, grad_out)
    assert type(ours.grad_fn).__name__ == "EmbeddingBagFunctionBackward"
    ref, ref_w, ref_p = _grads(F.embedding_bag, weight, bags, mode, psw, grad_out)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours_w, ref_w, rtol=1e-5, atol=1e-5)
    if with_psw:
        torch.testing.assert_close(ours_p, ref_p, rtol=1e-5, atol=1e-5)


def _through_the_op(indices: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor | None, *, mode: str,
                    per_sample_weights: torch.Tensor | None, include_last_offset: bool,
                    padding_idx: int) -> torch.Tensor:
    """The registered op called directly (the path torch.compile traces), with autograd."""
    out, _ = torch.ops.reference_kernels.embedding_bag(weight, indices, offsets, per_sample_weights, mode,
                                                        padding_idx, include_last_offset, mode == "max")
    result: torch.Tensor = out
    return result


@pytest.mark.parametrize("mode,with_psw", [("sum", True), ("mean", False), ("max", False)])
def test_eager_function_and_custom_op_give_the_same_gradients(mode: str, with_psw: bool,
                                                              gen: torch.Generator) -> None:
    weight = torch.randn(ROWS, DIM, generator=gen, device="cuda")
    bags = _bags("csr", gen)
    psw = torch.rand(bags[0].shape, generator=gen, device="cuda") if with_psw else None
    grad_out = torch.randn(BAGS, DIM, generator=gen, device="cuda")
    ours = _grads(rk.embedding_bag, weight, bags, mode, psw, grad_out, check_indices=False)
    op = _grads(_through_the_op, weight, bags, mode, psw, grad_out)
    assert "GeneratedBackwardFor_reference_kernels_embedding_bag" in type(op[0].grad_fn).__name__
    assert torch.equal(ours[0], op[0])
    if mode == "max":  # the max backward adds with atomics: equal up to the order of additions
        torch.testing.assert_close(ours[1], op[1], rtol=1e-6, atol=1e-6)
    else:  # the sort-based backward is deterministic
        assert torch.equal(ours[1], op[1])
    if with_psw:
        assert torch.equal(ours[2], op[2])


def _second_order(fn: Any, weight: torch.Tensor, bags: tuple[torch.Tensor, torch.Tensor | None, bool]) -> str:
    """What a double backward does: 'ok', or the name of the exception it raises."""
    indices, offsets, last = bags
    w = weight.detach().clone().requires_grad_(True)
    out = fn(indices, w, offsets, mode="sum", per_sample_weights=None, include_last_offset=last, padding_idx=3)
    try:
        (grad,) = torch.autograd.grad(out.square().sum(), w, create_graph=True)
        grad.square().sum().backward()
    except Exception as exc:  # noqa: BLE001 - the outcome itself is compared
        return type(exc).__name__
    return "ok"


def test_double_backward_behaves_as_through_the_custom_op(gen: torch.Generator) -> None:
    weight = torch.randn(ROWS, DIM, generator=gen, device="cuda")
    bags = _bags("csr", gen)
    assert _second_order(rk.embedding_bag, weight, bags) == _second_order(_through_the_op, weight, bags)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_forward_and_backward_capture_in_a_cuda_graph(mode: str, gen: torch.Generator) -> None:
    """No host synchronisation and no host-side allocation per call with check_indices=False:
    the whole step is captured once and replayed on new indices, matching torch."""
    weight = torch.randn(ROWS, DIM, generator=gen, device="cuda").requires_grad_(True)
    indices = torch.randint(0, ROWS, (BAGS, 9), generator=gen, device="cuda")
    grad_out = torch.randn(BAGS, DIM, generator=gen, device="cuda")

    def step() -> tuple[torch.Tensor, torch.Tensor]:
        out = rk.embedding_bag(indices, weight, mode=mode, check_indices=False)
        (grad,) = torch.autograd.grad(out, weight, grad_out)
        return out, grad

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: compiles and plans
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, grad = step()
    for _ in range(2):
        indices.copy_(torch.randint(0, ROWS, (BAGS, 9), generator=gen, device="cuda"))
        graph.replay()
        w = weight.detach().clone().requires_grad_(True)
        ref = F.embedding_bag(indices, w, mode=mode)
        (ref_grad,) = torch.autograd.grad(ref, w, grad_out)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False)])
def test_table_batched_eager_path_gives_the_op_s_results_and_gradients(mode: str, with_psw: bool,
                                                                        gen: torch.Generator) -> None:
    """TableBatchedEmbeddingBag in eager mode: with a gradient, ``tbe.TBEFunction`` (the op's own
    setup and backward, no custom-op dispatch); without, the implementation alone. Output and
    weight gradient equal the registered op's; per-sample weights get no gradient, as from the op."""
    from reference_kernels import tbe as tbe_module

    tbe = tbe_module.TableBatchedEmbeddingBag([300, ROWS, 40], DIM, mode, torch.float32, "cuda")
    tbe.check_indices = False
    lengths = torch.randint(0, 9, (3 * BAGS,), generator=gen, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    sizes = torch.tensor([300, ROWS, 40], device="cuda").repeat_interleave(BAGS).repeat_interleave(lengths)
    indices = (torch.rand(int(offsets[-1]), generator=gen, device="cuda") * sizes).long()
    psw = torch.rand(indices.shape, generator=gen, device="cuda").requires_grad_(True) if with_psw else None
    grad_out = torch.randn(BAGS, 3 * DIM, generator=gen, device="cuda")

    out = tbe(indices, offsets, psw)
    assert type(out.grad_fn).__name__ == "TBEFunctionBackward"
    out.backward(grad_out)
    ours = tbe.weight.grad.clone()
    tbe.weight.grad = None
    op_out = tbe_module.tbe_forward_op(tbe.weight, tbe.table_rows, tbe.table_sizes, indices, offsets, psw, mode)
    op_out.backward(grad_out)
    assert torch.equal(out, op_out) and torch.equal(ours, tbe.weight.grad)  # deterministic backward
    assert psw is None or psw.grad is None
    with torch.no_grad():
        assert tbe(indices, offsets, psw).grad_fn is None
