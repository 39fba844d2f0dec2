"""Shared pytest configuration: the ``cuda`` marker skips cleanly without a GPU; the nvcc sweep's
selection (tests/kernels/nvcc_sweep.py) is printed in the header and the summary; a run in which
``cuda`` tests ran on a GPU appends its row to docs/perf/gpu-tests.md."""

from __future__ import annotations

import atexit
import datetime
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# pytester runs pytest in a subprocess on a generated project (the pytest plugin's tests).
pytest_plugins = ["pytester"]

if TYPE_CHECKING:
    from compliance.blob_catalogue import ProjectBlobs


@functools.cache
def cuda_available() -> bool:
    """True when torch imports and sees a CUDA device (never raises)."""
    try:
        import torch
    except Exception:  # torch missing or broken: no GPU tests
        return False
    return bool(torch.cuda.is_available())


# The compiled host path (reference_kernels/host.py): built before the first GPU call returns, so
# every GPU test takes it where it serves the call; never built by a run without a GPU.
os.environ.setdefault("REFERENCE_KERNELS_HOST_PATH", "wait" if cuda_available() else "off")


# `compliance check` keeps a scan cache in the user's cache directory: the tests' many temporary
# trees get one of their own, removed at the end.
if "COMPLIANCE_SCAN_CACHE" not in os.environ:
    os.environ["COMPLIANCE_SCAN_CACHE"] = tempfile.mkdtemp(prefix="compliance-scan-cache-")
    atexit.register(shutil.rmtree, os.environ["COMPLIANCE_SCAN_CACHE"], True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_cuda = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords and not cuda_available():
            item.add_marker(skip_cuda)


class UpstreamBlobs:
    """Test contents registered as upstream versions of catalogued projects (the blob catalogue)."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, bytes]] = {}
        self.built: Mapping[str, ProjectBlobs] | None = None

    def add(self, project_id: str, files: Mapping[str, str | bytes]) -> None:
        """Make ``files`` (copy-relative path -> content) versions of catalogue entry ``project_id``."""
        from compliance.vendored_trees import load_catalogue

        repository = next(e.repository for e in load_catalogue() if e.id == project_id)
        self.built = None
        self.files.setdefault(repository, {}).update(
            {path: data.encode() if isinstance(data, str) else data for path, data in files.items()})

    def catalogue(self) -> Mapping[str, ProjectBlobs]:
        """The shipped catalogue with every registered project replaced by what was registered."""
        from compliance.blob_catalogue import ID_BYTES, ProjectBlobs, load_blob_catalogue
        from compliance.blobs import normalized_blob_hash

        if self.built is not None:
            return self.built
        registered: dict[str, ProjectBlobs] = {}
        for repository, files in self.files.items():
            paths = tuple(sorted(files))
            blobs: dict[bytes, tuple[tuple[int, ...], int, int]] = {}
            for index, path in enumerate(paths):
                short = bytes.fromhex(normalized_blob_hash(files[path])[:2 * ID_BYTES])
                blobs[short] = (tuple(sorted({*blobs.get(short, ((), 0, 0))[0], index})), 0, 0)
            registered[repository] = ProjectBlobs(repository, ("v1.0",), paths, blobs)
        self.built = ChainMap(registered, load_blob_catalogue())  # type: ignore[arg-type]
        return self.built


@pytest.fixture
def upstream_blobs(monkeypatch: pytest.MonkeyPatch) -> UpstreamBlobs:
    """Register test contents as upstream blobs (the shipped ones are real projects' code, which
    fixtures never copy)."""
    from compliance import vendored_trees

    fake = UpstreamBlobs()
    monkeypatch.setattr(vendored_trees, "load_blob_catalogue", fake.catalogue)
    return fake


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Under ``-m nvcc_sweep``: which variants this run compiles, and the seed that reproduces it."""
    if "nvcc_sweep" not in str(config.getoption("markexpr", "")):
        return []
    from tests.kernels import nvcc_sweep

    return [f"nvcc sweep: NVCC_SWEEP={nvcc_sweep.mode()}, seed {nvcc_sweep.SEED} (NVCC_SWEEP_SEED={nvcc_sweep.SEED} "
            f"reproduces it), {nvcc_sweep.SAMPLE} sampled per test, cache {nvcc_sweep.cache_dir()}"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _record_gpu_run(terminalreporter)
    sweep = sys.modules.get("tests.kernels.nvcc_sweep")
    if sweep is not None and sweep.SUMMARY:
        terminalreporter.section("nvcc sweep: what was compiled")
        for line in sweep.SUMMARY:
            terminalreporter.write_line(line)


GPU_TEST_LOG = Path(__file__).resolve().parents[1] / "docs" / "perf" / "gpu-tests.md"
_CUDA_TESTS_RAN: list[str] = []  # node ids of cuda-marked tests whose call phase ran
_STARTED: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _STARTED.append(time.monotonic())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "cuda" in report.keywords:
        _CUDA_TESTS_RAN.append(report.nodeid)


def _result_line(terminalreporter: pytest.TerminalReporter) -> str:
    counts = {kind: len(terminalreporter.stats.get(kind, [])) for kind in ("failed", "passed", "skipped", "error")}
    took = time.monotonic() - _STARTED[0] if _STARTED else 0.0
    parts = [f"{n} {kind}" for kind, n in counts.items() if n]
    return f"{', '.join(parts) or 'no tests'} in {took:.0f} s"


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                          cwd=GPU_TEST_LOG.parent)
    return done.stdout.strip() or "not a git checkout"


def gpu_test_row(card: str, command: str, result: str, commit: str) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    cells = [when, commit, card, f"`{command}`", result]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |\n"


def _record_gpu_run(terminalreporter: pytest.TerminalReporter) -> None:
    """Append this run's row to the GPU test log when cuda tests ran on a GPU."""
    target = os.environ.get("GPU_TEST_LOG", str(GPU_TEST_LOG))
    if hasattr(terminalreporter.config, "workerinput"):  # an xdist worker: the controller writes the one row
        return
    if not _CUDA_TESTS_RAN or target == "off" or not cuda_available():
        return
    import torch

    count = torch.cuda.device_count()
    card = torch.cuda.get_device_name(0) + (f" (x{count})" if count > 1 else "")
    command = "python3 -m pytest " + " ".join(sys.argv[1:])
    row = gpu_test_row(card, command, _result_line(terminalreporter), _commit())
    with open(target, "a", encoding="utf-8") as log:
        log.write(row)
    terminalreporter.write_line(f"GPU test run recorded in {target}")
