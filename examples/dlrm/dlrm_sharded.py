"""DLRM with sharded embeddings on N GPUs: data-parallel dense layers (DDP), the 26 tables
sharded by ``reference_kernels.distributed`` (table-wise / row-wise per the planner), fused
row-wise Adagrad (or SGD) in the embedding backward, trained on a synthetic click log.

    torchrun --nproc_per_node=2 examples/dlrm/dlrm_sharded.py                 # small tables
    torchrun --nproc_per_node=2 examples/dlrm/dlrm_sharded.py --dcnv2-full    # MLPerf DCNv2 sizes
    torchrun --nproc_per_node=1 examples/dlrm/dlrm_sharded.py --dcnv2-scale 0.02 --batch 4096 --as-ranks 2 --json r.json
    torchrun --nproc_per_node=2 examples/dlrm/dlrm_sharded.py --dcnv2-scale 0.02 --batch 4096 --check r.json  # exact
    bash benchmarks/experiments/sharded_loss_curves.sh    # N = 1 and its noise runs, N = 2 (4): both checks

``--dcnv2-full``: the 26 tables of MLPerf DLRM-DCNv2 (40M-row cap, 204M rows, dim 128, float32:
104.5 GB of weights; reference_kernels/distributed/dcnv2.py), multi-hot bags of the benchmark's
sizes, DCNv2's dense part (bottom MLP 512-256-128, three low-rank (512) cross layers, top MLP
1024-1024-512-256-1). It cannot run on one 80 GB GPU; on two H100s the planner puts the five
40M-row tables row-wise (about 50 GiB per GPU). Without a GPU it runs on the CPU with gloo (small
sizes only).

Batches: the global batch of step s is made of blocks of ``--block`` samples, block k drawn from a
generator seeded by (seed, s, k); a rank with local batch B takes blocks rank*B/block ..: N ranks
at local batch B see the same global batches as one rank at N*B, so the loss curves compare.
Labels carry a planted signal (a hidden score per (table, id) from a hash, and a dense direction).
Each rank's output gradient is scaled by 1/N so the embedding gradients are those of the global
mean loss, as DDP's averaging makes the dense ones.

Loss curves of different N (docs/sharding.md, "Loss curves"):

* ``--as-ranks N`` (one process): the arithmetic of N ranks, float for float: the global batch as
  N micro-batches of ``--batch``, each micro-batch's dense gradients combined as DDP combines them
  (each times 1/N, summed in rank order), the tables grouped into weights as the N ranks group
  theirs (``group_as``) and updated once from the whole global batch's output gradient. N ranks
  must give the same floats (``--check REF`` with no ``--noise``: exact); with more than two ranks
  DDP's all-reduce adds in an order of NCCL's / gloo's choosing, so pass ``--ordered-allreduce``
  (a DDP comm hook: all-gather, then the rank-order sum) to compare those exactly too.
* ``--reverse-blocks`` (one process): each global batch's samples in reverse order; the same
  model and data, another float order. Such runs measure the noise envelope that the tolerance of
  ``--check REF --noise A B ..`` is made of (``loss_curves.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loss_curves  # noqa: E402  (beside this file)
from dlrm import mlp  # noqa: E402  (examples/dlrm/dlrm.py, beside this file)

from reference_kernels import optim  # noqa: E402
from reference_kernels.distributed import (  # noqa: E402
    ShardedTableBatchedEmbeddingBag,
    ShardingPlan,
    SparseForwardPipeline,
    TableSpec,
    dcnv2,
    free_memory_per_rank,
    plan_sharding,
)

DENSE_FEATURES = 13


@dataclass(frozen=True)
class Batch:
    dense: Tensor
    indices: Tensor
    offsets: Tensor
    labels: Tensor


def small_tables(dim: int) -> list[TableSpec]:
    return [TableSpec(f"t{t:02d}", int(10 ** (3 + 3 * (t % 7) / 6)), dim, 1.5, 3) for t in range(26)]


class ClickLog:
    """Synthetic click log (module docstring); fixed-size bags when every table's pooling factor
    equals its max bag size (DCNv2), else 0 .. max_bag_size lookups per bag."""

    def __init__(self, tables: list[TableSpec], block: int, seed: int, device: torch.device) -> None:
        self.tables, self.block, self.seed, self.device = tables, block, seed, device
        g = torch.Generator().manual_seed(seed + 1)
        self.direction = (torch.randn(DENSE_FEATURES, generator=g) / math.sqrt(DENSE_FEATURES)).to(device)

    def score(self, t: int, ids: Tensor) -> Tensor:
        """A hidden score per (table, id): a hash, so 40M-row tables need no score table."""
        h = (ids * 2654435761 + t * 40503) % 1000003
        return torch.sin(h.to(torch.float32) * 0.0137) * 1.2

    def block_of(self, step: int, k: int) -> tuple[Tensor, list[Tensor], Tensor, Tensor]:
        g = torch.Generator(device=self.device).manual_seed((self.seed * 1_000_003 + step) * 4099 + k)
        b = self.block
        dense = torch.randn(b, DENSE_FEATURES, generator=g, device=self.device)
        logit = dense @ self.direction - 0.3
        ids, lengths = [], []
        for t, spec in enumerate(self.tables):
            fixed = spec.pooling_factor == spec.max_bag_size
            cap = spec.max_bag_size
            n = torch.full((b,), cap, device=self.device) if fixed else torch.randint(
                0, cap + 1, (b,), generator=g, device=self.device)
            slots = torch.randint(0, spec.num_embeddings, (b, cap), generator=g, device=self.device)
            keep = torch.arange(cap, device=self.device) < n.unsqueeze(1)
            logit = logit + (self.score(t, slots) * keep).sum(1) / math.sqrt(cap)
            ids.append(slots.reshape(-1) if fixed else slots[keep])  # variable bags: one host read
            lengths.append(n)
        labels = torch.bernoulli(torch.sigmoid(logit), generator=g)
        return dense, ids, torch.stack(lengths), labels

    def batch(self, step: int, first_block: int, blocks: int, reverse: bool = False) -> Batch:
        """Blocks first_block .. +blocks of step ``step`` in the table-batched layout (``reverse``:
        the blocks in reverse order)."""
        order = range(first_block, first_block + blocks)
        parts = [self.block_of(step, k) for k in (reversed(order) if reverse else order)]
        ids = [torch.cat([p[1][t] for p in parts]) for t in range(len(self.tables))]
        lengths = torch.cat([p[2] for p in parts], 1).reshape(-1)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        return Batch(torch.cat([p[0] for p in parts]), torch.cat(ids), offsets, torch.cat([p[3] for p in parts]))


class CrossAndTop(nn.Module):
    """DCNv2's low-rank cross network (x_{l+1} = x0 * U(V x_l) + b + x_l) and the top MLP."""

    def __init__(self, width: int, rank: int, layers: int, top: list[int]) -> None:
        super().__init__()
        self.down = nn.ModuleList(nn.Linear(width, rank, bias=False) for _ in range(layers))
        self.up = nn.ModuleList(nn.Linear(rank, width) for _ in range(layers))
        self.top = mlp([width, *top, 1], last_plain=True)

    def forward(self, x0: Tensor) -> Tensor:
        x = x0
        for down, up in zip(self.down, self.up, strict=True):
            x = x0 * up(down(x)) + x
        return self.top(x).squeeze(1)  # type: ignore[no-any-return]


def setup() -> tuple[int, int, torch.device]:
    if "RANK" not in os.environ:  # plain `python3 dlrm_sharded.py`: one rank
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29571")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), device


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dcnv2-full", action="store_true", help="MLPerf DCNv2's 26 tables at full size (2+ H100s)")
    parser.add_argument("--dcnv2-scale", type=float, help="DCNv2's tables with rows scaled by this factor")
    parser.add_argument("--dim", type=int, help="embedding dim (default 128 for DCNv2, 16 for the small tables)")
    parser.add_argument("--batch", type=int, help="local batch per rank (default 8192 DCNv2, 1024 small)")
    parser.add_argument("--block", type=int, default=256, help="samples per generated data block")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    parser.add_argument("--optimizer", choices=["adagrad", "sgd"], default="adagrad",
                        help="the embeddings' fused optimizer (row-wise Adagrad or SGD)")
    parser.add_argument("--dense-optimizer", choices=["adagrad", "sgd"], default="sgd",
                        help="the dense layers' (Adagrad turns rounding-level gradients into full steps, so runs on "
                             "different N drift apart)")
    parser.add_argument("--lr", type=float, default=0.1, help="dense learning rate")
    parser.add_argument("--embedding-lr", type=float, default=0.05)
    parser.add_argument("--clip", type=float, default=1.0,
                        help="clip the dense gradients' global norm to this (0: off); without it, SGD at the "
                             "default lr diverged on the GPU at --dcnv2-scale 0.01 --batch 4096 after 10 steps "
                             "(N=1 and N=2 alike)")
    parser.add_argument("--reserve-gib", type=float, default=12.0, help="GPU memory kept for the dense part")
    parser.add_argument("--budget-gib", type=float,
                        help="plan with this many GiB per rank (default: free GPU memory less --reserve-gib; 8 on "
                             "the CPU): runs to be compared get the same plan whatever each GPU has free")
    parser.add_argument("--row-wise-fraction", type=float, default=0.2,
                        help="the planner shards a table row-wise above this fraction of a rank's budget")
    parser.add_argument("--pipeline", action="store_true",
                        help="overlap batch i+1's sparse forward with batch i's dense backward tail and optimizer "
                             "(reference_kernels.distributed.pipeline); same results as the plain loop")
    parser.add_argument("--as-ranks", type=int, metavar="N",
                        help="one process doing the arithmetic of N ranks at local batch --batch (module docstring)")
    parser.add_argument("--reverse-blocks", action="store_true",
                        help="one process: each global batch's samples in reverse order (a noise run)")
    parser.add_argument("--ordered-allreduce", action="store_true",
                        help="DDP's gradients summed in rank order (all-gather + sum) instead of NCCL's / gloo's "
                             "all-reduce, so that N > 2 ranks equal --as-ranks N exactly")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="rank 0 writes losses, steps/s and memory here")
    parser.add_argument("--check", type=Path,
                        help="a reference run's JSON: exit 1 unless the curves are the same floats, or with --noise "
                             "within the noise envelope's tolerance (loss_curves.py)")
    parser.add_argument("--noise", type=Path, nargs="+", default=[], help="noise runs' JSONs for --check")
    return parser.parse_args(argv)


def plan_for(args: argparse.Namespace, tables: list[TableSpec], ranks: int, device: torch.device) -> ShardingPlan:
    """The plan of ``ranks`` ranks (``ranks`` > the process group's size under --as-ranks: the
    one GPU's budget for each)."""
    if args.budget_gib is not None:
        budget = [int(args.budget_gib * 2**30)] * ranks
    elif device.type == "cuda":
        budget = [f - int(args.reserve_gib * 2**30) for f in free_memory_per_rank(device)]
        budget = budget if len(budget) == ranks else [min(budget)] * ranks
    else:
        budget = [8 * 2**30] * ranks  # the CPU runs are small
    state_bytes = 4 if args.optimizer == "adagrad" else 0
    return plan_sharding(tables, budget, state_bytes_per_row=state_bytes, row_wise_fraction=args.row_wise_fraction)


def ordered_allreduce(state: Any, bucket: Any) -> Any:
    """A DDP comm hook: every rank's gradient bucket gathered, then each times 1/N summed in rank
    order (DDP's own hook multiplies by 1/N and all-reduces, in an order the library picks)."""
    buffer = bucket.buffer()
    world = dist.get_world_size()
    parts = [torch.empty_like(buffer) for _ in range(world)]
    work = dist.all_gather(parts, buffer, async_op=True)
    assert work is not None
    return work.get_future().then(lambda _: rank_order_mean(parts))


# DDP checks a hook's annotations as objects (these are strings under `from __future__ import annotations`)
ordered_allreduce.__annotations__.update(bucket=dist.GradBucket, state=Any,
                                         **{"return": torch.futures.Future[torch.Tensor]})


def rank_order_mean(parts: list[Tensor]) -> Tensor:
    """sum_k parts[k] * (1/N), k in order: DDP's mean of N ranks' gradients with a fixed order."""
    scale = 1.0 / len(parts)
    total = parts[0] * scale
    for part in parts[1:]:
        total += part * scale
    return total


def global_mean_loss(loss: Tensor, world: int) -> Tensor:
    """The ranks' mean losses added in rank order, / N (an all-reduce's order is the library's)."""
    if world == 1:
        return loss.detach().clone()
    parts = [torch.empty_like(loss) for _ in range(world)]
    dist.all_gather(parts, loss.detach())
    return rank_order_sum(parts) / world


def rank_order_sum(parts: list[Tensor]) -> Tensor:
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    return total


def as_ranks_step(b: Batch, ranks: int, batch: int, embeddings: nn.Module, bottom: nn.Module, over: nn.Module,
                  dense_params: list[nn.Parameter], lossf: nn.Module) -> Tensor:
    """One step of ``ranks`` ranks' arithmetic in this process (module docstring): the global mean
    loss; leaves the dense gradients as DDP leaves them and the tables updated."""
    emb = embeddings(b.indices, b.offsets)
    pieces = [piece.detach().requires_grad_() for piece in emb.split(batch)]
    grads: list[list[Tensor]] = []
    micro_losses = []
    for piece, dense, labels in zip(pieces, b.dense.split(batch), b.labels.split(batch), strict=True):
        for p in dense_params:
            p.grad = None
        loss = lossf(over(torch.cat([bottom(dense), piece], 1)), labels)
        loss.backward()
        grads.append([p.grad if p.grad is not None else torch.zeros_like(p) for p in dense_params])
        micro_losses.append(loss.detach())
    emb.backward(torch.cat([piece.grad for piece in pieces if piece.grad is not None]) / ranks)  # each rank's 1/N
    for i, p in enumerate(dense_params):
        p.grad = rank_order_mean([g[i] for g in grads])
    return rank_order_sum(micro_losses) / ranks


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rank, world, device = setup()
    ranks = args.as_ranks or world  # the ranks whose arithmetic this run does
    if (args.as_ranks or args.reverse_blocks) and (world != 1 or args.pipeline):
        raise SystemExit("--as-ranks and --reverse-blocks run in one process (torchrun --nproc_per_node=1), "
                         "without --pipeline")
    dcn = args.dcnv2_full or args.dcnv2_scale is not None
    dim = args.dim or (128 if dcn else 16)
    tables = dcnv2.tables(dim, 1.0 if args.dcnv2_full else args.dcnv2_scale) if dcn else small_tables(dim)
    batch = args.batch or (8192 if dcn else 1024)
    if batch % args.block:
        raise SystemExit(f"--batch ({batch}) must be a multiple of --block ({args.block})")
    plan = plan_for(args, tables, ranks, device)
    if rank == 0:
        print(plan.describe(), flush=True)
    spec: optim.SGD | optim.RowWiseAdagrad = (optim.RowWiseAdagrad(lr=args.embedding_lr) if args.optimizer == "adagrad"
                                               else optim.SGD(lr=args.embedding_lr))
    if args.as_ranks:  # every table here, in the weights the N ranks would hold
        whole = ShardingPlan.from_kinds(tables, [0] * len(tables), 1, plan.weight_bytes, plan.state_bytes_per_row)
        embeddings = ShardedTableBatchedEmbeddingBag(whole, ranks * batch, spec, device=device, seed=args.seed,
                                                     group_as=plan)
    else:
        embeddings = ShardedTableBatchedEmbeddingBag(plan, batch, spec, device=device, seed=args.seed)
    torch.manual_seed(args.seed)  # the same dense initialisation on every rank and for every N
    bottom = mlp([DENSE_FEATURES, 512, 256, dim] if dcn else [DENSE_FEATURES, 64, dim], last_plain=False).to(device)
    width = dim * (len(tables) + 1)
    over = CrossAndTop(width, 512 if dcn else 64, 3, [1024, 1024, 512, 256] if dcn else [128, 64]).to(device)
    ddp_bottom, ddp_over = DistributedDataParallel(bottom), DistributedDataParallel(over)
    if args.ordered_allreduce:
        ddp_bottom.register_comm_hook(None, ordered_allreduce)
        ddp_over.register_comm_hook(None, ordered_allreduce)
    dense_params = [*bottom.parameters(), *over.parameters()]
    dense_opt = (torch.optim.Adagrad(dense_params, lr=args.lr) if args.dense_optimizer == "adagrad"
                 else torch.optim.SGD(dense_params, lr=args.lr))
    log = ClickLog(tables, args.block, args.seed, device)
    blocks = batch // args.block
    lossf = nn.BCEWithLogitsLoss()
    losses: list[Tensor] = []
    data = [log.batch(s, rank * blocks, blocks * ranks // world, args.reverse_blocks)
            for s in range(args.steps)]  # before the timing
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    dist.barrier()
    start = time.perf_counter()
    pipe = SparseForwardPipeline(embeddings) if args.pipeline else None
    if pipe is not None:
        pipe.prefetch(data[0].indices, data[0].offsets, inputs_ready=True)
    for step, b in enumerate(data):
        if step == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        if args.as_ranks:
            global_loss = as_ranks_step(b, ranks, batch, embeddings, bottom, over, dense_params, lossf)
        else:
            emb = pipe.take() if pipe is not None else embeddings(b.indices, b.offsets)
            if world > 1:
                emb.register_hook(lambda g: g / world)  # the global mean loss's gradient (exact: N = 2^k)
            x = ddp_bottom(b.dense)
            logits = ddp_over(torch.cat([x, emb], 1))
            loss = lossf(logits, b.labels)
            dense_opt.zero_grad(set_to_none=True)
            loss.backward()  # the fused embedding update of this batch happens here
            if pipe is not None and step + 1 < len(data):
                pipe.prefetch(data[step + 1].indices, data[step + 1].offsets, inputs_ready=True)
            global_loss = global_mean_loss(loss, world)
        if args.clip > 0:  # DDP made the dense gradients equal on every rank: the same clip everywhere, on device
            torch.nn.utils.clip_grad_norm_(dense_params, args.clip)
        dense_opt.step()
        losses.append(global_loss)
    if device.type == "cuda":
        torch.cuda.synchronize()
    timed = max(1, args.steps - args.warmup)
    elapsed = time.perf_counter() - start
    curve = [float(x) for x in torch.stack(losses).cpu().tolist()]
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    peaks = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(peaks, torch.tensor([peak], dtype=torch.int64, device=device))
    result: dict[str, Any] = {
        "world_size": world, "as_ranks": args.as_ranks, "reverse_blocks": args.reverse_blocks,
        "ordered_allreduce": args.ordered_allreduce, "local_batch": batch, "global_batch": ranks * batch,
        "tables": "dcnv2" if dcn else "small",
        "rows": sum(t.num_embeddings for t in tables), "dim": dim, "steps": args.steps,
        "steps_per_s": timed / elapsed, "samples_per_s_per_gpu": timed * batch * ranks // world / elapsed,
        "peak_memory_gib_per_rank": [int(p) / 2**30 for p in peaks], "losses": curve,
        "dropped_lookups": int(embeddings.dropped_lookups), "pipeline": args.pipeline,
        "dense_sha256": hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in dense_params)).hexdigest(),
        "device": str(torch.cuda.get_device_name(device))
        if device.type == "cuda" else "cpu", "plan": plan.describe()}
    status = 0
    if rank == 0:
        print(f"N={world}{f' (as {ranks} ranks)' if args.as_ranks else ''} local batch {batch}: "
              f"{result['steps_per_s']:.2f} steps/s, "
              f"{result['samples_per_s_per_gpu']:.0f} samples/s per rank, peak memory per rank "
              f"{', '.join(f'{p:.1f}' for p in result['peak_memory_gib_per_rank'])} GiB; "
              f"loss {curve[0]:.4f} -> {curve[-1]:.4f}", flush=True)
        if args.check:
            status = check(curve, args.check, args.noise, result)
        out = args.json or (Path(os.environ["OUT"]) / f"dlrm_sharded_n{world}.json" if os.environ.get("OUT") else None)
        if out:
            out.write_text(json.dumps(result, indent=1))
    # A barrier first: its wait lets go of the GIL, so gloo's worker threads can drop the last
    # all_gather's Python-owned tensors (they take the GIL to do it). Without it a rank that got
    # here within the interpreter's 5 ms switch interval could free the DDP reducers, and with
    # them the process group, holding the GIL while the group's destructor joined a worker that
    # waited for the GIL: a hang at exit, about one run in ten of tests/distributed's CPU runs.
    dist.barrier()
    dist.destroy_process_group()
    return status


def check(curve: list[float], reference_path: Path, noise: list[Path], result: dict[str, Any]) -> int:
    """--check: 0 when ``curve`` agrees with the reference (exactly, or within the noise
    envelope's tolerance), else 1; prints the verdict."""
    reference = loss_curves.losses(reference_path)
    diff = max(abs(a - b) for a, b in zip(curve, reference, strict=False))
    result["max_loss_diff"] = diff
    if not noise:
        line, same = loss_curves.exact(reference, curve)
        print(f"exact check against {reference_path.name}: {line}", flush=True)
        return 0 if same else 1
    lines, ok = loss_curves.report(reference, [loss_curves.losses(p) for p in noise], {"this run": curve})
    print("\n".join(lines), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
