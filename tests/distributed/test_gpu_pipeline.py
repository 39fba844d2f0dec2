"""The overlapping loop (SparseForwardPipeline: the next batch's sparse forward on a side
stream) against the plain loop on one GPU: the same tables and dense weights, bit for bit.

    python3 -m pytest -q -m cuda tests/distributed/test_gpu_pipeline.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reference_kernels.distributed import (  # noqa: E402
    ShardedTableBatchedEmbeddingBag,
    SparseForwardPipeline,
    merge_shard_state_dicts,  # noqa: E402
)
from tests.distributed import scenario as sc  # noqa: E402

pytestmark = pytest.mark.cuda


def run(pipelined: bool) -> tuple[dict[str, dict[str, torch.Tensor]], list[torch.Tensor]]:
    torch.manual_seed(0)
    module = ShardedTableBatchedEmbeddingBag(sc.plan_for(1, "table"), 2 * sc.LOCAL_BATCH, sc.optimizer_for("adagrad"),
                                             device="cuda")
    module.load_tables(sc.initial_tables())
    dense = torch.nn.Sequential(torch.nn.Linear(28, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).cuda()
    opt = torch.optim.SGD(dense.parameters(), lr=0.1)
    batches = [sc.local_batch(b, 2, range(2)) for b in sc.global_batches(2, 6)]
    batches = [sc.Batch(b.indices.cuda(), b.offsets.cuda()) for b in batches]
    torch.cuda.synchronize()
    pipe = SparseForwardPipeline(module)
    if pipelined:
        pipe.prefetch(batches[0].indices, batches[0].offsets, inputs_ready=True)
    for i, b in enumerate(batches):
        emb = pipe.take() if pipelined else module(b.indices, b.offsets)
        opt.zero_grad(set_to_none=True)
        dense(emb).square().mean().backward()
        if pipelined and i + 1 < len(batches):
            pipe.prefetch(batches[i + 1].indices, batches[i + 1].offsets, inputs_ready=True)
        opt.step()
    torch.cuda.synchronize()
    return merge_shard_state_dicts([sc.snapshot(module)]), [p.detach().cpu() for p in dense.parameters()]


def test_pipelined_loop_equals_plain_loop() -> None:
    tables, params = run(False)
    tables_p, params_p = run(True)
    for name, want in tables.items():
        assert torch.equal(tables_p[name]["weight"], want["weight"]), name
        assert torch.equal(tables_p[name]["optimizer_state"], want["optimizer_state"]), name
    assert all(torch.equal(a, b) for a, b in zip(params, params_p, strict=True))
