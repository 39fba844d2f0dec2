"""examples/serving (issue 54, item 6): a DCNv2-shaped model served from float32 and from int8 tables on
the click log of examples/dlrm. The queries carry DCNv2's bag sizes; on the CPU (small tables, slow
set) and on a GPU (the same size) int8 tables keep the AUC within 0.005 of float32's at a third of
the bytes, and both learn the planted signal."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "serving" / "serve.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("serving_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["serving_example"] = module
    spec.loader.exec_module(module)
    return module


def test_queries_carry_dcnv2s_bag_sizes() -> None:
    serve = load_example()
    cfg = serve.ServeConfig.small()
    log = serve.DCNv2ClickLog(serve.dlrm.Config(cfg.rows, dim=cfg.dim, batch=4), "cpu")
    batch = log.batch(torch.Generator().manual_seed(1))
    lengths = (batch.offsets[1:] - batch.offsets[:-1]).view(26, 4)
    assert lengths[:, 0].tolist() == list(serve.DCNV2_HOTNESS) and bool((lengths == lengths[:, :1]).all())
    assert batch.indices.numel() == 4 * sum(serve.DCNV2_HOTNESS) == int(batch.offsets[-1])
    starts = batch.offsets[:-1:4]
    for t, rows in enumerate(cfg.rows):  # each table's ids lie in the table
        ids = batch.indices[int(starts[t]):int(starts[t]) + 4 * serve.DCNV2_HOTNESS[t]]
        assert int(ids.min()) >= 0 and int(ids.max()) < rows


def _check(result: dict[str, Any]) -> None:
    assert result["fp32"]["auc"] > 0.85, result
    assert abs(result["auc_difference"]) < 0.005, result
    assert result["int8"]["table_bytes"] * 3 < result["fp32"]["table_bytes"], result
    assert result["fp32"]["max_abs_error"] == 0 < result["int8"]["max_abs_error"] < 0.01, result


@pytest.mark.slow
def test_int8_tables_serve_with_float32_accuracy_on_the_cpu() -> None:
    serve = load_example()
    _check(serve.run(serve.ServeConfig.small(), "cpu"))


@pytest.mark.cuda
def test_int8_tables_serve_with_float32_accuracy_on_the_gpu() -> None:
    serve = load_example()
    result = serve.run(serve.ServeConfig.small(), "cuda")
    print(result)
    _check(result)
