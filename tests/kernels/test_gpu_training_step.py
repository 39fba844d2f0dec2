"""GPU tests of whole training steps (forward, backward, fused update), issue 37 items 2 and 5.

* No host synchronisation: steps of ``TableBatchedEmbeddingBag`` and ``EmbeddingBag`` with a
  fused SGD or row-wise Adagrad, float32 and float16 weights, the default (deferred) index check,
  run under ``torch.cuda.set_sync_debug_mode("error")`` (torch raises on any synchronising call)
  and equal, bit for bit, the same steps run outside it.
* CUDA graphs: a step captured as torch documents (warm-up on a side stream, then
  ``torch.cuda.graph``) and replayed on new indices, offsets and gradients in its static buffers
  equals the same steps run eagerly, bit for bit (weights and optimizer state).
* Checkpoints: training stopped, saved (``state_dict`` through ``torch.save``), loaded into a
  fresh module and resumed equals training without the stop, bit for bit (stochastic rounding
  and Adam included: the step count and seed travel in the state dict).

Fresh random inputs every run (the ``gen`` fixture prints its seed); outputs poisoned with NaN.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import reference_kernels as rk  # noqa: E402
from reference_kernels import optim  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs", "drained_ledger")]

ROWS = (50, 1000, 7)
DIM = 64
BATCH = 16
SPECS = {
    "sgd": optim.SGD(lr=0.05),
    "adagrad": optim.RowWiseAdagrad(lr=0.05, eps=1e-6, initial_accumulator_value=0.1),
}


def tbe_batch(gen: torch.Generator, positions: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices and offsets of BATCH bags per table (bag lengths random, empty bags included);
    ``positions``: that many indices in all (the bags' lengths then vary around it)."""
    bags = len(ROWS) * BATCH
    if positions is None:
        lengths = torch.randint(0, 9, (bags,), generator=gen, device="cuda")
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        positions = int(offsets[-1])
    else:
        cuts = torch.randint(0, positions + 1, (bags - 1,), generator=gen, device="cuda").sort().values
        offsets = torch.cat([cuts.new_zeros(1), cuts, cuts.new_full((1,), positions)])
    bag = torch.searchsorted(offsets, torch.arange(positions, device="cuda"), right=True) - 1
    table_rows = torch.tensor(ROWS, device="cuda")[bag // BATCH]
    draw = torch.rand(positions, generator=gen, device="cuda", dtype=torch.float64)
    indices = (draw * table_rows).long().clamp(max=table_rows - 1)
    return indices, offsets


def tbe_pair(spec: optim.OptimizerSpec, dtype: torch.dtype) -> tuple[Any, Any]:
    """Two table-batched modules with equal weights and optimizer seeds."""
    first = TableBatchedEmbeddingBag(list(ROWS), DIM, dtype=dtype, device="cuda", optimizer=spec)
    second = TableBatchedEmbeddingBag(list(ROWS), DIM, dtype=dtype, device="cuda", optimizer=spec)
    first.optimizer_seed = second.optimizer_seed = 1234
    with torch.no_grad():
        second.weight.copy_(first.weight)
    return first, second


def assert_same_training_state(a: Any, b: Any) -> None:
    assert torch.equal(a.weight, b.weight)
    sa, sb = a.fused_state(a.weight), b.fused_state(b.weight)
    assert torch.equal(sa.state1, sb.state1) and torch.equal(sa.state2, sb.state2)


def tbe_step(module: Any, indices: torch.Tensor, offsets: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = module(indices, offsets)
    out.backward(grad)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_table_batched_steps_do_not_synchronise(name: str, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Three whole steps under sync debug mode "error", default index check; the same steps
    outside it give the same outputs, weights and state."""
    watched, plain = tbe_pair(SPECS[name], dtype)
    warm_indices, warm_offsets = tbe_batch(gen)
    warm_grad = torch.randn(BATCH, len(ROWS) * DIM, generator=gen, device="cuda").to(dtype)
    for module in (watched, plain):  # kernels compiled, ledger and optimizer state created: the same step
        tbe_step(module, warm_indices, warm_offsets, warm_grad)
    steps = [(*tbe_batch(gen), torch.randn(BATCH, len(ROWS) * DIM, generator=gen, device="cuda").to(dtype))
             for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        watched_outs = [tbe_step(watched, *step) for step in steps]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    plain_outs = [tbe_step(plain, *step) for step in steps]
    for ours, reference in zip(watched_outs, plain_outs, strict=True):
        assert not ours.isnan().any()
        assert torch.equal(ours, reference)
    assert_same_training_state(watched, plain)
    rk.check_index_errors()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_embedding_bag_module_steps_do_not_synchronise(name: str, dtype: torch.dtype, gen: torch.Generator) -> None:
    """rk.EmbeddingBag(optimizer=...): the same under sync debug mode "error"."""
    module = rk.EmbeddingBag(500, DIM, mode="sum", include_last_offset=True, optimizer=SPECS[name], device="cuda",
                             dtype=dtype)
    before = module.weight.detach().clone()

    def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lengths = torch.randint(0, 9, (BATCH,), generator=gen, device="cuda")
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        indices = torch.randint(0, 500, (int(offsets[-1]),), generator=gen, device="cuda")
        return indices, offsets, torch.randn(BATCH, DIM, generator=gen, device="cuda").to(dtype)

    indices, offsets, grad = batch()
    module(indices, offsets).backward(grad)  # warm-up
    steps = [batch() for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for indices, offsets, grad in steps:
            module(indices, offsets).backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not torch.equal(module.weight, before)
    rk.check_index_errors()


def _graph_step(spec: optim.OptimizerSpec, gen: torch.Generator) -> tuple[Any, Any, list[Callable[[], None]]]:
    """(eager module, graphed module, per step: a function that loads the step's inputs into the
    static buffers and replays the graph, running the eager module on the same inputs)."""
    eager, graphed = tbe_pair(spec, torch.float32)
    positions = 6 * len(ROWS) * BATCH
    static_indices, static_offsets = tbe_batch(gen, positions)
    static_grad = torch.randn(BATCH, len(ROWS) * DIM, generator=gen, device="cuda")
    rk.check_index_errors()  # the ledger exists before capture (its first use cannot be captured)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch's CUDA graph documentation does
        for _ in range(3):
            tbe_step(graphed, static_indices, static_offsets, static_grad)
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(3):
        tbe_step(eager, static_indices, static_offsets, static_grad)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = tbe_step(graphed, static_indices, static_offsets, static_grad)

    def make(indices: torch.Tensor, offsets: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            static_indices.copy_(indices)
            static_offsets.copy_(offsets)
            static_grad.copy_(grad)
            graph.replay()
            out = tbe_step(eager, indices, offsets, grad)
            assert torch.equal(static_out, out)

        return run

    steps = [make(*tbe_batch(gen, positions), torch.randn(BATCH, len(ROWS) * DIM, generator=gen, device="cuda"))
             for _ in range(4)]
    return eager, graphed, steps


@pytest.mark.parametrize("own_sort", [False, True], ids=["torch.sort", "radix_sort.cu"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_captured_training_step_replays_equal_eager(name: str, own_sort: bool, gen: torch.Generator,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A captured step replayed on four new batches (new indices, bag lengths and gradients in
    the static buffers): outputs, weights and optimizer state equal eager steps bit for bit; the
    batches' few hundred keys sorted by torch.sort, or by our radix sort (its zeroed counters and
    look-back words are part of the graph, so each replay starts them afresh)."""
    if own_sort:
        from reference_kernels import launch

        monkeypatch.setattr(launch, "RADIX_MIN_KEYS", 1)
    eager, graphed, steps = _graph_step(SPECS[name], gen)
    assert_same_training_state(eager, graphed)
    for run in steps:
        run()
        assert_same_training_state(eager, graphed)
    torch.cuda.synchronize()
    rk.check_index_errors()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_programmatic_launches_are_on_and_change_no_bit(name: str, gen: torch.Generator) -> None:
    """On an sm_90 GPU the compiled host path launches programmatically by default (change 61:
    every kernel waits for the previous one as its first statement); steps of a module a few
    thousand lookups long (the radix sort's and the combine's launches included) equal, bit for
    bit, the same steps with plain cuLaunchKernel launches."""
    from reference_kernels import host

    if not host.LOADED:
        pytest.skip("the compiled host path is not loaded (REFERENCE_KERNELS_HOST_PATH)")
    on = host.set_programmatic(True)
    assert on == (torch.cuda.get_device_capability() >= host.PROGRAMMATIC_MIN_CAPABILITY)
    programmatic, plain = tbe_pair(SPECS[name], torch.float32)
    steps = [(*tbe_batch(gen, positions=40_000), torch.randn(BATCH, len(ROWS) * DIM, generator=gen, device="cuda"))
             for _ in range(3)]
    outs = [tbe_step(programmatic, *step) for step in steps]
    host.set_programmatic(False)
    try:
        plain_outs = [tbe_step(plain, *step) for step in steps]
    finally:
        host.set_programmatic(on)
    for ours, reference in zip(outs, plain_outs, strict=True):
        assert not ours.isnan().any()
        assert torch.equal(ours, reference)
    assert_same_training_state(programmatic, plain)
    rk.check_index_errors()


RESUME_SPECS = {
    "sgd-f16-stochastic": (optim.SGD(lr=0.05, stochastic_rounding=True), torch.float16),
    "adagrad-f32": (SPECS["adagrad"], torch.float32),
    "adam-f16-stochastic": (optim.Adam(lr=0.01, betas=(0.8, 0.95), stochastic_rounding=True), torch.float16),
    "adam-f32": (optim.Adam(lr=0.01), torch.float32),
}


@pytest.mark.parametrize("name", sorted(RESUME_SPECS))
def test_resumed_training_equals_uninterrupted(name: str, gen: torch.Generator) -> None:
    """Six steps in one go against three, a checkpoint through torch.save, a fresh module (other
    weights, other seed) loaded from it, and three more: equal bit for bit."""
    spec, dtype = RESUME_SPECS[name]
    steps = [(*tbe_batch(gen), torch.randn(BATCH, len(ROWS) * DIM, generator=gen, device="cuda").to(dtype))
             for _ in range(6)]
    whole, stopped = tbe_pair(spec, dtype)
    for step in steps:
        tbe_step(whole, *step)
    for step in steps[:3]:
        tbe_step(stopped, *step)
    buffer = io.BytesIO()
    torch.save(stopped.state_dict(), buffer)
    buffer.seek(0)
    resumed = TableBatchedEmbeddingBag(list(ROWS), DIM, dtype=dtype, device="cuda", optimizer=spec)
    resumed.optimizer_seed = 99
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for step in steps[3:]:
        tbe_step(resumed, *step)
    assert_same_training_state(whole, resumed)
    assert resumed.fused_state(resumed.weight).step == whole.fused_state(whole.weight).step == 6
    rk.check_index_errors()
