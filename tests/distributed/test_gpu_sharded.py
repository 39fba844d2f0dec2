"""Sharded tables on two GPUs with NCCL (the lookups and fused updates run our kernels) against
one GPU holding every table, on the same global batches. Skips cleanly with fewer than two GPUs.

    python3 -m pytest -q -m cuda tests/distributed/test_gpu_sharded.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cuda_available

torch = pytest.importorskip("torch")

from reference_kernels.distributed import ShardedTableBatchedEmbeddingBag, merge_shard_state_dicts  # noqa: E402
from tests.distributed import scenario as sc  # noqa: E402
from tests.distributed.launch import launch  # noqa: E402
from tests.distributed.worker import EXACT, KINDS, OPTIMIZERS  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cuda_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")]

# weights after STEPS fused steps against one GPU with one weight per dim: float32 sums of the
# same terms in another order (row-wise partials added per rank; a row's gradient split into other
# chunks by the kernels' sort, whose chunks of sorted positions span every table of a shared
# weight). Table-wise plans against one GPU grouped as the ranks (group_as): bit for bit.
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out: Path = tmp_path_factory.mktemp("nccl2")
    sc.start_checkpoint(out, 2, device="cuda:0")
    return launch(2, out, device="cuda", timeout=300.0)


def gathered(ranks: list[dict[str, Any]], name: str) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    outputs = [torch.cat(step) for step in zip(*(r[name]["outputs"] for r in ranks), strict=True)]
    return outputs, merge_shard_state_dicts([r[name]["state"] for r in ranks])


@pytest.mark.parametrize("opt", OPTIMIZERS)
@pytest.mark.parametrize("kind", KINDS)
def test_two_gpus_equal_one_gpu(two_gpus: list[dict[str, Any]], opt: str, kind: str) -> None:
    outputs, tables = gathered(two_gpus, f"{opt}-{kind}")
    want_outputs, want_tables, _ = sc.single_process(opt, 2, device="cuda:0")
    for name, want in want_tables.items():
        for part in ("weight", "optimizer_state"):
            torch.testing.assert_close(tables[name][part], want[part], rtol=RTOL, atol=ATOL, msg=f"{name} {part}")
    for got, want in zip(outputs, want_outputs, strict=True):
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def test_table_wise_sgd_is_bit_equal_to_one_gpu(two_gpus: list[dict[str, Any]]) -> None:
    """Table-wise SGD with a weight per shard: each table is looked up and updated by one GPU on
    the whole global batch, alone in its weight as on the one GPU, so its backward sorts and
    chunks the same positions: the forward and the updated weights are the same bits. (With
    weights shared per dim the chunks depend on the other tables' lookups: test above, within
    RTOL / ATOL; docs/sharding.md, "Bit equality".)"""
    outputs, tables = gathered(two_gpus, EXACT)
    want_outputs, want_tables, _ = sc.single_process("sgd", 2, device="cuda:0", weight_per_shard=True)
    assert tables.keys() == want_tables.keys()
    for name, want in want_tables.items():
        assert torch.equal(tables[name]["weight"], want["weight"]), name
    assert all(torch.equal(a, b) for a, b in zip(outputs, want_outputs, strict=True))
    assert not torch.equal(tables["big"]["weight"], sc.initial_tables()["big"])


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_table_wise_default_layout_is_bit_equal_to_one_gpu_grouped_as_the_ranks(two_gpus: list[dict[str, Any]],
                                                                                  opt: str) -> None:
    """Table-wise, default layout (one weight per dim on each rank): one GPU whose weights group
    the tables as the two ranks do (``group_as``) sorts and chunks the same lookup positions per
    weight, so the forward, the updated weights and the Adagrad state are the same bits. (Grouped
    one weight per dim on the one GPU instead, a row's chunks may be cut elsewhere: within RTOL.)"""
    outputs, tables = gathered(two_gpus, f"{opt}-table")
    want_outputs, want_tables, module = sc.single_process(opt, 2, device="cuda:0", group_as=sc.plan_for(2, "table"))
    assert len(module.shard_lookups) == 4  # (rank, dim) pairs of the plan
    assert tables.keys() == want_tables.keys()
    for name, want in want_tables.items():
        assert torch.equal(tables[name]["weight"], want["weight"]), name
        assert torch.equal(tables[name]["optimizer_state"], want["optimizer_state"]), name
    assert all(torch.equal(a, b) for a, b in zip(outputs, want_outputs, strict=True))


def test_resharded_one_gpu_checkpoint_continues_on_two(two_gpus: list[dict[str, Any]]) -> None:
    _, tables = gathered(two_gpus, "resharded")
    _, _, first = sc.single_process("adagrad", 2, device="cuda:0")
    _, want_tables, _ = sc.single_process("adagrad", 2, first=sc.STEPS, start=[sc.snapshot(first)], device="cuda:0")
    for name, want in want_tables.items():
        torch.testing.assert_close(tables[name]["weight"], want["weight"], rtol=RTOL, atol=ATOL)
        torch.testing.assert_close(tables[name]["optimizer_state"], want["optimizer_state"], rtol=RTOL, atol=ATOL)
    # the GPU ranks' state_dict()s (kernel-backed shards) load on one CPU process: the same tables
    back = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), sc.LOCAL_BATCH, sc.optimizer_for("adagrad"))
    back.load_state_dict({k: v for r in two_gpus for k, v in r["state_dict"].items()})
    for name, got in merge_shard_state_dicts([sc.snapshot(back)]).items():
        assert torch.equal(got["weight"], tables[name]["weight"]), name
        assert torch.equal(got["optimizer_state"], tables[name]["optimizer_state"]), name


def test_a_step_reads_nothing_to_the_host(two_gpus: list[dict[str, Any]]) -> None:
    """A training step (input exchange, lookups, output exchange, backward with the fused
    update) under torch.cuda.set_sync_debug_mode("error") makes no synchronising call."""
    assert [r["host_sync"] for r in two_gpus] == ["none", "none"]


@pytest.mark.skipif(not cuda_available() or torch.cuda.device_count() < 4, reason="needs four GPUs")
def test_four_gpus_equal_one_gpu(tmp_path: Path) -> None:
    """Four NCCL ranks, every scenario: within RTOL / ATOL of one GPU, and table-wise SGD with a
    weight per shard bit-equal to it; the resharding run starts from one GPU's checkpoint (1 -> 4)."""
    sc.start_checkpoint(tmp_path, 4, device="cuda:0")
    four = launch(4, tmp_path, device="cuda", timeout=300.0)
    for opt in OPTIMIZERS:
        for kind in KINDS:
            outputs, tables = gathered(four, f"{opt}-{kind}")
            want_outputs, want_tables, _ = sc.single_process(opt, 4, device="cuda:0")
            for name, want in want_tables.items():
                for part in ("weight", "optimizer_state"):
                    torch.testing.assert_close(tables[name][part], want[part], rtol=RTOL, atol=ATOL,
                                               msg=f"{opt} {kind} {name} {part}")
            for got, want in zip(outputs, want_outputs, strict=True):
                torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)
    outputs, tables = gathered(four, EXACT)
    want_outputs, want_tables, _ = sc.single_process("sgd", 4, device="cuda:0", weight_per_shard=True)
    for name, want in want_tables.items():
        assert torch.equal(tables[name]["weight"], want["weight"]), name
    assert all(torch.equal(a, b) for a, b in zip(outputs, want_outputs, strict=True))
    for opt in OPTIMIZERS:  # the default layout against one GPU grouped as the four ranks
        outputs, tables = gathered(four, f"{opt}-table")
        want_outputs, want_tables, _ = sc.single_process(opt, 4, device="cuda:0", group_as=sc.plan_for(4, "table"))
        for name, want in want_tables.items():
            assert torch.equal(tables[name]["weight"], want["weight"]), f"{opt} {name}"
            assert torch.equal(tables[name]["optimizer_state"], want["optimizer_state"]), f"{opt} {name}"
        assert all(torch.equal(a, b) for a, b in zip(outputs, want_outputs, strict=True))
    _, tables = gathered(four, "resharded")
    _, _, first = sc.single_process("adagrad", 4, device="cuda:0")
    _, want_tables, _ = sc.single_process("adagrad", 4, first=sc.STEPS, start=[sc.snapshot(first)], device="cuda:0")
    for name, want in want_tables.items():
        torch.testing.assert_close(tables[name]["weight"], want["weight"], rtol=RTOL, atol=ATOL)
    assert [r["host_sync"] for r in four] == ["none"] * 4
