"""Each rank's local lookups: its shards of one embedding dim in one weight, looked up for the
whole global batch, with the fused optimizer updating the looked-up rows in the backward.

Two implementations behind one interface (``forward(ids) -> [B_global, shards * dim]``):

* ``KernelShards`` (CUDA): one ``reference_kernels.tbe.TableBatchedEmbeddingBag`` whose tables
  are the shards, with the fused optimizer (SGD, row-wise Adagrad); the padded ids become its
  CSR input on the device (no host synchronisation).
* ``TorchShards`` (CPU, and wherever the kernels cannot run): the same sum pooling and the same
  update written in torch (``reference_kernels.optim.reference_update``); each row's gradient
  is summed in lookup order, so it is reproducible bit for bit.

``ids`` holds one ``[B_global, max_bag_size]`` tensor per shard: row numbers inside the shard,
-1 where a slot holds no lookup of this shard (an empty slot, or a row another rank owns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import CheckMode
from ..optim import RowWiseAdagrad, reference_update

ShardOptimizer = Any  # optim.SGD | optim.RowWiseAdagrad (checked by the sharded module)


class _TorchLookupUpdate(torch.autograd.Function):
    """Sum pooling in torch; the backward sums each row's gradient and applies the update."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, rows: Tensor, bags: Tensor, num_bags: int, owner: TorchShards) -> Tensor:
        ctx.owner = owner
        ctx.save_for_backward(rows, bags)
        return weight.new_zeros(num_bags, weight.shape[1]).index_add_(0, bags, weight.detach()[rows])

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[None, ...]:
        rows, bags = ctx.saved_tensors
        owner: TorchShards = ctx.owner
        distinct, inverse = torch.unique(rows, return_inverse=True)
        sums = grad_out.new_zeros(distinct.numel(), grad_out.shape[1]).index_add_(0, inverse, grad_out[bags])
        with torch.no_grad():
            reference_update(owner.optimizer, owner.weight.data, owner.state, owner.state, distinct, sums, 1)
        return None, None, None, None, None


def _shard_starts(shard_rows: Sequence[int]) -> list[int]:
    starts = [0]
    for rows in shard_rows[:-1]:
        starts.append(starts[-1] + rows)
    return starts


class TorchShards(nn.Module):
    """The shards' rows in one ``weight`` parameter and the optimizer state beside it (``state``:
    one float32 value per row for row-wise Adagrad, empty for SGD); torch math (module docstring)."""

    def __init__(self, shard_rows: Sequence[int], dim: int, optimizer: ShardOptimizer, dtype: torch.dtype,
                 device: Any) -> None:
        super().__init__()
        self.optimizer = optimizer
        self.starts = _shard_starts(shard_rows)
        self.weight = nn.Parameter(torch.zeros(sum(shard_rows), dim, dtype=dtype, device=device))
        rows = sum(shard_rows) if isinstance(optimizer, RowWiseAdagrad) else 0
        fill = optimizer.initial_accumulator_value if isinstance(optimizer, RowWiseAdagrad) else 0.0
        self.register_buffer("state", torch.full((rows,), fill, dtype=torch.float32, device=device))
        self.state: Tensor

    def forward(self, ids: Sequence[Tensor]) -> Tensor:
        batch = ids[0].shape[0]
        count = len(ids)
        rows, bags = [], []
        for j, shard_ids in enumerate(ids):
            valid = shard_ids >= 0  # CPU: boolean selection costs no device synchronisation
            sample = torch.arange(batch, device=shard_ids.device).unsqueeze(1).expand_as(shard_ids)
            rows.append(shard_ids[valid] + self.starts[j])
            bags.append(sample[valid] * count + j)  # output row b * shards + j of [B, shards * dim]
        pooled: Tensor = _TorchLookupUpdate.apply(  # type: ignore[no-untyped-call]
            self.weight, torch.cat(rows), torch.cat(bags), batch * count, self)
        return pooled.view(batch, count * self.weight.shape[1])

    def optimizer_state(self) -> Tensor:
        return self.state


def padded_to_csr(ids: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """The table-batched CSR input (indices, offsets with T * B + 1 entries, table-major) of the
    padded per-shard ids, on the device without reading anything to the host: the valid slots are
    scattered to their place; the buffer keeps its padded size, and the positions after the last
    offset (zeros) belong to no bag, which the lookup and its backward skip."""
    valid = [shard_ids >= 0 for shard_ids in ids]
    lengths = torch.cat([v.sum(1) for v in valid])
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    capacity = sum(shard_ids.numel() for shard_ids in ids)
    dest, values = [], []
    batch = ids[0].shape[0]
    for j, (shard_ids, v) in enumerate(zip(ids, valid, strict=True)):
        within = v.cumsum(1) - 1
        at = offsets[j * batch:(j + 1) * batch].unsqueeze(1) + within
        dest.append(torch.where(v, at, capacity).reshape(-1))  # invalid slots go to a spare last cell
        values.append(shard_ids.reshape(-1))
    buffer = ids[0].new_zeros(capacity + 1).scatter_(0, torch.cat(dest), torch.cat(values).clamp(min=0))
    return buffer[:capacity], offsets


class KernelShards(nn.Module):
    """The shards as the tables of one ``TableBatchedEmbeddingBag`` with the fused optimizer
    (CUDA kernels)."""

    def __init__(self, shard_rows: Sequence[int], dim: int, optimizer: ShardOptimizer, dtype: torch.dtype,
                 device: Any) -> None:
        super().__init__()
        from ..tbe import TableBatchedEmbeddingBag

        # shard ids are in range by construction; the separate check would synchronise each step
        self.tbe = TableBatchedEmbeddingBag(list(shard_rows), dim, mode="sum", dtype=dtype, device=device,
                                            optimizer=optimizer, check_indices=CheckMode.IGNORE)
        self.tbe.optimizer_seed = 0
        self.tbe.fused_state(self.tbe.weight)  # the state exists from the start (checkpoints)

    @property
    def weight(self) -> Tensor:
        return self.tbe.weight

    def forward(self, ids: Sequence[Tensor]) -> Tensor:
        indices, offsets = padded_to_csr(ids)
        pooled: Tensor = self.tbe(indices, offsets)
        return pooled

    def optimizer_state(self) -> Tensor:
        state = self.tbe.fused_state(self.tbe.weight)
        assert state is not None
        return state.state1
