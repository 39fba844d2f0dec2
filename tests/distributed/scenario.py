"""The shared scenario of the sharded-tables tests: tables, plans, global batches and the
training steps; run the same way by the test process (one rank) and by the workers (N ranks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from reference_kernels import optim
from reference_kernels.distributed import ROW_WISE, ShardingPlan, TableSpec

LOCAL_BATCH = 6
STEPS = 3
# mixed dims and bag sizes; "big" and "wide" go row-wise in the mixed plans
TABLES = (TableSpec("small", 7, 4, 1.0, 2), TableSpec("big", 53, 4, 2.0, 3), TableSpec("mid", 19, 8, 1.0, 2),
          TableSpec("wide", 31, 8, 1.5, 3), TableSpec("one", 1, 4, 1.0, 1))


def plan_for(world: int, kind: str) -> ShardingPlan:
    """"table": every table table-wise (spread round-robin); "row": every splittable table
    row-wise; "mixed": big and wide row-wise, the rest table-wise."""
    kinds: list[Any] = []
    for t, spec in enumerate(TABLES):
        splittable = spec.num_embeddings >= world
        if kind == "row" and splittable or kind == "mixed" and spec.name in ("big", "wide") and world > 1:
            kinds.append(ROW_WISE)
        else:
            kinds.append((t + 1) % world)
    return ShardingPlan.from_kinds(TABLES, kinds, world)


def optimizer_for(name: str) -> optim.SGD | optim.RowWiseAdagrad:
    if name == "sgd":
        return optim.SGD(lr=0.5, weight_decay=0.01)
    return optim.RowWiseAdagrad(lr=0.3, eps=1e-3, weight_decay=0.01, initial_accumulator_value=0.1)


@dataclass(frozen=True)
class Batch:
    indices: Tensor
    offsets: Tensor


def global_batches(world: int, steps: int = STEPS, seed: int = 0, first: int = 0) -> list[Batch]:
    """``steps`` global batches of world * LOCAL_BATCH samples (TBE layout, table-major), bag
    lengths 0 .. max_bag_size, Zipf-ish ids so rows repeat within and across ranks."""
    out = []
    for step in range(first, first + steps):
        g = torch.Generator().manual_seed(seed * 1000 + step)
        b = world * LOCAL_BATCH
        lengths = torch.stack([torch.randint(0, t.max_bag_size + 1, (b,), generator=g) for t in TABLES])
        ids = []
        for t, spec in enumerate(TABLES):
            n = int(lengths[t].sum())
            u = torch.rand(n, generator=g)
            ids.append((u * u * spec.num_embeddings).long().clamp(max=spec.num_embeddings - 1))
        flat = lengths.reshape(-1)
        out.append(Batch(torch.cat(ids), torch.cat([flat.new_zeros(1), flat.cumsum(0)])))
    return out


def local_batch(batch: Batch, world: int, ranks: range) -> Batch:
    """The samples of ranks ``ranks`` (the global batch's LOCAL_BATCH blocks of every table):
    one rank's share, or all of them for the single-process reference."""
    tables, b = len(TABLES), world * LOCAL_BATCH
    ids, lengths = [], []
    for t in range(tables):
        first, last = t * b + ranks.start * LOCAL_BATCH, t * b + ranks.stop * LOCAL_BATCH
        start, end = int(batch.offsets[first]), int(batch.offsets[last])
        ids.append(batch.indices[start:end])
        lengths.append(batch.offsets[first + 1:last + 1] - batch.offsets[first:last])
    flat = torch.cat(lengths)
    return Batch(torch.cat(ids), torch.cat([flat.new_zeros(1), flat.cumsum(0)]))


def output_grads(world: int, steps: int = STEPS, seed: int = 0, first: int = 0) -> list[Tensor]:
    """The upstream gradient of each step's [global batch, sum(dims)] output (a fixed linear loss,
    so every run sees the same gradients whatever its forward rounding)."""
    width = sum(t.embedding_dim for t in TABLES)
    return [torch.randn(world * LOCAL_BATCH, width, generator=torch.Generator().manual_seed(seed * 1000 + 500 + s))
            for s in range(first, first + steps)]


def initial_tables(seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed + 77)
    return {t.name: torch.randn(t.num_embeddings, t.embedding_dim, generator=g) for t in TABLES}


def train(module: Any, world: int, ranks: range, steps: int = STEPS, first: int = 0, device: Any = "cpu",
          seed: int = 0) -> list[Tensor]:
    """``steps`` steps of the fixed linear loss on the samples of ``ranks``; returns each
    forward's output (on the CPU)."""
    outputs = []
    grads = output_grads(world, steps, seed, first)
    for batch, grad in zip(global_batches(world, steps, seed, first), grads, strict=True):
        mine = local_batch(batch, world, ranks)
        out = module(mine.indices.to(device), mine.offsets.to(device))
        out.backward(grad[ranks.start * LOCAL_BATCH:ranks.stop * LOCAL_BATCH].to(device))
        outputs.append(out.detach().cpu())
    return outputs


def snapshot(module: Any) -> dict[str, Any]:
    """The module's shard dict with tensors copied to the CPU (a checkpoint as torch.save keeps it)."""
    state = module.shard_state_dict()
    state["shards"] = [{k: v.detach().cpu().clone() if isinstance(v, Tensor) else v for k, v in piece.items()}
                       for piece in state["shards"]]
    return state


def single_process(opt: str, world: int, steps: int = STEPS, first: int = 0, start: list[dict[str, Any]] | None = None,
                   device: Any = "cpu", weight_per_shard: bool = False, group_as: ShardingPlan | None = None
                   ) -> tuple[list[Tensor], dict[str, dict[str, Tensor]], Any]:
    """One rank holding every table, on the global batches of ``world`` ranks: (outputs, merged
    tables, the module); ``group_as``: its weights grouped as that plan's ranks group theirs."""
    from reference_kernels.distributed import ShardedTableBatchedEmbeddingBag, merge_shard_state_dicts

    module = ShardedTableBatchedEmbeddingBag(plan_for(1, "table"), world * LOCAL_BATCH, optimizer_for(opt),
                                             device=device, weight_per_shard=weight_per_shard, group_as=group_as)
    if start is None:
        module.load_tables(initial_tables())
    else:
        module.load_shard_state_dicts(start)
    outputs = train(module, world, range(world), steps=steps, first=first, device=device)
    return outputs, merge_shard_state_dicts([snapshot(module)]), module


def start_checkpoint(out: Any, world: int, device: Any = "cpu") -> None:
    """The resharding runs' start: a one-rank run's checkpoint after STEPS steps (1 -> world)."""
    _, _, module = single_process("adagrad", world, device=device)
    torch.save({"checkpoints": [snapshot(module)], "steps_done": STEPS}, out / "start.pt")
