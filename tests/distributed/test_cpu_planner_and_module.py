"""The planner (no torch), and the sharded module on one process: its CPU lookups and updates
against torch.nn.functional.embedding_bag and the fused optimizers' float64 reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_kernels.distributed import (
    ROW_WISE,
    TABLE_WISE,
    PlanError,
    ShardingPlan,
    TableSpec,
    dcnv2,
    plan_sharding,
)

GIB = 2**30


def test_dcnv2_tables_are_mlperfs() -> None:
    """26 tables, 204,184,588 rows: 104.5 GB of float32 weights at dim 128 (more than one H100)."""
    specs = dcnv2.tables()
    assert len(specs) == 26 and sum(t.num_embeddings for t in specs) == 204_184_588
    assert sum(t.num_embeddings for t in specs) * 128 * 4 == 104_542_509_056


def test_planner_splits_dcnv2_over_two_h100s() -> None:
    """On two ranks of 70 GiB each the five 40M-row tables go row-wise, the rest table-wise, and
    each rank holds about half of the 98 GiB (weights and Adagrad state)."""
    plan = plan_sharding(dcnv2.tables(), [70 * GIB, 70 * GIB])
    row_wise = [t.name for t, p in zip(plan.tables, plan.placements, strict=True) if p.kind == ROW_WISE]
    assert row_wise == ["t00", "t09", "t19", "t20", "t21"]
    per_rank = plan.bytes_per_rank()
    assert max(per_rank) <= 70 * GIB and sum(per_rank) == sum(t.num_embeddings * (128 * 4 + 4) for t in plan.tables)
    assert abs(per_rank[0] - per_rank[1]) < 2 * GIB
    text = plan.describe()
    assert "t20" in text and "row-wise, ~20000000 rows per rank" in text and "rank 1:" in text
    with pytest.raises(PlanError, match="fits on no rank|exceed"):
        plan_sharding(dcnv2.tables(), [40 * GIB, 40 * GIB])


@st.composite
def tables_and_memory(draw: Any) -> tuple[list[TableSpec], list[int]]:
    count = draw(st.integers(1, 8))
    specs = [TableSpec(f"t{i}", draw(st.integers(1, 5000)), draw(st.sampled_from([4, 8, 16])),
                       draw(st.floats(0.0, 20.0)), draw(st.integers(1, 5))) for i in range(count)]
    memory = draw(st.lists(st.integers(1, 400_000), min_size=1, max_size=5))
    return specs, memory


@settings(max_examples=100, deadline=None)
@given(tables_and_memory())
def test_plans_fit_and_cover_every_row_once(case: tuple[list[TableSpec], list[int]]) -> None:
    """Any plan the planner returns fits each rank's memory and covers each row exactly once;
    otherwise it says why (PlanError)."""
    specs, memory = case
    try:
        plan = plan_sharding(specs, memory)
    except PlanError:
        assert sum(t.num_embeddings * (t.embedding_dim * 4 + 4) for t in specs) > min(memory) or len(memory) > 1
        return
    assert all(used <= budget for used, budget in zip(plan.bytes_per_rank(), memory, strict=True))
    for t, spec in enumerate(specs):
        pieces = sorted((s.row_start, s.row_end) for s in plan.shards() if s.table == t)
        assert pieces[0][0] == 0 and pieces[-1][1] == spec.num_embeddings
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))


def test_explicit_plans_are_checked() -> None:
    specs = [TableSpec("a", 10, 4), TableSpec("b", 3, 4)]
    plan = ShardingPlan.from_kinds(specs, [1, ROW_WISE], 3)
    assert [p.kind for p in plan.placements] == [TABLE_WISE, ROW_WISE]
    assert [(s.rank, s.row_start, s.row_end) for s in plan.shards() if s.table == 1] == [(0, 0, 1), (1, 1, 2),
                                                                                         (2, 2, 3)]
    with pytest.raises(PlanError, match="rank in"):
        ShardingPlan.from_kinds(specs, [3, 0], 3)
    with pytest.raises(PlanError, match="cannot be split"):
        ShardingPlan.from_kinds(specs, [0, ROW_WISE], 4)
    with pytest.raises(PlanError, match="unique"):
        ShardingPlan.from_kinds([specs[0], specs[0]], [0, 0], 1)
    with pytest.raises(ValueError, match="max_bag_size"):
        TableSpec("c", 5, 4, max_bag_size=0)


torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from reference_kernels import optim  # noqa: E402
from reference_kernels.distributed import ShardedTableBatchedEmbeddingBag, merge_shard_state_dicts  # noqa: E402
from tests.distributed import scenario as sc  # noqa: E402


def per_table_reference(batch: sc.Batch, batch_size: int, tables: dict[str, torch.Tensor],
                        dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(indices, offsets, weight) per table, as torch's embedding_bag takes them."""
    out = []
    for t, spec in enumerate(sc.TABLES):
        off = batch.offsets[t * batch_size:(t + 1) * batch_size + 1]
        out.append((batch.indices[int(off[0]):int(off[-1])], off - off[0],
                    tables[spec.name].to(dtype).clone().requires_grad_()))
    return out


@pytest.mark.slow  # 7-10 s each on two cores
@pytest.mark.parametrize("opt", ["sgd", "adagrad"])
def test_one_rank_matches_torch_and_the_float64_reference(opt: str) -> None:
    """Forward = torch's embedding_bag per table; after two steps the tables = float64 sparse
    gradients + optim.reference_update (float32 rounding apart)."""
    size = 2 * sc.LOCAL_BATCH
    module = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), size, sc.optimizer_for(opt))
    start = sc.initial_tables()
    module.load_tables(start)
    want = {name: w.double().clone() for name, w in start.items()}
    spec = sc.optimizer_for(opt)
    fill = spec.initial_accumulator_value if isinstance(spec, optim.RowWiseAdagrad) else 0.0
    state = {t.name: torch.full((t.num_embeddings,), fill, dtype=torch.float64) for t in sc.TABLES}
    for batch, grad in zip(sc.global_batches(2, 2), sc.output_grads(2, 2), strict=True):
        out = module(batch.indices, batch.offsets)
        parts = per_table_reference(batch, size, want, torch.float64)
        ref = torch.cat([F.embedding_bag(i, w, o, mode="sum", include_last_offset=True, sparse=True)
                         for i, o, w in parts], 1)
        torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
        out.backward(grad)
        ref.backward(grad.double())
        for (_, _, w), t in zip(parts, sc.TABLES, strict=True):
            assert w.grad is not None
            if w.grad._nnz():
                g = w.grad.coalesce()
                optim.reference_update(spec, want[t.name], state[t.name], state[t.name], g.indices()[0], g.values(),
                                       1)
    got = merge_shard_state_dicts([module.shard_state_dict()])
    for t in sc.TABLES:
        torch.testing.assert_close(got[t.name]["weight"].double(), want[t.name], rtol=1e-5, atol=1e-6)
        if opt == "adagrad":
            torch.testing.assert_close(got[t.name]["optimizer_state"].double(), state[t.name], rtol=1e-5, atol=1e-7)
    assert module.lookups[0].weight.grad is None  # fused: no gradient of any table


def test_bags_longer_than_their_slots_are_counted_and_offsets_checked() -> None:
    """A bag with more lookups than max_bag_size keeps its first max_bag_size (counted in
    dropped_lookups, read when the caller chooses); a batch of another size is refused."""
    specs = [TableSpec("a", 10, 2, max_bag_size=2)]
    module = ShardedTableBatchedEmbeddingBag(ShardingPlan.from_kinds(specs, [0], 1), 2, optim.SGD(lr=0.1))
    module.load_tables({"a": torch.arange(20.0).view(10, 2)})
    out = module(torch.tensor([1, 2, 3, 4]), torch.tensor([0, 3, 4]))  # bag 0: ids 1, 2, 3 (3 dropped)
    assert out.tolist() == [[6.0, 8.0], [8.0, 9.0]]
    assert int(module.dropped_lookups) == 1
    with pytest.raises(ValueError, match="T \\* B \\+ 1"):
        module(torch.tensor([1]), torch.tensor([0, 1]))


def test_checkpoints_must_cover_every_row() -> None:
    module = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), 2, sc.optimizer_for("sgd"))
    state = sc.snapshot(module)
    with pytest.raises(ValueError, match="covers 0 of rows"):
        module.load_shard_state_dicts([{**state, "shards": state["shards"][1:]}])
    with pytest.raises(ValueError, match="do not tile"):
        merge_shard_state_dicts([{**state, "shards": [{**state["shards"][0], "row_start": 1}]}])
    with pytest.raises(TypeError, match="SGD and optim.RowWiseAdagrad"):
        ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), 2, optim.Adam())  # type: ignore[arg-type]


def test_pipeline_takes_what_it_prefetched() -> None:
    """Off CUDA the pipeline runs the forward at prefetch; misuse is refused."""
    from reference_kernels.distributed import SparseForwardPipeline

    module = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), 2 * sc.LOCAL_BATCH, sc.optimizer_for("sgd"))
    module.load_tables(sc.initial_tables())
    batch = sc.global_batches(2, 1)[0]
    pipe = SparseForwardPipeline(module)
    with pytest.raises(RuntimeError, match="nothing prefetched"):
        pipe.take()
    pipe.prefetch(batch.indices, batch.offsets)
    with pytest.raises(RuntimeError, match="take\\(\\) the prefetched"):
        pipe.prefetch(batch.indices, batch.offsets)
    assert torch.equal(pipe.take(), module(batch.indices, batch.offsets))


def test_one_process_grouped_as_the_ranks_holds_their_weights() -> None:
    """group_as: one process's weights are the ranks' weights (one per rank and dim, tables in
    the same order; a row-wise table alone), the output columns stay in table order, and the
    tables train as with the default grouping (on the CPU every row is summed in lookup order)."""
    from reference_kernels.distributed.sharded import local_layout

    def names(groups: list[list[Any]]) -> list[list[str]]:
        return [[sc.TABLES[s.table].name for s in g] for g in groups]

    one = sc.plan_for(1, "table")
    table_wise = sc.plan_for(2, "table")  # big, wide on rank 0; small, mid, one on rank 1
    assert names(local_layout(one, 0, group_as=table_wise)) == [["small", "one"], ["big"], ["mid"], ["wide"]]
    assert names(local_layout(table_wise, 0)) == [["big"], ["wide"]]
    assert names(local_layout(table_wise, 1)) == [["small", "one"], ["mid"]]
    # mixed: big and wide row-wise (each a weight of its own here), small, mid, one on rank 1
    assert names(local_layout(one, 0, group_as=sc.plan_for(2, "mixed"))) == [["small", "one"], ["big"], ["mid"],
                                                                             ["wide"]]
    outputs, tables, module = sc.single_process("sgd", 2, group_as=table_wise)
    want_outputs, want_tables, _ = sc.single_process("sgd", 2)
    assert len(module.shard_lookups) == 4
    assert all(torch.equal(a, b) for a, b in zip(outputs, want_outputs, strict=True))
    assert all(torch.equal(tables[n]["weight"], want_tables[n]["weight"]) for n in want_tables)
    with pytest.raises(ValueError, match="same tables"):
        ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), 4, optim.SGD(lr=0.1),
                                        group_as=plan_sharding([TableSpec("x", 3, 4)], [GIB]))
