"""One rank of the sharded-tables tests: ``python -m tests.distributed.worker OUT DEVICE`` with
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (as torchrun sets them). Runs every scenario
(optimizer x plan kind) and the resharding runs, and saves what it saw to OUT/rank<r>.pt for the
test process to compare with its single-process runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from reference_kernels.distributed import ShardedTableBatchedEmbeddingBag
from tests.distributed import scenario as sc

OPTIMIZERS = ("sgd", "adagrad")
KINDS = ("table", "row", "mixed")
EXACT = "sgd-table-weight-per-shard"
CONTINUED = "continued.pt"  # the resharding run's checkpoint: what a larger world starts from


def host_sync_in_step(module: ShardedTableBatchedEmbeddingBag, world: int, mine: range,
                      device: torch.device) -> str:
    """One more training step with CUDA's sync debug mode on "error": "none", or the first
    synchronising call's error ("not measured" off CUDA)."""
    if device.type != "cuda":
        return "not measured"
    batch = sc.local_batch(sc.global_batches(world, 1, first=100)[0], world, mine)
    indices, offsets = batch.indices.to(device), batch.offsets.to(device)
    grad = sc.output_grads(world, 1, first=100)[0][mine.start * sc.LOCAL_BATCH:mine.stop * sc.LOCAL_BATCH].to(device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        module(indices, offsets).backward(grad)
        return "none"
    except RuntimeError as error:
        return str(error).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")


def run(out: Path, device_name: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    group = dist.new_group(list(range(world)))  # one embedding group for every module (each would make one)
    mine = range(rank, rank + 1)
    results: dict[str, Any] = {}
    for opt in OPTIMIZERS:
        for kind in KINDS:
            module = ShardedTableBatchedEmbeddingBag(sc.plan_for(world, kind), sc.LOCAL_BATCH, sc.optimizer_for(opt),
                                                     device=device, group=group)
            module.load_tables(sc.initial_tables())
            outputs = sc.train(module, world, mine, device=device)
            results[f"{opt}-{kind}"] = {"outputs": outputs, "state": sc.snapshot(module)}
    # table-wise SGD with a weight per shard: each table summed as when it is alone (bit equality)
    module = ShardedTableBatchedEmbeddingBag(sc.plan_for(world, "table"), sc.LOCAL_BATCH, sc.optimizer_for("sgd"),
                                             device=device, group=group, weight_per_shard=True)
    module.load_tables(sc.initial_tables())
    outputs = sc.train(module, world, mine, device=device)
    results[EXACT] = {"outputs": outputs, "state": sc.snapshot(module)}
    # resharding: start from a checkpoint saved on another number of ranks (START), train on
    start = torch.load(out / "start.pt", weights_only=False)
    module = ShardedTableBatchedEmbeddingBag(sc.plan_for(world, "mixed"), sc.LOCAL_BATCH,
                                             sc.optimizer_for("adagrad"), device=device, group=group)
    module.load_shard_state_dicts(start["checkpoints"])
    outputs = sc.train(module, world, mine, first=start["steps_done"], device=device)
    results["resharded"] = {"outputs": outputs, "state": sc.snapshot(module)}
    results["state_dict"] = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    results["dropped"] = int(module.dropped_lookups)
    results["host_sync"] = host_sync_in_step(module, world, mine, device)
    torch.save(results, out / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    run(Path(sys.argv[1]), sys.argv[2])
