"""The pytest plugin never reports a run that verified nothing as green (issue 51 item 1).

The kernel is an NVRTC (CUDA) kernel and the subprocess sees no GPU (``CUDA_VISIBLE_DEVICES``
empty), so the test means the same on a machine with a GPU as on one without; no build runs.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .conftest import CUDA_TREE, RULES

REPOSITORY = Path(__file__).resolve().parents[2]


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *extra: str) -> pytest.RunResult:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    # The plugin of this checkout (an editable install elsewhere would bring its own).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--kernels", str(CUDA_TREE), "--kernels-only", "--kernels-rules", RULES,
        "--kernels-id", "nvrtc-empty", "--kernels-no-large-table", "--kernels-seed", "5",
        "--junitxml=report.xml", *extra)


def _properties(pytester: pytest.Pytester) -> dict[str, str]:
    suite = ET.parse(pytester.path / "report.xml").getroot().find("testsuite")
    assert suite is not None
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}


def test_a_kernel_this_machine_cannot_run_fails(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2 and "skipped" not in outcomes, outcomes
    result.stdout.fnmatch_lines([
        "*not verified here:*verify-not-run*",
        "*compliance kernels: 0 of 1 kernel(s) verified, 0 failed, 1 not verified here (failures;*",
    ])
    assert _properties(pytester) == {"kernels_verified": "0", "kernels_failed": "0", "kernels_not_verified": "1"}
    suite = ET.parse(pytester.path / "report.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == str(outcomes["failed"])


@pytest.mark.slow
def test_allow_unverified_skips_and_says_so(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "--kernels-allow-unverified", "-rs")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    outcomes = result.parseoutcomes()
    assert "failed" not in outcomes and outcomes.get("skipped", 0) >= 2, outcomes
    result.stdout.fnmatch_lines([
        "*compliance kernels: 0 of 1 kernel(s) verified, 0 failed, 1 not verified here (skipped:*",
        "SKIPPED*not verified here (no GPU; --kernels-allow-unverified)*",
    ])
    assert _properties(pytester)["kernels_not_verified"] == "1"
