"""The training suite's whole-model case: one step of ``examples/dlrm``'s DLRM (its full
configuration: 26 tables of 1e3 to 1e6 rows, dim 64, B8192, Zipf 1.05 click log, bags of 0-3
lookups) with each library's embeddings, everything else equal: the bottom and top MLPs, the dot
interaction, BCE loss, SGD on the dense layers and SGD on the rows (the example's rates).

- ours: ``TableBatchedEmbeddingBag(optimizer=SGD)`` (the example's ``OurTables``), the update
  fused into the backward;
- FBGEMM: ``SplitTableBatchedEmbeddingBagsCodegen`` with EXACT_SGD, built by
  ``fbgemm_training.tbe`` from the same initial rows;
- torch: 26 ``nn.EmbeddingBag(sparse=True)`` and ``torch.optim.SGD`` (the example's
  ``TorchTables``).

Before timing, one step of ours and of FBGEMM from the same weights on the same batch; their
losses and updated rows must agree (the training suite's check). Each step is then timed as the
suite times the embedding-only cases (GPU time of one step, wall time of 20 back to back: the
median of up to five such loops, host time with the GPU asleep): the difference between the
libraries is the embeddings' share.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import harness

ROOT = Path(__file__).resolve().parent.parent
NAME = "DLRM step, examples/dlrm full (26 tables, dim 64, B8192) zipf1.05 sgd"


def example() -> Any:
    """examples/dlrm/dlrm.py as a module (it is a script, not a package)."""
    found = sys.modules.get("dlrm_example")
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location("dlrm_example", ROOT / "examples" / "dlrm" / "dlrm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dlrm_example"] = module
    spec.loader.exec_module(module)
    return module


class FbgemmTables(torch.nn.Module):
    """The 26 tables as FBGEMM's training module (EXACT_SGD at the example's row rate)."""

    def __init__(self, cfg: Any, init: torch.Tensor, eps: float) -> None:
        super().__init__()
        import fbgemm_training

        self.tbe = fbgemm_training.tbe(list(cfg.rows), cfg.dim, "sgd", lr=cfg.embedding_lr, eps=eps, weights="fp32",
                                       output="fp32", bounds_check="none")
        start = 0
        with torch.no_grad():
            for table, rows in zip(self.tbe.split_embedding_weights(), cfg.rows, strict=True):
                table.copy_(init[start:start + rows])
                start += rows

    def forward(self, batch: Any) -> torch.Tensor:
        return self.tbe(batch.indices, batch.offsets)  # type: ignore[no-any-return]


class Setup:
    """The example's configuration, one batch, the initial rows; models built on demand."""

    def __init__(self, seed: int) -> None:
        self.dlrm = example()
        self.cfg = self.dlrm.Config.full()
        log = self.dlrm.ClickLog(self.cfg, harness.DEV)
        self.batch = log.batch(torch.Generator(device=harness.DEV).manual_seed(seed))
        g = torch.Generator(device="cpu").manual_seed(seed + 2)
        self.init = (torch.randn(sum(self.cfg.rows), self.cfg.dim, generator=g) * 0.1).to(harness.DEV)
        self.seed = seed

    @property
    def positions(self) -> int:
        return int(self.batch.indices.numel())

    def model(self, embed: torch.nn.Module) -> Any:
        torch.manual_seed(self.seed)  # the same dense layers for every library
        return self.dlrm.DLRM(self.cfg, embed).to(harness.DEV)

    def step(self, model: Any, sparse: torch.optim.Optimizer | None) -> tuple[Callable[[], None], list[torch.Tensor]]:
        """One training step of ``model`` (dense SGD; ``sparse`` for torch's tables) and the list
        each call appends its loss to."""
        dense = torch.optim.SGD([p for n, p in model.named_parameters() if not n.startswith("embed")],
                                lr=self.cfg.lr)
        lossf = torch.nn.BCEWithLogitsLoss()
        losses: list[torch.Tensor] = []

        def step() -> None:  # the example's own step
            loss = self.dlrm.train_step(model, self.batch, lossf, dense, sparse)
            if len(losses) < 1:
                losses.append(loss)

        return step, losses

    def ours(self) -> tuple[Any, Callable[[], None], list[torch.Tensor]]:
        model = self.model(self.dlrm.OurTables(self.cfg, harness.DEV, self.init))
        return (model, *self.step(model, None))

    def fbgemm(self, eps: float) -> tuple[Any, Callable[[], None], list[torch.Tensor]]:
        model = self.model(FbgemmTables(self.cfg, self.init, eps))
        return (model, *self.step(model, None))

    def torch_step(self) -> Callable[[], None]:
        tables = self.dlrm.TorchTables(self.cfg, harness.DEV, self.init)
        model = self.model(tables)
        return self.step(model, torch.optim.SGD(tables.parameters(), lr=self.cfg.embedding_lr))[0]

    def fbgemm_rows(self, model: Any) -> torch.Tensor:
        return torch.cat(list(model.embed.tbe.split_embedding_weights()))

    def touched(self) -> torch.Tensor:
        """The global rows the batch looks up."""
        starts = [0]
        for rows in self.cfg.rows[:-1]:
            starts.append(starts[-1] + rows)
        return torch.cat([torch.unique(ids) + start for (ids, _), start in zip(self.batch.per_table, starts,
                                                                              strict=True)])

