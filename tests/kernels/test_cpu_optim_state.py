"""CPU tests: a fused optimizer's state, step count and seed in the module's state dict
(``_optim_state.py``). The update itself runs on the CPU as ``optim.reference_update``, the
torch reference of the kernels' math; the GPU resume test (test_gpu_training_step.py) checks
that a resumed run of the kernels equals an uninterrupted one bit for bit."""

from __future__ import annotations

import io
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reference_kernels import optim, sparse_update  # noqa: E402
from reference_kernels.modules import Embedding, EmbeddingBag  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

SPECS = {
    "sgd": optim.SGD(lr=0.1),
    "adagrad": optim.RowWiseAdagrad(lr=0.1, initial_accumulator_value=0.5),
    "adam": optim.Adam(lr=0.01),
}
KEYS = ["optimizer_state1", "optimizer_state2", "optimizer_step", "optimizer_seed"]


def tbe(spec: optim.OptimizerSpec | None, seed: int | None = None) -> TableBatchedEmbeddingBag:
    module = TableBatchedEmbeddingBag([7, 5, 9], 8, optimizer=spec)
    module.optimizer_seed = seed
    return module


def train_on_cpu(module: Any, steps: int, gen: torch.Generator) -> None:
    """What the kernels' fused update does per step, written with the torch reference: the
    touched rows and their state change, the step count advances."""
    state = module.fused_state(module.weight)
    rows_total, dim = module.weight.shape
    for _ in range(steps):
        rows = torch.randperm(rows_total, generator=gen)[:4]
        grad = torch.randn(4, dim, generator=gen)
        state.step += 1
        with torch.no_grad():
            optim.reference_update(state.spec, module.weight, state.state1, state.state2, rows, grad, state.step)


def assert_same_training_state(a: Any, b: Any) -> None:
    sa, sb = a.fused_state(a.weight), b.fused_state(b.weight)
    assert torch.equal(a.weight, b.weight)
    assert torch.equal(sa.state1, sb.state1) and torch.equal(sa.state2, sb.state2)
    assert (sa.step, sa.seed) == (sb.step, sb.seed)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_state_dict_round_trip_restores_state_step_and_seed(name: str) -> None:
    """Saved after some steps, loaded into a fresh module (other weights, other seed): equal
    weight, state, step and seed; training both further gives equal results."""
    gen = torch.Generator().manual_seed(1)
    trained = tbe(SPECS[name])
    train_on_cpu(trained, 3, gen)
    buffer = io.BytesIO()
    torch.save(trained.state_dict(), buffer)
    buffer.seek(0)
    resumed = tbe(SPECS[name], seed=12345)
    assert not torch.equal(resumed.weight, trained.weight)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same_training_state(trained, resumed)
    assert resumed.fused_state(resumed.weight).step == 3
    train_on_cpu(trained, 2, torch.Generator().manual_seed(7))
    train_on_cpu(resumed, 2, torch.Generator().manual_seed(7))
    assert_same_training_state(trained, resumed)


def test_state_dict_keys_with_and_without_optimizer() -> None:
    """With an optimizer: the weight and the four entries, before any step too; without one:
    exactly torch's keys (the modules stay drop-ins)."""
    assert list(tbe(SPECS["adagrad"]).state_dict()) == ["weight", *KEYS]
    assert list(tbe(None).state_dict()) == ["weight"]
    ours = EmbeddingBag(10, 4, mode="sum").state_dict()
    assert list(ours) == list(torch.nn.EmbeddingBag(10, 4, mode="sum").state_dict())
    state = Embedding(10, 4, optimizer=SPECS["sgd"]).state_dict()
    assert list(state) == ["weight", *KEYS]
    assert state["optimizer_step"].dtype == torch.int64 and state["optimizer_step"].dim() == 0


def test_seed_is_kept_across_state_dict_calls() -> None:
    """The state (with its random seed) is created once: two state dicts agree."""
    module = tbe(SPECS["sgd"])
    assert int(module.state_dict()["optimizer_seed"]) == int(module.state_dict()["optimizer_seed"])
    assert int(tbe(SPECS["sgd"], seed=99).state_dict()["optimizer_seed"]) == 99


def test_nested_module_prefixes() -> None:
    """Inside a model the entries carry the submodule's prefix and load back."""
    model = torch.nn.ModuleDict({"emb": EmbeddingBag(6, 4, mode="sum", optimizer=SPECS["adagrad"])})
    train_on_cpu(model["emb"], 2, torch.Generator().manual_seed(3))
    state = model.state_dict()
    assert sorted(state) == sorted(["emb.weight", *(f"emb.{key}" for key in KEYS)])
    other = torch.nn.ModuleDict({"emb": EmbeddingBag(6, 4, mode="sum", optimizer=SPECS["adagrad"])})
    other.load_state_dict(state)
    assert_same_training_state(model["emb"], other["emb"])


def test_missing_and_unexpected_entries() -> None:
    """strict loading reports a checkpoint without optimizer entries as missing keys, and
    optimizer entries given to a module without an optimizer as unexpected; non-strict
    loading returns the same lists (as torch does) and leaves the state as it is."""
    plain = tbe(None).state_dict()
    fused = tbe(SPECS["adagrad"])
    with pytest.raises(RuntimeError, match="Missing key.*optimizer_state1"):
        fused.load_state_dict(plain)
    before = fused.fused_state(fused.weight).state1.clone()
    result = fused.load_state_dict(plain, strict=False)
    assert sorted(result.missing_keys) == sorted(KEYS)
    assert torch.equal(fused.fused_state(fused.weight).state1, before)
    with pytest.raises(RuntimeError, match="Unexpected key.*optimizer_state1"):
        tbe(None).load_state_dict(fused.state_dict())
    result = tbe(None).load_state_dict(fused.state_dict(), strict=False)
    assert sorted(result.unexpected_keys) == sorted(KEYS)


@pytest.mark.parametrize(("saved", "loaded"), [("adagrad", "adam"), ("adam", "sgd"), ("sgd", "adagrad")])
def test_other_optimizers_state_is_refused(saved: str, loaded: str) -> None:
    """A checkpoint of another optimizer's state does not fit: a size mismatch, nothing copied."""
    target = tbe(SPECS[loaded])
    before = [t.clone() for t in (target.fused_state(target.weight).state1, target.fused_state(target.weight).state2)]
    with pytest.raises(RuntimeError, match="size mismatch for optimizer_state"):
        target.load_state_dict(tbe(SPECS[saved]).state_dict())
    after = target.fused_state(target.weight)
    assert torch.equal(after.state1, before[0]) and torch.equal(after.state2, before[1])


def test_step_must_be_one_integer() -> None:
    state = tbe(SPECS["sgd"]).state_dict()
    state["optimizer_step"] = torch.tensor([1.5])
    with pytest.raises(RuntimeError, match="optimizer_step must be one integer"):
        tbe(SPECS["sgd"]).load_state_dict(state)


@pytest.mark.parametrize(("spec", "dtype"), [(optim.Adam(), torch.float32),
                                             (optim.SGD(lr=0.1, stochastic_rounding=True), torch.float16)])
def test_step_dependent_updates_refuse_graph_capture(spec: optim.OptimizerSpec, dtype: torch.dtype,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A replayed graph repeats the captured step count: Adam and stochastic rounding refuse
    capture (before any kernel runs, so this runs on the CPU); the step count is unchanged."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    weight = torch.zeros(5, 4, dtype=dtype)
    fused = sparse_update.FusedState.for_weight(spec, weight)
    lookups = sparse_update.Lookups(torch.tensor([1, 2]), None, 1, None, None, 1.0, -1)
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph"):
        sparse_update.sparse_or_fused_backward(torch.ones(2, 4, dtype=dtype), lookups, weight, fused)
    assert fused.step == 0
