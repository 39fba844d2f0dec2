"""examples/dlrm/dlrm_sharded.py under torchrun on two GPUs: N = 2 ranks follow N = 1's loss
curve (the same global batches) within the example's tolerance, the pipelined loop the plain one
exactly. (On the CPU the same three launches take minutes with gloo: run by hand, docs/sharding.md.)

    python3 -m pytest -q -m "cuda" tests/distributed/test_dlrm_sharded_example.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the launcher helpers import torch

from tests.conftest import cuda_available  # noqa: E402
from tests.distributed.launch import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dlrm" / "dlrm_sharded.py"


def torchrun(ranks: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                           f"--master_port={free_port()}", str(EXAMPLE), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def curves_agree(tmp_path: Path, shape: list[str], batch: int) -> str:
    one = torchrun(1, *shape, "--batch", str(2 * batch), "--json", str(tmp_path / "n1.json"))
    assert one.returncode == 0, one.stdout + one.stderr
    two = torchrun(2, *shape, "--batch", str(batch), "--check", str(tmp_path / "n1.json"),
                   "--json", str(tmp_path / "n2.json"))
    assert two.returncode == 0, two.stdout + two.stderr
    piped = torchrun(2, *shape, "--batch", str(batch), "--pipeline", "--check", str(tmp_path / "n2.json"))
    assert piped.returncode == 0, piped.stdout + piped.stderr
    assert "max |loss - reference loss| over" in piped.stdout and ": 0.00e+00" in piped.stdout
    return two.stdout + piped.stdout


@pytest.mark.cuda
@pytest.mark.skipif(not cuda_available() or __import__("torch").cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_follow_one(tmp_path: Path) -> None:
    out = curves_agree(tmp_path, ["--dcnv2-scale", "0.01", "--steps", "60"], 2048)
    print(out)
