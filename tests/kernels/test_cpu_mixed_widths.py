"""CPU tests for tables of mixed widths in one TableBatchedEmbeddingBag (issue 37 item 4): the
constructor's checks, the state dict, ``table(t)``, the plan of a width's launch and, with the
kernels replaced by torch references of their contracts, the module's bookkeeping (each width's
layout, output columns, output-gradient columns and bag scales) against torch's EmbeddingBag
per table. The kernels themselves: tests/kernels/test_gpu_mixed_widths.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from reference_kernels import launch, ops, optim, plan  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402
from reference_kernels.tuning import Tuning  # noqa: E402

HOPPER = plan.DeviceProps(sms=132, arch=90, max_threads_per_sm=2048, max_blocks_per_sm=32, regs_per_sm=65536,
                          smem_per_sm=228 << 10, smem_reserved_per_block=1 << 10)


@pytest.mark.parametrize("dims, message", [
    ([8, 6], "multiple of 4"), ([8, 1028], "from 4 to 1024"), ([0, 8], "got 0"), ([8, 2], "got 2"),
    ([8], "one width per table, got 1 widths for 2 tables"), ([8, 8, 8], "got 3 widths for 2 tables"),
])
def test_a_width_list_is_checked(dims: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TableBatchedEmbeddingBag([5, 6], dims)


def test_an_empty_width_list_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one table"):
        TableBatchedEmbeddingBag([], [])


def test_one_int_keeps_any_width_and_todays_state_dict() -> None:
    """Backward compatible: one int takes any width (2 here) and keeps one ``weight``; so does a
    list of one width."""
    for module in (TableBatchedEmbeddingBag([3, 4], 2), TableBatchedEmbeddingBag([3, 4], [8, 8])):
        assert list(module.state_dict()) == ["weight"]
        assert not hasattr(module, "groups")
    assert TableBatchedEmbeddingBag([3, 4], 2).weight.shape == (7, 2)
    assert TableBatchedEmbeddingBag([3, 4], [8, 8]).embedding_dims == [8, 8]


def test_mixed_widths_state_dict_has_one_weight_per_width_in_order_of_first_appearance() -> None:
    module = TableBatchedEmbeddingBag([5, 7, 3, 4, 2], [64, 128, 64, 12, 128], dtype=torch.float16)
    state = module.state_dict()
    assert list(state) == ["groups.0.weight", "groups.1.weight", "groups.2.weight"]
    assert [tuple(v.shape) for v in state.values()] == [(8, 64), (9, 128), (4, 12)]
    assert all(v.dtype == torch.float16 for v in state.values())
    assert [g.tables for g in module.groups] == [[0, 2], [1, 4], [3]]


def test_table_views_are_the_rows_of_each_width() -> None:
    sizes, dims = [5, 7, 3, 4], [64, 128, 64, 12]
    module = TableBatchedEmbeddingBag(sizes, dims)
    for t, (rows, dim) in enumerate(zip(sizes, dims, strict=True)):
        view = module.table(t)
        assert view.shape == (rows, dim)
        with torch.no_grad():
            view.fill_(float(t))
    weights = [g.weight for g in module.groups]
    assert torch.equal(weights[0][:5], torch.zeros(5, 64)) and torch.equal(weights[0][5:], torch.full((3, 64), 2.0))
    assert torch.equal(weights[1], torch.ones(7, 128)) and torch.equal(weights[2], torch.full((4, 12), 3.0))


@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam"])
def test_mixed_widths_checkpoint_round_trip_restores_every_widths_state(name: str) -> None:
    spec = {"sgd": optim.SGD(lr=0.1), "adagrad": optim.RowWiseAdagrad(lr=0.1), "adam": optim.Adam(lr=0.01)}[name]
    sizes, dims = [5, 7, 3], [16, 32, 16]
    trained = TableBatchedEmbeddingBag(sizes, dims, optimizer=spec)
    trained.optimizer_seed = 5
    for g, state in enumerate(trained.fused_states()):  # what training leaves: changed state and steps
        state.step = 3 + g
        with torch.no_grad():
            state.state1.uniform_()
            state.state2.uniform_()
    keys = list(trained.state_dict())
    assert keys == [f"groups.{g}.{k}" for g in range(2) for k in ("weight", "optimizer_state1", "optimizer_state2",
                                                                    "optimizer_step", "optimizer_seed")]
    fresh = TableBatchedEmbeddingBag(sizes, dims, optimizer=spec)
    fresh.load_state_dict(trained.state_dict())
    for a, b, sa, sb in zip(trained.groups, fresh.groups, trained.fused_states(), fresh.fused_states(), strict=True):
        assert torch.equal(a.weight, b.weight)
        assert torch.equal(sa.state1, sb.state1) and torch.equal(sa.state2, sb.state2)
        assert (sa.step, sa.seed) == (sb.step, sb.seed) and sa.seed == 5
    with pytest.raises(RuntimeError, match="groups.1.weight"):  # another layout does not load
        TableBatchedEmbeddingBag([5, 7, 3], [16, 32, 32], optimizer=spec).load_state_dict(trained.state_dict())


def test_width_groups_in_order_of_first_appearance() -> None:
    assert plan.width_groups([64, 128, 64, 12, 128]) == [[0, 2], [1, 4], [3]]
    assert plan.width_groups([]) == []


@given(st.lists(st.integers(0, 1 << 20), min_size=1, max_size=6))
def test_shared_align_keeps_exactly_the_common_power_of_two(remainders: list[int]) -> None:
    shared = launch.shared_align(*remainders)
    for size in (2, 4, 8, 16):
        assert (shared % size == 0) == all(r % 16 % size == 0 for r in remainders)


def _columns_call(dim: int, out_width: int, elem: int, align: int) -> plan.BagCall:
    return plan.BagCall(weight_dtype=0 if elem == 4 else 1, elem_bytes=elem, dim=dim, num_rows=10**6,
                        weight_align=align, out_aligned=True, index_type="i64", bag_size=0, num_indices=8 * 4096 * 20,
                        num_bags=2 * 4096, tables=2, table_batched=True, mode="sum", has_psw=False,
                        need_argmax=False, has_padding=False, out_width=out_width, all_bags=8 * 4096)


@pytest.mark.parametrize("avg_len", [2, 20, 90])
def test_a_widths_plan_is_the_side_by_side_plan_with_table_columns(avg_len: int) -> None:
    """The launch of one width takes the kernel its tables side by side would get, judged by the
    average bag of all tables, compiled with TABLE_COLS; the segmented and general kernels both."""
    knobs = Tuning()
    call = _columns_call(128, 300, 4, 0)
    call = replace(call, num_indices=call.all_bags * avg_len)
    side_by_side = replace(call, out_width=0, all_bags=0, num_indices=call.num_bags * avg_len)
    ours, theirs = plan.plan_bag_forward(call, HOPPER, knobs), plan.plan_bag_forward(side_by_side, HOPPER, knobs)
    assert call.avg_len == side_by_side.avg_len == avg_len
    assert ours.entry == theirs.entry and ours.blocks == theirs.blocks
    assert dict(ours.defines) == {**dict(theirs.defines), "TABLE_COLS": 1}
    assert "TABLE_COLS" not in dict(theirs.defines)


def test_a_width_of_one_table_finds_its_own_segment_size() -> None:
    """The average bag of all tables is not that table's: the segmented kernel works its segment
    size out from the table's offsets (segment_bags 0) instead of taking one from the plan."""
    call = replace(_columns_call(64, 300, 4, 0), tables=1, num_bags=65536, all_bags=8 * 65536,
                   num_indices=8 * 65536 * 2)
    ours = plan.plan_bag_forward(call, HOPPER, Tuning())
    alone = plan.plan_bag_forward(replace(call, out_width=0, all_bags=0, num_indices=65536 * 2), HOPPER, Tuning())
    assert ours.entry == alone.entry == "embedding_bag_forward_segmented"
    assert ours.segment_bags == 0 < alone.segment_bags


def test_the_columns_alignment_follows_the_weights_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """Widths [4, 64]: rows 68 elements wide. float32 keeps 16-byte columns; after .half() the
    same columns are 8-byte aligned, which each launch is told (a stale figure would let 16-byte
    vectors straddle them)."""
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(launch, "bag_forward_columns",
                        lambda weight, *a, columns_align, **k: seen.append((weight.shape[1], columns_align)))
    module = TableBatchedEmbeddingBag([3, 5], [4, 64])
    module.check_indices = False
    indices, offsets = torch.tensor([0, 1, 2]), torch.tensor([0, 2, 3])
    with torch.no_grad():
        module(indices, offsets)
        module.half()(indices, offsets)
    assert seen == [(4, 0), (64, 0), (4, 8), (64, 8)]


def test_columns_that_break_16_byte_alignment_get_narrower_vectors() -> None:
    """float16 widths [4, 64]: rows 68 elements (136 bytes) wide, so the 64-wide table's columns
    keep 8-byte vectors even though 64 elements would take 16-byte ones."""
    align = launch.shared_align(0, 0, 68 * 2, 4 * 2)
    assert align == 8
    assert _columns_call(64, 68, 2, align).tiling().vec == 4
    assert _columns_call(64, 64, 2, 0).tiling().vec == 8


# ------------------------------------------------ the bookkeeping, kernels replaced by references


def reference_columns_lookup(weight: Any, indices: Any, offsets: Any, *, tables: int, all_tables: int,
                             per_sample_weights: Any, mode: str, layout: Any, columns_align: int, out: Any) -> None:
    """launch.bag_forward_columns' contract in torch: table k of the launch reads the offsets'
    table layout[3k + 2]'s bags and rows from layout[3k], writes columns from layout[3k + 1]."""
    batch, dim = out.shape[0], weight.shape[1]
    for k in range(tables):
        first, column, g = (int(v) for v in layout[3 * k:3 * k + 3])
        bounds = offsets[g * batch:(g + 1) * batch + 1]
        lo, hi = int(bounds[0]), int(bounds[-1])
        psw = None if per_sample_weights is None else per_sample_weights[lo:hi]
        out[:, column:column + dim] = F.embedding_bag(indices[lo:hi] + first, weight, bounds[:-1] - lo, mode=mode,
                                                      per_sample_weights=psw)


def reference_backward(grad: Any, rows: Any, bag_of: Any, bag_size: int, num_weights: int, psw: Any,
                       bag_scale: Any, padding_idx: int, scale: float = 1.0) -> Any:
    """ops.embedding_bag_backward_op's contract in torch (positions of bag -1 and the padding row skipped)."""
    keep = (bag_of >= 0) & (rows != padding_idx)
    factor = torch.ones(rows.shape, dtype=grad.dtype)
    if psw is not None:
        factor = factor * psw
    if bag_scale is not None:
        factor = factor * bag_scale[bag_of.clamp(min=0)].to(grad.dtype)
    contributions = grad[bag_of.clamp(min=0)] * (factor * keep)[:, None]
    return torch.zeros(num_weights, grad.shape[1], dtype=grad.dtype).index_add_(0, rows, contributions)


@pytest.fixture
def reference_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "bag_forward_columns", reference_columns_lookup)
    monkeypatch.setattr(ops, "embedding_bag_backward_op", reference_backward)


@pytest.mark.usefixtures("reference_kernels")
@pytest.mark.parametrize("dims", [[64, 128, 64], [4, 12, 36, 12, 4], [8, 16]])
@pytest.mark.parametrize("mode, weighted", [("sum", False), ("sum", True), ("mean", False)])
def test_module_bookkeeping_matches_embedding_bag_per_table(dims: list[int], mode: str, weighted: bool) -> None:
    """Output [B, sum(dims)] in table order and each table's gradient, float64, with the lookup
    and the backward kernel replaced by their contracts: interleaved widths, empty bags."""
    gen = torch.Generator().manual_seed(len(dims) * 7 + weighted)
    sizes, batch = [9 + 3 * t for t in range(len(dims))], 6
    module = TableBatchedEmbeddingBag(sizes, dims, mode=mode, dtype=torch.float64)
    module.check_indices = False
    lengths = torch.randint(0, 5, (len(dims) * batch,), generator=gen)
    lengths[1] = 0
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    table_of = torch.arange(len(dims)).repeat_interleave(batch).repeat_interleave(lengths)
    indices = (torch.rand(int(lengths.sum()), generator=gen, dtype=torch.float64)
               * torch.tensor(sizes)[table_of]).long()
    psw = torch.rand(indices.shape, generator=gen, dtype=torch.float64) if weighted else None
    out = module(indices, offsets, psw)
    assert out.shape == (batch, sum(dims))
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(grad_out)
    column = 0
    for t, dim in enumerate(dims):
        weight = module.table(t).detach().clone().requires_grad_()
        lo, hi = int(offsets[t * batch]), int(offsets[(t + 1) * batch])
        expected = F.embedding_bag(indices[lo:hi], weight, offsets[t * batch:(t + 1) * batch] - lo, mode=mode,
                                   per_sample_weights=None if psw is None else psw[lo:hi])
        torch.testing.assert_close(out[:, column:column + dim], expected)
        expected.backward(grad_out[:, column:column + dim])
        group = module.groups[int(module.table_meta[0, t])]
        start = group.row_starts[group.tables.index(t)]
        assert group.weight.grad is not None
        torch.testing.assert_close(group.weight.grad[start:start + sizes[t]], weight.grad)
        column += dim
