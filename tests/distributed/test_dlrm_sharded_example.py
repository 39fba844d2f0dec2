"""examples/dlrm/dlrm_sharded.py under torchrun on GPUs (docs/sharding.md, "Loss curves"): N ranks
do the same arithmetic as one GPU doing N ranks' work (``--as-ranks N``: the same floats), follow
the full-batch N = 1 curve within the noise tolerance (examples/dlrm/loss_curves.py: the envelope of
N = 1 runs with only the float order changed), and the pipelined loop equals the plain one. The
CPU twins (gloo): tests/distributed/test_cpu_loss_curves.py.

    python3 -m pytest -q -m "cuda" tests/distributed/test_dlrm_sharded_example.py
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")  # the launcher helpers import torch

from tests.conftest import cuda_available  # noqa: E402
from tests.distributed.launch import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dlrm" / "dlrm_sharded.py"
# DCNv2's tables (rows x 0.01, dim 128, all table-wise), global batch 4096, 60 steps; one plan for all
SHAPE = ["--dcnv2-scale", "0.01", "--steps", "60", "--budget-gib", "40"]
GLOBAL = 4096


def gpus() -> int:
    return int(__import__("torch").cuda.device_count()) if cuda_available() else 0


def torchrun(tmp: Path, name: str, ranks: int, *args: str) -> dict[str, Any]:
    out = tmp / f"{name}.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                           f"--master_port={free_port()}", str(EXAMPLE), *SHAPE, *args, "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    print(done.stdout)
    return dict(json.loads(out.read_text()))


def loss_curves() -> Any:
    spec = importlib.util.spec_from_file_location("loss_curves_gpu", ROOT / "examples" / "dlrm" / "loss_curves.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def noise_runs(tmp: Path) -> tuple[list[float], list[list[float]]]:
    """N = 1's full-batch curve and two noise runs (the batch reversed; 8 micro-batches)."""
    full = torchrun(tmp, "n1", 1, "--batch", str(GLOBAL))["losses"]
    noise = [torchrun(tmp, "rev", 1, "--batch", str(GLOBAL), "--reverse-blocks")["losses"],
             torchrun(tmp, "as8", 1, "--batch", str(GLOBAL // 8), "--as-ranks", "8")["losses"]]
    return full, noise


def assert_follows(curve: list[float], full: list[float], noise: list[list[float]]) -> None:
    lc = loss_curves()
    lines, ok = lc.report(full, noise, {"checked": curve})
    print("\n".join(lines))
    assert ok, "\n".join(lines)


@pytest.mark.cuda
@pytest.mark.skipif(gpus() < 2, reason="needs two GPUs")
def test_two_gpus_follow_one(tmp_path: Path) -> None:
    """Two NCCL ranks = one GPU doing their arithmetic (losses and dense weights, bit for bit);
    within the noise tolerance of the full-batch curve; the pipelined loop = the plain loop."""
    two = torchrun(tmp_path, "n2", 2, "--batch", str(GLOBAL // 2))
    same = torchrun(tmp_path, "as2", 1, "--batch", str(GLOBAL // 2), "--as-ranks", "2")
    assert two["losses"] == same["losses"] and two["dense_sha256"] == same["dense_sha256"]
    piped = torchrun(tmp_path, "pipe2", 2, "--batch", str(GLOBAL // 2), "--pipeline")
    assert piped["losses"] == two["losses"]
    full, noise = noise_runs(tmp_path)
    assert two["losses"] != full  # another float order than the full batch: the tolerance below is needed
    assert_follows(two["losses"], full, noise)


@pytest.mark.cuda
@pytest.mark.skipif(gpus() < 4, reason="needs four GPUs")
def test_four_gpus_follow_one(tmp_path: Path) -> None:
    """Four NCCL ranks: with --ordered-allreduce the same floats as one GPU doing their arithmetic;
    with DDP's own all-reduce within the noise tolerance of the full-batch curve."""
    ordered = torchrun(tmp_path, "n4-ord", 4, "--batch", str(GLOBAL // 4), "--ordered-allreduce")
    same = torchrun(tmp_path, "as4", 1, "--batch", str(GLOBAL // 4), "--as-ranks", "4")
    assert ordered["losses"] == same["losses"] and ordered["dense_sha256"] == same["dense_sha256"]
    four = torchrun(tmp_path, "n4", 4, "--batch", str(GLOBAL // 4))
    full, noise = noise_runs(tmp_path)
    assert_follows(four["losses"], full, noise)
