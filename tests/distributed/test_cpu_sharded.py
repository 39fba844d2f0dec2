"""Sharded tables on the CPU: several gloo processes against one process on the same global
batches (forward, fused SGD / row-wise Adagrad updates, state dicts, resharding N -> M).

The ranks run once per world size (a module fixture: process start-up dominates), every
scenario in one go (tests/distributed/worker.py); each test compares one part of what they saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reference_kernels.distributed import ShardedTableBatchedEmbeddingBag, merge_shard_state_dicts  # noqa: E402
from tests.distributed import scenario as sc  # noqa: E402
from tests.distributed.launch import launch_forked  # noqa: E402
from tests.distributed.worker import EXACT, KINDS, OPTIMIZERS  # noqa: E402


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("gloo2")
    sc.start_checkpoint(out, 2)
    return launch_forked(2, out)


def gathered(ranks: list[dict[str, Any]], name: str) -> tuple[Any, dict[str, dict[str, Any]]]:
    """Every step's output over the global batch (ranks in order) and the merged tables."""
    outputs = [torch.cat(step) for step in zip(*(r[name]["outputs"] for r in ranks), strict=True)]
    return outputs, merge_shard_state_dicts([r[name]["state"] for r in ranks])


def assert_tables_equal(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        for part in ("weight", "optimizer_state"):
            assert torch.equal(got[name][part], want[name][part]), f"{name} {part}"


@pytest.mark.parametrize("opt", OPTIMIZERS)
@pytest.mark.parametrize("kind", KINDS)
def test_two_ranks_equal_one_process(two_ranks: list[dict[str, Any]], opt: str, kind: str) -> None:
    """After STEPS steps every table's weights and optimizer state equal the single process's bit
    for bit (each row's gradient is summed in the same order); the forward is bit-equal for
    table-wise plans and within float32 rounding where row-wise partial sums are added per rank."""
    outputs, tables = gathered(two_ranks, f"{opt}-{kind}")
    want_outputs, want_tables, _ = sc.single_process(opt, 2)
    assert_tables_equal(tables, want_tables)
    for got, want in zip(outputs, want_outputs, strict=True):
        if kind == "table":
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # the training moved the tables (a comparison of untouched tables would prove nothing)
    assert not torch.equal(tables["big"]["weight"], sc.initial_tables()["big"])


def test_a_weight_per_shard_changes_nothing_but_the_layout(two_ranks: list[dict[str, Any]]) -> None:
    """weight_per_shard=True (each table in a weight of its own): the same outputs, in the same
    columns, and the same tables as the shared weights' single process."""
    outputs, tables = gathered(two_ranks, EXACT)
    want_outputs, want_tables, module = sc.single_process("sgd", 2, weight_per_shard=True)
    assert len(module.shard_lookups) == len(sc.TABLES)
    _, shared_tables, _ = sc.single_process("sgd", 2)
    assert_tables_equal(tables, want_tables)
    assert_tables_equal(tables, shared_tables)
    assert all(torch.equal(a, b) for a, b in zip(outputs, want_outputs, strict=True))


def test_state_dicts_name_the_shards_and_reshard(two_ranks: list[dict[str, Any]]) -> None:
    """Each rank's state_dict() holds its shards, named by table and rows (row-wise "big" split
    in two, table-wise "small" on rank 1 only); the union of both ranks' dicts loads on one
    process (2 -> 1) through load_state_dict, to the tables of the shard-dict route; a dict that
    misses rows is refused."""
    dicts = [r["state_dict"] for r in two_ranks]
    assert "shards.big.0-26.weight" in dicts[0] and "shards.big.26-53.optimizer_state" in dicts[1]
    assert "shards.small.0-7.weight" in dicts[1] and not any(".small." in k for k in dicts[0])
    assert not any(k.startswith("lookups.") for d in dicts for k in d)
    back = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), sc.LOCAL_BATCH, sc.optimizer_for("adagrad"))
    assert not back.load_state_dict({**dicts[0], **dicts[1]}).missing_keys
    assert_tables_equal(merge_shard_state_dicts([sc.snapshot(back)]), gathered(two_ranks, "resharded")[1])
    with pytest.raises(RuntimeError, match=r"'big': the checkpoint covers 27 of rows \[0, 53\)"):
        back.load_state_dict(dicts[1])


def test_two_ranks_hold_their_shards(two_ranks: list[dict[str, Any]]) -> None:
    """Row-wise tables are split in row blocks over both ranks; table-wise ones live on one."""
    pieces = {r: {(p["table"], p["row_start"], p["row_end"]) for p in ranks["sgd-mixed"]["state"]["shards"]}
              for r, ranks in enumerate(two_ranks)}
    assert ("big", 0, 26) in pieces[0] and ("big", 26, 53) in pieces[1]
    assert ("small", 0, 7) in pieces[1] and not any(p[0] == "small" for p in pieces[0])


def test_resharded_one_to_two_ranks_continues_the_run(two_ranks: list[dict[str, Any]]) -> None:
    """A checkpoint saved on one rank, loaded on two (row-wise and table-wise shards), trained on:
    the same tables as one process training all the way; and the two ranks' checkpoint loaded back
    on one process (2 -> 1) gives those tables."""
    outputs, tables = gathered(two_ranks, "resharded")
    _, _, first_half = sc.single_process("adagrad", 2)
    want_outputs, want_tables, _ = sc.single_process("adagrad", 2, first=sc.STEPS,
                                                  start=[sc.snapshot(first_half)])
    assert_tables_equal(tables, want_tables)
    for got, want in zip(outputs, want_outputs, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    back = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), sc.LOCAL_BATCH, sc.optimizer_for("adagrad"))
    back.load_shard_state_dicts([r["resharded"]["state"] for r in two_ranks])
    assert_tables_equal(merge_shard_state_dicts([sc.snapshot(back)]), want_tables)


@pytest.mark.slow
def test_four_ranks_equal_one_process_and_reshard_from_two(two_ranks: list[dict[str, Any]],
                                                           tmp_path: Path) -> None:
    """Four gloo ranks: every scenario (forward, fused SGD / row-wise Adagrad updates, table-wise,
    row-wise and mixed plans) equals one process; the resharding run starts from the two ranks'
    checkpoint (2 -> 4), and the four ranks' state_dict()s load back on one process (4 -> 1)."""
    torch.save({"checkpoints": [r["resharded"]["state"] for r in two_ranks], "steps_done": 2 * sc.STEPS},
               tmp_path / "start.pt")
    four = launch_forked(4, tmp_path)
    for opt in OPTIMIZERS:
        for kind in KINDS:
            outputs, tables = gathered(four, f"{opt}-{kind}")
            want_outputs, want_tables, _ = sc.single_process(opt, 4)
            assert_tables_equal(tables, want_tables)
            for got, want in zip(outputs, want_outputs, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    _, tables = gathered(four, "resharded")
    _, _, first = sc.single_process("adagrad", 2)
    _, _, second = sc.single_process("adagrad", 2, first=sc.STEPS, start=[sc.snapshot(first)])
    _, want_tables, _ = sc.single_process("adagrad", 4, first=2 * sc.STEPS, start=[sc.snapshot(second)])
    assert_tables_equal(tables, want_tables)
    # the four ranks' state_dict()s: row-wise "big" in four blocks; their union loads on one process (4 -> 1)
    dicts = [r["state_dict"] for r in four]
    assert [any(k.startswith("shards.big.") for k in d) for d in dicts] == [True] * 4
    back = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), sc.LOCAL_BATCH, sc.optimizer_for("adagrad"))
    assert not back.load_state_dict({k: v for d in dicts for k, v in d.items()}).missing_keys
    assert_tables_equal(merge_shard_state_dicts([sc.snapshot(back)]), want_tables)
    # the default layout equals one process grouped as the four ranks (on the CPU: any grouping)
    for opt in OPTIMIZERS:
        _, tables = gathered(four, f"{opt}-table")
        assert_tables_equal(tables, sc.single_process(opt, 4, group_as=sc.plan_for(4, "table"))[1])
