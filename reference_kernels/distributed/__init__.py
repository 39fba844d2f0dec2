"""Sharded embedding tables over ``torch.distributed`` (docs/sharding.md).

* ``TableSpec``, ``ShardingPlan``, ``plan_sharding``, ``PlanError``: the planner (no torch needed)
* ``ShardedTableBatchedEmbeddingBag``: the sharded module (table-wise and row-wise shards,
  all-to-all exchanges, fused SGD / row-wise Adagrad)
* ``SparseForwardPipeline``: the next batch's sparse forward overlapping the dense optimizer step
* ``merge_shard_state_dicts``, ``free_memory_per_rank``
"""

from __future__ import annotations

from typing import Any

from . import dcnv2
from .planner import (
    ROW_WISE,
    TABLE_WISE,
    Placement,
    PlanError,
    Shard,
    ShardingPlan,
    TableSpec,
    plan_sharding,
    row_blocks,
)

__all__ = ["dcnv2", "ROW_WISE", "TABLE_WISE", "Placement", "PlanError", "Shard", "ShardedTableBatchedEmbeddingBag",
           "ShardingPlan", "SparseForwardPipeline", "TableSpec", "free_memory_per_rank", "merge_shard_state_dicts",
           "plan_sharding", "row_blocks"]


def __getattr__(name: str) -> Any:
    if name == "SparseForwardPipeline":
        from . import pipeline

        return pipeline.SparseForwardPipeline
    if name in ("ShardedTableBatchedEmbeddingBag", "merge_shard_state_dicts", "free_memory_per_rank"):
        from . import sharded  # imports torch

        return getattr(sharded, name)
    raise AttributeError(f"module 'reference_kernels.distributed' has no attribute {name!r}")
