"""CPU tests: the fused optimizers' reference math against torch.optim, the specs' and the
modules' argument checking (the kernels themselves are GPU-tested)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import reference_kernels as rk  # noqa: E402
from reference_kernels import optim  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402


def sparse_grad(weight: torch.Tensor, idx: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    w = weight.detach().clone().requires_grad_()
    F.embedding_bag(idx, w, mode="sum", sparse=True).backward(grad_out)
    assert w.grad is not None
    return w.grad.coalesce()


def steps(seed: int, count: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 30, (6, 5), generator=g), torch.randn(6, 8, generator=g, dtype=torch.float64))
            for _ in range(count)]


@pytest.mark.parametrize("seed", range(3))
def test_reference_sgd_and_adam_equal_torch_optimizers(seed: int) -> None:
    """SGD on a sparse gradient and SparseAdam (lazy) are what reference_update computes."""
    for spec, make in [(optim.SGD(lr=0.1), lambda p: torch.optim.SGD([p], lr=0.1)),
                       (optim.Adam(lr=0.01, betas=(0.8, 0.9), eps=1e-6),
                        lambda p: torch.optim.SparseAdam([p], lr=0.01, betas=(0.8, 0.9), eps=1e-6))]:
        w0 = torch.randn(30, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        param = torch.nn.Parameter(w0.clone())
        opt = make(param)
        ours = w0.clone()
        s1, s2 = optim.new_state(spec, 30, 8, "cpu")
        s1, s2 = s1.double(), s2.double()
        for step, (idx, grad_out) in enumerate(steps(seed), start=1):
            opt.zero_grad()
            F.embedding_bag(idx, param, mode="sum", sparse=True).backward(grad_out)
            opt.step()
            g = sparse_grad(ours, idx, grad_out)
            optim.reference_update(spec, ours, s1, s2, g.indices()[0], g.values(), step)
            torch.testing.assert_close(ours, param.detach(), rtol=1e-13, atol=1e-15)
        if isinstance(spec, optim.Adam):
            st = opt.state[param]
            torch.testing.assert_close(s1, st["exp_avg"], rtol=1e-13, atol=1e-15)
            torch.testing.assert_close(s2, st["exp_avg_sq"], rtol=1e-13, atol=1e-15)


def test_reference_rowwise_adagrad_is_fbgemms_formula() -> None:
    spec = optim.RowWiseAdagrad(lr=0.5, eps=0.25, weight_decay=0.5, initial_accumulator_value=1.0)
    w = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 4.0]], dtype=torch.float64)
    s1, s2 = optim.new_state(spec, 3, 2, "cpu")
    s1 = s1.double()
    optim.reference_update(spec, w, s1, s2, torch.tensor([1]), torch.tensor([[1.0, 1.5]], dtype=torch.float64), 1)
    g = torch.tensor([1.0 + 1.5, 1.5 - 0.5], dtype=torch.float64)  # + weight_decay * w
    s = 1.0 + (g * g).mean()
    assert float(s1[1]) == pytest.approx(float(s))
    torch.testing.assert_close(w[1], torch.tensor([3.0, -1.0], dtype=torch.float64) - 0.5 * g / (s.sqrt() + 0.25))
    assert torch.equal(w[0], torch.tensor([1.0, 2.0], dtype=torch.float64)) and float(s1[0]) == 1.0


def test_reference_sgd_weight_decay_only_on_touched_rows() -> None:
    w = torch.ones(4, 2, dtype=torch.float64)
    s1, s2 = optim.new_state(optim.SGD(lr=0.1), 4, 2, "cpu")
    optim.reference_update(optim.SGD(lr=0.1, weight_decay=0.5), w, s1, s2, torch.tensor([2]),
                           torch.zeros(1, 2, dtype=torch.float64), 1)
    assert w[2].tolist() == pytest.approx([0.95, 0.95]) and w[[0, 1, 3]].eq(1).all()


@pytest.mark.parametrize("make, message", [
    (lambda: optim.SGD(lr=-1.0), "lr must be"),
    (lambda: optim.SGD(lr=0.1, weight_decay=float("nan")), "weight_decay must be"),
    (lambda: optim.RowWiseAdagrad(lr=0.1, eps=0.0), "eps must be > 0"),
    (lambda: optim.Adam(betas=(0.9, 1.0)), "betas must be"),
    (lambda: rk.EmbeddingBag(10, 4, optimizer=torch.optim.SGD), "optimizer must be"),
    (lambda: rk.Embedding(10, 4, optimizer="sgd"), "optimizer must be"),
    (lambda: TableBatchedEmbeddingBag([5, 6], 4, optimizer=0.1), "optimizer must be"),
    (lambda: TableBatchedEmbeddingBag([5, 6], 4, mode="max", sparse=True), "max mode has no backward"),
])
def test_optimizer_specs_and_modules_reject_bad_arguments(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        make()


def test_fused_modules_on_cpu_refuse_clearly() -> None:
    bag = rk.EmbeddingBag(10, 4, mode="max", optimizer=optim.SGD(lr=0.1))
    with pytest.raises(ValueError, match="max mode does not support sparse"):
        bag(torch.tensor([[1, 2]]))
    bag = rk.EmbeddingBag(10, 4, mode="sum", optimizer=optim.Adam())
    with pytest.raises(RuntimeError, match="needs CUDA tensors"):
        bag(torch.tensor([[1, 2]]))
    assert isinstance(bag, torch.nn.EmbeddingBag) and bag.optimizer == optim.Adam()
    assert set(bag.state_dict()) == {"weight", "optimizer_state1", "optimizer_state2", "optimizer_step",
                                     "optimizer_seed"}  # the optimizer's state is checkpointed with the weight


def test_adam_step_size_is_sparse_adams_bias_correction() -> None:
    spec = optim.Adam(lr=0.1, betas=(0.5, 0.75))
    assert spec.step_size(1) == pytest.approx(0.1 * (1 - 0.75) ** 0.5 / (1 - 0.5))
    assert spec.step_size(3) == pytest.approx(0.1 * (1 - 0.75**3) ** 0.5 / (1 - 0.5**3))
