"""A small DLRM trained twice on a synthetic click log: once with the reference kernels'
table-batched embedding and a fused optimizer, once with torch.nn.EmbeddingBag and torch's
optimizer, from the same initial weights and the same batches.

    python3 examples/dlrm/dlrm.py --png dlrm_loss.png            # GPU, full size
    python3 examples/dlrm/dlrm.py --small --steps 200             # the size the tests run

Model: bottom MLP (13 dense features -> dim), 26 embedding tables (sum-pooled multi-hot
bags, 0-3 lookups each, so some bags are empty), dot interaction (the pairwise dot products
of the 27 vectors, upper triangle, beside the bottom output), top MLP -> one logit.

Click log: Zipf-skewed ids per table; a hidden score per (table, id) and a hidden direction
over the dense features plant the signal: P(click) = sigmoid(sum of the looked-up scores +
dense . direction - bias). A model that learns the embeddings beats AUC 0.5 by a wide margin.

Both runs use SGD for the embeddings (``embedding_lr``) (ours: ``optim.SGD`` fused into the backward; torch:
``sparse=True`` gradients and ``torch.optim.SGD``) and SGD for the dense layers. The two
runs compute the same float32 math in a different order (deterministic sort + segment sums
against torch's), so their losses differ by rounding only: the test and the command's exit
status require |loss_ours - loss_torch| <= LOSS_TOLERANCE (1e-3) at every step. The learning
rates are chosen where training is not chaotic: a 1e-7 relative change of the initial
embeddings moved the 200-step loss curve by at most 1.3e-5 (CPU, torch path twice); at
dense lr 1.0 the small model amplified it to 6e-3, beyond any rounding-level tolerance.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from reference_kernels import optim  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

DENSE_FEATURES = 13
TABLES = 26
LOSS_TOLERANCE = 1e-3  # per step, absolute, on the batch's mean log loss


@dataclass(frozen=True)
class Config:
    rows: tuple[int, ...]
    dim: int = 16
    batch: int = 2048
    steps: int = 200
    lr: float = 0.3  # dense layers
    embedding_lr: float = 32.0  # embedding rows (a row gets 1/batch of the mean loss's gradient per lookup)
    zipf: float = 1.05
    seed: int = 0
    eval_batches: int = 8
    warmup_steps: int = 20  # trained and compared, but not timed: they compile the kernels (NVRTC, plans)

    @staticmethod
    def full() -> Config:
        rows = tuple(int(10 ** (3 + 3 * (t % 7) / 6)) for t in range(TABLES))  # 1e3 .. 1e6 rows
        return Config(rows, dim=64, batch=8192)

    @staticmethod
    def small() -> Config:
        return Config(tuple(200 + 97 * t for t in range(TABLES)), dim=16, batch=2048)


class ClickLog:
    """Synthetic click log with a planted signal (see the module docstring)."""

    def __init__(self, cfg: Config, device: str) -> None:
        self.cfg, self.device = cfg, device
        g = torch.Generator(device="cpu").manual_seed(cfg.seed + 1)
        self.scores = [torch.randn(r, generator=g).to(device) * 0.8 for r in cfg.rows]
        self.direction = (torch.randn(DENSE_FEATURES, generator=g) / math.sqrt(DENSE_FEATURES)).to(device)
        # Zipf sampling through each table's cdf; ranks scattered over the table
        self.cdfs = []
        for r in cfg.rows:
            p = torch.arange(1, r + 1, dtype=torch.float64).pow(-cfg.zipf)
            self.cdfs.append((p.cumsum(0) / p.sum()).to(device))
        self.perm = [torch.randperm(r, generator=g).to(device) for r in cfg.rows]

    def batch(self, gen: torch.Generator) -> Batch:
        """One batch: dense features, the sparse features in both layouts, labels."""
        b = self.cfg.batch
        dense = torch.randn(b, DENSE_FEATURES, generator=gen, device=self.device)
        lengths = torch.randint(0, 4, (TABLES, b), generator=gen, device=self.device)
        logit = dense @ self.direction - 0.5
        per_table, split = [], []
        for t in range(TABLES):
            n = int(lengths[t].sum())
            u = torch.rand(n, generator=gen, device=self.device, dtype=torch.float64)
            ids = self.perm[t][torch.searchsorted(self.cdfs[t], u).clamp(max=self.cfg.rows[t] - 1)]
            per_table.append(ids)
            split.append((ids, torch.cat([lengths.new_zeros(1), lengths[t].cumsum(0)])))
            bag = torch.repeat_interleave(torch.arange(b, device=self.device), lengths[t])
            logit = logit.index_add(0, bag, self.scores[t][ids])
        labels = torch.bernoulli(torch.sigmoid(logit), generator=gen)
        flat = lengths.reshape(-1)
        offsets = torch.cat([flat.new_zeros(1), flat.cumsum(0)])
        return Batch(dense, torch.cat(per_table), offsets, split, labels)


@dataclass(frozen=True)
class Batch:
    """dense [B, 13]; indices and offsets [26 * B + 1] in the table-batched (table-major)
    layout; the same per table (indices, B + 1 offsets) for torch's 26 modules; labels [B]."""

    dense: Tensor
    indices: Tensor
    offsets: Tensor
    per_table: list[tuple[Tensor, Tensor]]
    labels: Tensor


def mlp(sizes: list[int], last_plain: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if not (last_plain and i == len(sizes) - 2):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP, embeddings (``embed(batch) -> [B, 26 * dim]``), dot interaction, top MLP."""

    def __init__(self, cfg: Config, embed: nn.Module) -> None:
        super().__init__()
        self.cfg, self.embed = cfg, embed
        self.bottom = mlp([DENSE_FEATURES, 64, cfg.dim], last_plain=False)
        vectors = TABLES + 1
        self.top = mlp([cfg.dim + vectors * (vectors - 1) // 2, 128, 64, 1], last_plain=True)
        self.register_buffer("pairs", torch.triu_indices(vectors, vectors, 1), persistent=False)
        self.pairs: Tensor

    def forward(self, batch: Batch) -> Tensor:
        x = self.bottom(batch.dense)
        e = self.embed(batch).view(x.shape[0], TABLES, self.cfg.dim)
        z = torch.cat([x.unsqueeze(1), e], 1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


class OurTables(nn.Module):
    """The 26 tables as one TableBatchedEmbeddingBag with SGD fused into its backward."""

    def __init__(self, cfg: Config, device: str, init: Tensor) -> None:
        super().__init__()
        # the ids are valid by construction; the separate range check would synchronise with
        # the host every step (torch's kernel checks inside, without one)
        self.tbe = TableBatchedEmbeddingBag(list(cfg.rows), cfg.dim, mode="sum", device=device,
                                            optimizer=optim.SGD(lr=cfg.embedding_lr), check_indices=False)
        with torch.no_grad():
            self.tbe.weight.copy_(init)

    def forward(self, batch: Batch) -> Tensor:
        return self.tbe(batch.indices, batch.offsets)  # type: ignore[no-any-return]


class TorchTables(nn.Module):
    """26 torch.nn.EmbeddingBag (sparse gradients) taking the table-major TBE layout."""

    def __init__(self, cfg: Config, device: str, init: Tensor) -> None:
        super().__init__()
        starts = [0]
        for r in cfg.rows:
            starts.append(starts[-1] + r)
        self.bags = nn.ModuleList(
            nn.EmbeddingBag.from_pretrained(init[a:b].clone(), freeze=False, mode="sum", sparse=True,
                                            include_last_offset=True).to(device)
            for a, b in zip(starts[:-1], starts[1:], strict=False))

    def forward(self, batch: Batch) -> Tensor:
        return torch.cat([bag(idx, off) for bag, (idx, off) in zip(self.bags, batch.per_table, strict=False)], 1)


def auc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney U, ties as average ranks)."""
    values, inverse, counts = torch.unique(scores.double(), return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    ranks = (ends - (counts.double() - 1) / 2)[inverse]  # 1-based average ranks
    pos = labels.bool()
    p, n = int(pos.sum()), int((~pos).sum())
    if p == 0 or n == 0:
        return float("nan")
    return float((ranks[pos].sum() - p * (p + 1) / 2) / (p * n))


@dataclass
class Run:
    losses: list[float]
    steps_per_s: float
    """Over the timed steps only (the first ``warmup_steps`` excluded)."""
    auc: float
    warmup_steps: int = 0
    """Steps trained before the clock started (the first calls compile kernels and plans)."""
    timed_steps: int = 0


def train_step(model: DLRM, batch: Batch, lossf: nn.Module, dense_opt: torch.optim.Optimizer,
               sparse_opt: torch.optim.Optimizer | None) -> Tensor:
    """One training step on ``batch`` (the embeddings' own update, if any, inside backward);
    returns the loss, detached."""
    loss = lossf(model(batch), batch.labels)
    dense_opt.zero_grad(set_to_none=True)
    if sparse_opt is not None:
        sparse_opt.zero_grad(set_to_none=True)
    loss.backward()
    dense_opt.step()
    if sparse_opt is not None:
        sparse_opt.step()
    return loss.detach()


def train(model: DLRM, log: ClickLog, cfg: Config, sparse_opt: torch.optim.Optimizer | None,
          device: str) -> Run:
    dense_opt = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("embed")], lr=cfg.lr)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    batches = [log.batch(gen) for _ in range(cfg.steps)]  # generated up front: timed steps only train
    lossf = nn.BCEWithLogitsLoss()
    losses = []
    warmup = warmup_steps(cfg)
    t0 = time.perf_counter()
    for step, batch in enumerate(batches):
        if step == warmup:  # the clock starts after the warm-up steps (compilation is not throughput)
            _synchronize(device)
            t0 = time.perf_counter()
        losses.append(train_step(model, batch, lossf, dense_opt, sparse_opt))
    _synchronize(device)
    elapsed = time.perf_counter() - t0
    eval_gen = torch.Generator(device=device).manual_seed(cfg.seed + 12345)
    scores, labels_all = [], []
    with torch.no_grad():
        for _ in range(cfg.eval_batches):
            batch = log.batch(eval_gen)
            scores.append(model(batch))
            labels_all.append(batch.labels)
    return Run([float(x) for x in torch.stack(losses).tolist()], (cfg.steps - warmup) / elapsed,
               auc(torch.cat(scores), torch.cat(labels_all)), warmup, cfg.steps - warmup)


def warmup_steps(cfg: Config) -> int:
    """Untimed steps: ``cfg.warmup_steps``, leaving at least one timed step."""
    return max(0, min(cfg.warmup_steps, cfg.steps - 1))


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_both(cfg: Config, device: str = "cuda") -> dict[str, Any]:
    log = ClickLog(cfg, device)
    g = torch.Generator(device="cpu").manual_seed(cfg.seed + 2)
    init = (torch.randn(sum(cfg.rows), cfg.dim, generator=g) * 0.1).to(device)
    ours_tables, tables = OurTables(cfg, device, init), TorchTables(cfg, device, init)
    torch.manual_seed(cfg.seed)  # the same dense-layer initialisation for both
    ours = DLRM(cfg, ours_tables).to(device)
    torch.manual_seed(cfg.seed)
    theirs = DLRM(cfg, tables).to(device)
    for a, b in zip([*ours.bottom.parameters(), *ours.top.parameters()],
                    [*theirs.bottom.parameters(), *theirs.top.parameters()], strict=False):
        assert torch.equal(a, b), "the dense layers must start equal"
    run_ours = train(ours, log, cfg, None, device)
    run_torch = train(theirs, log, cfg, torch.optim.SGD(tables.parameters(), lr=cfg.embedding_lr), device)
    diff = max(abs(a - b) for a, b in zip(run_ours.losses, run_torch.losses, strict=False))
    return {"config": asdict(cfg), "ours": asdict(run_ours), "torch": asdict(run_torch), "max_loss_diff": diff,
            "loss_tolerance": LOSS_TOLERANCE}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 1])
    ours, theirs = result["ours"], result["torch"]
    top.plot(ours["losses"], label=f"reference_kernels TBE + fused SGD ({ours['steps_per_s']:.0f} steps/s, "
             f"AUC {ours['auc']:.3f})")
    top.plot(theirs["losses"], "--", label=f"torch.nn.EmbeddingBag + torch.optim.SGD ({theirs['steps_per_s']:.0f} "
             f"steps/s, AUC {theirs['auc']:.3f})")
    top.set_ylabel("training log loss")
    top.legend()
    top.set_title("DLRM on a synthetic click log (same seed, same batches)")
    bottom.plot([a - b for a, b in zip(ours["losses"], theirs["losses"], strict=False)])
    bottom.set_ylabel("ours - torch")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train a small DLRM with both embedding paths")
    parser.add_argument("--small", action="store_true", help="the test-sized model and batches")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=Config.warmup_steps,
                        help="steps trained before timing starts (they compile the kernels); default %(default)s")
    parser.add_argument("--png", type=Path, help="write the loss curves here (needs matplotlib)")
    parser.add_argument("--json", type=Path, help="write losses, steps/s and AUC here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("the reference kernels need a CUDA GPU", file=sys.stderr)
        return 2
    base = Config.small() if args.small else Config.full()
    cfg = dataclasses.replace(base, steps=args.steps, seed=args.seed, warmup_steps=args.warmup)
    result = run_both(cfg)
    warm = warmup_steps(cfg)
    print(f"steps/s over steps {warm + 1}-{cfg.steps}: the first {warm} steps (kernel compilation, plans) "
          "are trained and compared but not timed")
    for name in ("ours", "torch"):
        r = result[name]
        print(f"{name:6s} steps/s {r['steps_per_s']:8.1f}  final loss {r['losses'][-1]:.4f}  "
              f"held-out AUC {r['auc']:.4f}")
    print(f"max |loss ours - loss torch| over {cfg.steps} steps: {result['max_loss_diff']:.2e} "
          f"(tolerance {LOSS_TOLERANCE:g})")
    if args.json:
        args.json.write_text(json.dumps(result))
    if args.png:
        plot(result, args.png)
    return 0 if result["max_loss_diff"] <= LOSS_TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
