"""Weak scaling of the sharded embeddings (issue 36): DLRM-DCNv2 shapes, fixed per-GPU batch.

    torchrun --nproc_per_node=N -m benchmarks sharded_scaling [--dcnv2-scale 0.25 | --dcnv2-full] [--batch 8192]
    python3 -m benchmarks sharded_scaling --summarize DIR     # the table of DIR/sharded_scaling_n*.json

Each rank trains examples/dlrm/dlrm_sharded.py's model (DCNv2 dense part under DDP, the 26
tables sharded by the planner, fused row-wise Adagrad). Two measurements: steps/s over
``--steps`` plain steps (no synchronisation inside a step), and ``--split-steps`` steps timed
phase by phase (each phase ends with a device synchronisation, so their sum exceeds a plain
step): input (slot layout + the ids' all-to-all), lookup (every local shard for the global
batch), output all-to-all (pooled rows back to their samples' ranks, row-wise partials summed),
dense (forward, backward, DDP all-reduce, optimizer), backward + update (the gradient's reverse
all-to-all and the fused updates), plus a bare all-to-all of the output's size (how much of
backward + update is the exchange). Then the same steps with ``SparseForwardPipeline`` (batch
i+1's sparse forward on a side stream during batch i's dense tail and optimizer step): its
steps/s, gain and peak memory beside the plain loop's. Rank 0 prints the figures and writes
``$OUT/sharded_scaling_n<N>.json`` (or ``--out DIR``). The scaled tables (``--dcnv2-scale``,
default 0.25: 26 GB) fit one H100, so N = 1, 2, 4 run the same model; weak-scaling
efficiency = per-GPU samples/s at N over that at N = 1 (``--summarize``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("input", "lookup", "output_all_to_all", "dense", "backward_update", "bare_all_to_all")


def summarize(folder: Path) -> str:
    runs = sorted((json.loads(p.read_text()) for p in folder.glob("sharded_scaling_n*.json")),
                  key=lambda r: int(r["world_size"]))
    if not runs:
        return f"no sharded_scaling_n*.json in {folder}"
    base = next((r for r in runs if r["world_size"] == 1), None)
    lines = ["| N | tables | local batch | steps/s | pipelined steps/s | samples/s per GPU | weak-scaling eff. | "
             + " | ".join(f"{p} ms" for p in PHASES) + " | peak GiB/GPU |",
             "|---|---|---|---|---|---|---|" + "---|" * len(PHASES) + "---|"]
    for r in runs:
        eff = (f"{r['samples_per_s_per_gpu'] / base['samples_per_s_per_gpu']:.0%}"
               if base and base["tables"] == r["tables"] else "n/a")
        lines.append(f"| {r['world_size']} | {r['tables']} | {r['local_batch']} | {r['steps_per_s']:.2f} | "
                     f"{r['pipelined_steps_per_s']:.2f} ({r['pipeline_gain']:+.1%}) | "
                     f"{r['samples_per_s_per_gpu']:.0f} | {eff} | "
                     + " | ".join(f"{r['phases_ms'][p]:.2f}" for p in PHASES)
                     + f" | {max(r['peak_memory_gib_per_rank']):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Weak scaling of the sharded embeddings (run under torchrun)")
    parser.add_argument("--dcnv2-full", action="store_true")
    parser.add_argument("--dcnv2-scale", type=float, default=0.25)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8192, help="per-GPU batch")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--split-steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--reserve-gib", type=float, default=12.0)
    parser.add_argument("--weight-per-shard", action="store_true",
                        help="each shard in a weight of its own (the bit-equality layout; docs/sharding.md): its cost "
                             "against the default one weight per dim (use another --out folder)")
    parser.add_argument("--out", type=Path, help="folder for the JSON (default $OUT)")
    parser.add_argument("--summarize", type=Path, help="print the table of a folder's results and exit")
    args = parser.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from reference_kernels import optim
    from reference_kernels.distributed import (
        ShardedTableBatchedEmbeddingBag,
        SparseForwardPipeline,
        dcnv2,
        free_memory_per_rank,
        plan_sharding,
    )

    sys.path.insert(0, str(ROOT / "examples" / "dlrm"))
    from dlrm_sharded import DENSE_FEATURES, ClickLog, CrossAndTop, mlp, setup

    rank, world, device = setup()
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    tables = dcnv2.tables(args.dim, 1.0 if args.dcnv2_full else args.dcnv2_scale)
    budget = ([f - int(args.reserve_gib * 2**30) for f in free_memory_per_rank(device)] if cuda
              else [8 * 2**30] * world)
    plan = plan_sharding(tables, budget)
    embeddings = ShardedTableBatchedEmbeddingBag(plan, args.batch, optim.RowWiseAdagrad(lr=0.01), device=device,
                                                 weight_per_shard=args.weight_per_shard)
    torch.manual_seed(0)
    bottom = mlp([DENSE_FEATURES, 512, 256, args.dim], last_plain=False).to(device)
    over = CrossAndTop(args.dim * (len(tables) + 1), 512, 3, [1024, 1024, 512, 256]).to(device)
    ddp_bottom, ddp_over = DistributedDataParallel(bottom), DistributedDataParallel(over)
    dense_opt = torch.optim.SGD([*bottom.parameters(), *over.parameters()], lr=0.01)
    lossf = nn.BCEWithLogitsLoss()
    block = 256 if args.batch % 256 == 0 else args.batch
    log = ClickLog(tables, block, 0, device)
    blocks = args.batch // block
    batches = [log.batch(s, rank * blocks, blocks) for s in range(4)]  # cycled: data is not measured

    def step(i: int) -> None:
        b = batches[i % len(batches)]
        emb = embeddings(b.indices, b.offsets)
        logits = ddp_over(torch.cat([ddp_bottom(b.dense), emb], 1))
        dense_opt.zero_grad(set_to_none=True)
        lossf(logits, b.labels).backward()
        dense_opt.step()

    times: dict[str, list[float]] = {p: [] for p in PHASES}

    def phase(name: str, fn: Callable[[], Any]) -> Any:
        sync()
        t = time.perf_counter()
        result = fn()
        sync()
        times[name].append((time.perf_counter() - t) * 1e3)
        return result

    def split_step(i: int) -> None:
        b = batches[i % len(batches)]
        ids = phase("input", lambda: embeddings.shard_ids(embeddings.exchange_inputs(
            embeddings.to_slots(b.indices, b.offsets))))
        local = phase("lookup", lambda: embeddings.local_lookups(ids))
        emb = phase("output_all_to_all", lambda: embeddings.exchange_outputs(local))
        leaf = emb.detach().requires_grad_()

        def dense() -> None:
            logits = ddp_over(torch.cat([ddp_bottom(b.dense), leaf], 1))
            dense_opt.zero_grad(set_to_none=True)
            lossf(logits, b.labels).backward()
            dense_opt.step()

        phase("dense", dense)
        phase("backward_update", lambda: emb.backward(leaf.grad))
        flat = local.detach().reshape(-1)
        recv = flat.new_empty(sum(embeddings.output_recv_splits))
        phase("bare_all_to_all", lambda: dist.all_to_all_single(recv, flat, embeddings.output_recv_splits,
                                                                embeddings.output_send_splits,
                                                                group=embeddings.group) if world > 1 else None)

    def pipelined(count: int) -> None:
        pipe = SparseForwardPipeline(embeddings)
        pipe.prefetch(batches[0].indices, batches[0].offsets, inputs_ready=True)
        for i in range(count):
            b = batches[i % len(batches)]
            logits = ddp_over(torch.cat([ddp_bottom(b.dense), pipe.take()], 1))
            dense_opt.zero_grad(set_to_none=True)
            lossf(logits, b.labels).backward()
            if i + 1 < count:
                nxt = batches[(i + 1) % len(batches)]
                pipe.prefetch(nxt.indices, nxt.offsets, inputs_ready=True)
            dense_opt.step()

    def timed_run(run: Callable[[int], None]) -> tuple[float, int]:
        """(seconds for args.steps steps, peak memory) after a warm-up."""
        run(args.warmup)
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        dist.barrier()
        start = time.perf_counter()
        run(args.steps)
        sync()
        return time.perf_counter() - start, torch.cuda.max_memory_allocated(device) if cuda else 0

    elapsed, peak_plain = timed_run(lambda count: [step(i) for i in range(count)] and None)
    elapsed_pipe, peak_pipe = timed_run(pipelined)
    for i in range(args.split_steps):
        split_step(i)
    peak = torch.tensor([max(peak_plain, peak_pipe)], device=device)
    peaks = [torch.zeros_like(peak) for _ in range(world)]
    dist.all_gather(peaks, peak)
    layout = " (weight per shard)" if args.weight_per_shard else ""
    result = {"world_size": world,
              "tables": ("dcnv2-full" if args.dcnv2_full else f"dcnv2 x{args.dcnv2_scale}") + layout,
              "rows": sum(t.num_embeddings for t in tables), "dim": args.dim, "local_batch": args.batch,
              "steps_per_s": args.steps / elapsed, "samples_per_s_per_gpu": args.steps * args.batch / elapsed,
              "pipelined_steps_per_s": args.steps / elapsed_pipe,
              "pipeline_gain": elapsed / elapsed_pipe - 1.0,
              "peak_memory_gib_rank0": {"plain": peak_plain / 2**30, "pipelined": peak_pipe / 2**30},
              "phases_ms": {p: sorted(v)[len(v) // 2] if v else 0.0 for p, v in times.items()},
              "output_all_to_all_bytes_per_rank": 4 * sum(embeddings.output_send_splits),
              "peak_memory_gib_per_rank": [int(p) / 2**30 for p in peaks],
              "device": torch.cuda.get_device_name(device) if cuda else "cpu", "plan": plan.describe()}
    if rank == 0:
        print(plan.describe())
        print(json.dumps({k: v for k, v in result.items() if k != "plan"}, indent=1))
        folder = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
        if folder:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"sharded_scaling_n{world}.json").write_text(json.dumps(result, indent=1))
            print(summarize(folder))
    dist.barrier()  # before the teardown: examples/dlrm/dlrm_sharded.py's main says why
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
