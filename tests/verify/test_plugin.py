"""The pytest plugin: one item per kernel build and case, same findings as compliance verify."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from .conftest import CPU_TREE, RULES

pytestmark = pytest.mark.slow
REPOSITORY = Path(__file__).resolve().parents[2]


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if not any(e.name == "compliance_kernels" for e in entry_points(group="pytest11")):
        pytest.fail("the pytest11 entry point is not installed: pip install -e .")
    # The plugin of this checkout, whichever checkout an editable install points at.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path), *args], check=False, capture_output=True, text=True, cwd=tmp_path, env=env)


def test_items_per_case_with_junit(tmp_path: Path, build_root: Path) -> None:
    junit = tmp_path / "junit.xml"
    run = _pytest(tmp_path, "--kernels", str(CPU_TREE), "--kernels-rules", RULES, "--kernels-id", "gather",
                  "--kernels-id", "partial-write", "--kernels-seed", "11", "--kernels-build-dir", str(build_root),
                  "--kernels-no-large-table", f"--junitxml={junit}")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "compliance kernels: seed 11" in run.stdout
    assert "partial-write[sum-fixed-float32-int64-d1" in run.stdout
    assert "verify-unwritten" in run.stdout
    xml = junit.read_text()
    assert 'name="gather[build]"' in xml and 'name="partial-write[sum-csr-float32-int64-d3]"' in xml
    assert 'failures="0"' not in xml
    assert "compliance kernels: 1 of 2 kernel(s) verified, 1 failed, 0 not verified here" in run.stdout
    assert '<property name="kernels_verified" value="1"' in xml


def test_inert_without_kernels(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import sys\ndef test_x():\n    assert 'compliance.engine' not in sys.modules\n")
    run = _pytest(tmp_path, "-q")
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout
