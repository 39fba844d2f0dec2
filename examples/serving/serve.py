"""Served inference with quantized embedding tables at DCNv2 shapes: queries/s and the accuracy cost
of int8 tables against float32 ones, on the synthetic click log of examples/dlrm.

    python3 examples/serving/serve.py --small                 # CPU or GPU: the size the tests run
    python3 examples/serving/serve.py                          # GPU: DCNv2 shapes, tables capped at 4M rows
    python3 examples/serving/serve.py --max-rows 40000000      # GPU: DCNv2's own table sizes (about 120 GB)

Shapes: MLPerf DLRMv2 (DCNv2 on Criteo 1TB multi-hot): 26 tables of 3 to 40M rows, dimension 128,
a fixed number of lookups per table and sample (1 to 100: DCNv2's multi-hot sizes), 13 dense features.
``--small`` keeps the 26 tables and their lookups with small tables (the example's CPU size).

Click log: examples/dlrm's ``ClickLog`` (Zipf-skewed ids per table, a hidden score per (table, id) and
a hidden direction over the dense features; P(click) = sigmoid(sum of the looked-up scores + dense .
direction - 0.5)), with DCNv2's bag sizes instead of its 0-3 lookups and the scores scaled by 1/4, so
that 214 lookups a sample spread the logit about as its 39 do (held-out AUC about 0.9, not 0.996).

Served model: not trained, but built from the click log's own generator, so that its float32 AUC is the
best any model reaches on this log and the int8 difference is quantization's alone. Row r of table t
is ``score_t[r] * u + noise`` (u a unit vector, noise orthogonal to it, 0.1 per element, as trained
DLRM rows are noisy); the model pools every table (sum), reads each pooled vector along u and adds
the dense part: logit = sum_t pooled_t . u + dense . direction - 0.5. The same model serves from
float32 tables and from int8 tables (FBGEMM's row-wise int8: fp16 scale and bias per row), both
through ``reference_kernels.quantized_tbe.QuantizedTableBatchedEmbeddingBag`` (its ``fp32`` and
``int8`` rows), on the same query batches. Queries/s count the lookups and the read-out of timed
batches after ``--warmup`` untimed ones (the first compile the kernels).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "dlrm"))

import dlrm  # noqa: E402  (examples/dlrm/dlrm.py: the click log and the AUC)

from reference_kernels.quantized import quantization_error, quantize  # noqa: E402
from reference_kernels.quantized_tbe import QuantizedTableBatchedEmbeddingBag  # noqa: E402

DCNV2_ROWS = (40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
              155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)
"""Rows of DCNv2's 26 tables (MLPerf DLRMv2, Criteo 1TB)."""
DCNV2_HOTNESS = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
"""Lookups per sample of each table (DCNv2's multi-hot sizes)."""
DCNV2_DIM = 128
NOISE = 0.1
"""Per element of a served row, orthogonal to the read-out direction."""
SCORE_SCALE = 0.25
"""The click log's hidden scores, scaled for DCNv2's 214 lookups a sample (module docstring)."""


@dataclass(frozen=True)
class ServeConfig:
    rows: tuple[int, ...]
    dim: int = DCNV2_DIM
    batch: int = 2048
    """Samples (queries) per served batch."""
    batches: int = 20
    """Timed batches."""
    warmup: int = 3
    """Untimed batches served first (they compile the kernels)."""
    eval_batches: int = 8
    """Batches whose predictions give the AUC."""
    seed: int = 0

    @staticmethod
    def dcnv2(max_rows: int) -> ServeConfig:
        return ServeConfig(tuple(min(r, max_rows) for r in DCNV2_ROWS))

    @staticmethod
    def small() -> ServeConfig:
        return ServeConfig(tuple(min(r, 200 + 97 * t) for t, r in enumerate(DCNV2_ROWS)), batch=128, batches=2,
                           warmup=1, eval_batches=6)


class DCNv2ClickLog(dlrm.ClickLog):
    """examples/dlrm's click log with DCNv2's fixed bag sizes (``DCNV2_HOTNESS``), scores scaled."""

    def __init__(self, cfg: dlrm.Config, device: str) -> None:
        super().__init__(cfg, device)
        self.scores = [s * SCORE_SCALE for s in self.scores]

    def batch(self, gen: torch.Generator) -> dlrm.Batch:
        b = self.cfg.batch
        dense = torch.randn(b, dlrm.DENSE_FEATURES, generator=gen, device=self.device)
        logit = dense @ self.direction - 0.5
        per_table = []
        for t, hot in enumerate(DCNV2_HOTNESS):
            u = torch.rand(b * hot, generator=gen, device=self.device, dtype=torch.float64)
            ids = self.perm[t][torch.searchsorted(self.cdfs[t], u).clamp(max=self.cfg.rows[t] - 1)]
            per_table.append(ids)
            logit = logit + self.scores[t][ids].view(b, hot).sum(1)
        labels = torch.bernoulli(torch.sigmoid(logit), generator=gen)
        lengths = torch.tensor(DCNV2_HOTNESS, device=self.device).repeat_interleave(b)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        return dlrm.Batch(dense, torch.cat(per_table), offsets, [], labels)


def served_tables(log: dlrm.ClickLog, cfg: ServeConfig, device: str) -> tuple[list[Tensor], Tensor]:
    """The served model's float32 tables (score along u, plus noise orthogonal to u) and u."""
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed + 3)
    u = torch.randn(cfg.dim, generator=gen)
    u = (u / u.norm()).to(device)
    tables = []
    for t, rows in enumerate(cfg.rows):
        noise = torch.randn(rows, cfg.dim, generator=torch.Generator(device=device).manual_seed(cfg.seed + 10 + t),
                            device=device) * NOISE
        noise -= (noise @ u)[:, None] * u[None, :]
        tables.append(log.scores[t][:, None] * u[None, :] + noise)
    return tables, u


@dataclass
class Served:
    """One table format's results."""

    queries_per_s: float
    auc: float
    table_bytes: int
    max_abs_error: float = 0.0
    mean_abs_error: float = 0.0


def serve(module: QuantizedTableBatchedEmbeddingBag, u: Tensor, log: dlrm.ClickLog, cfg: ServeConfig,
          device: str) -> tuple[float, float]:
    """(queries/s over the timed batches, AUC over the evaluation batches) of the model on ``module``."""
    dims = cfg.dim
    tables = len(cfg.rows)
    readout = u.repeat(tables)  # [T * D]: each table's pooled vector read along u

    def predict(batch: dlrm.Batch) -> Tensor:
        pooled = module(batch.indices, batch.offsets).float()
        return pooled @ readout + batch.dense @ log.direction - 0.5

    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    timed = [log.batch(gen) for _ in range(cfg.warmup + cfg.batches)]
    with torch.no_grad():
        for batch in timed[:cfg.warmup]:
            predict(batch)
        _synchronize(device)
        started = time.perf_counter()
        for batch in timed[cfg.warmup:]:
            predict(batch)
        _synchronize(device)
        elapsed = time.perf_counter() - started
        eval_gen = torch.Generator(device=device).manual_seed(cfg.seed + 12345)
        scores, labels = [], []
        for _ in range(cfg.eval_batches):
            batch = log.batch(eval_gen)
            scores.append(predict(batch))
            labels.append(batch.labels)
    assert dims == module.dims[0]
    return cfg.batches * cfg.batch / elapsed, dlrm.auc(torch.cat(scores), torch.cat(labels))


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run(cfg: ServeConfig, device: str, formats: tuple[str, ...] = ("fp32", "int8")) -> dict[str, Any]:
    """Serve the same queries from each table format: queries/s, AUC, bytes, quantization error."""
    log = DCNv2ClickLog(dlrm.Config(cfg.rows, dim=cfg.dim, batch=cfg.batch, seed=cfg.seed), device)
    weights, u = served_tables(log, cfg, device)
    out: dict[str, Any] = {"config": asdict(cfg), "device": _device_name(device), "hotness": DCNV2_HOTNESS}
    for fmt in formats:
        quantized = [quantize(w, fmt) for w in weights]
        module = QuantizedTableBatchedEmbeddingBag(quantized, "sum", output_dtype=torch.float32, device=device,
                                                   pooling_factors=[float(h) for h in DCNV2_HOTNESS])
        errors = [quantization_error(w, q) for w, q in zip(weights, quantized, strict=True)]
        qps, area = serve(module, u, log, cfg, device)
        out[fmt] = asdict(Served(qps, area, int(module.data.numel()), max(e.max_abs for e in errors),
                                 sum(e.mean_abs for e in errors) / len(errors)))
        del module, quantized
    if "fp32" in out and "int8" in out:
        out["auc_difference"] = out["int8"]["auc"] - out["fp32"]["auc"]
    return out


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a DCNv2-shaped model from float32 and int8 tables")
    parser.add_argument("--small", action="store_true", help="small tables (the test's size; runs on the CPU)")
    parser.add_argument("--max-rows", type=int, default=4_000_000, help="cap on every table's rows (default "
                        "%(default)s; DCNv2's largest have 40M)")
    parser.add_argument("--batch", type=int, help="queries per batch (default 2048; --small 128)")
    parser.add_argument("--batches", type=int, help="timed batches")
    parser.add_argument("--warmup", type=int, help="untimed batches first (they compile the kernels)")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when there is a GPU")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = ServeConfig.small() if args.small else ServeConfig.dcnv2(args.max_rows)
    changes = {k: v for k, v in (("batch", args.batch), ("batches", args.batches), ("warmup", args.warmup))
               if v is not None}
    cfg = ServeConfig(**{**asdict(cfg), **changes, "rows": cfg.rows})
    result = run(cfg, device)
    print(f"{result['device']}: 26 tables (rows {min(cfg.rows)}..{max(cfg.rows)}, dim {cfg.dim}, "
          f"{sum(DCNV2_HOTNESS)} lookups a query), batches of {cfg.batch} queries; queries/s over "
          f"{cfg.batches} batches after {cfg.warmup} untimed")
    for fmt in ("fp32", "int8"):
        r = result[fmt]
        print(f"{fmt:5s} {r['queries_per_s']:12,.0f} queries/s  AUC {r['auc']:.5f}  tables "
              f"{r['table_bytes'] / 2**30:7.2f} GiB  quantization error max {r['max_abs_error']:.2e} "
              f"mean {r['mean_abs_error']:.2e}")
    print(f"AUC int8 - fp32: {result['auc_difference']:+.5f}; int8 serves "
          f"{result['int8']['queries_per_s'] / result['fp32']['queries_per_s']:.2f}x the queries/s of fp32")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if math.isfinite(result["auc_difference"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
