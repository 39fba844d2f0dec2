"""Issue 50: kernels that steer the verifier from around the call (CPU twins; GPU ones in test_cuda.py).

The tree ``fixtures/hostile`` is verified once, through the command line, as an operator would run it,
with an operator secret in the environment. On main before issue 50 (7ca6834) every hostile kernel
there passed (or the secret reached the report, or the run hung, died or left a daemon behind)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from .conftest import FIXTURES

pytestmark = pytest.mark.slow

TREE = FIXTURES / "hostile"
KERNELS = TREE / "Fixture" / "benchmarks" / "dlrm" / "implementations" / "hostile"
SECRET = "tok-50-d7f6e5a4b3c2"
EXPECTED = {
    "shim-forge": {"verify-entry-not-run"},  # class 1
    "shim-forge-same-name": {"verify-entry-not-run"},  # class 1
    "through-shim": {"verify-passed"},  # class 1, positive
    "patched-runner": {"verify-entry-not-run"},  # class 3
    "env-marker": {"verify-mismatch", "verify-undeclared-mode"},  # class 10: zeros in every mode it is handed
    "narrow-domain": {"verify-coverage-narrow", "verify-passed"},  # class 10: passes inside, error for coverage
    "mode-ignored": {"verify-undeclared-mode"},  # class 10: modes [sum] hid a wrong mean (before: verify-passed)
    "mode-refused": {"verify-passed"},  # class 10, positive: refuses mean and max
    "mode-aborts": {"verify-passed"},  # class 10, positive: its process ends on mean and on max
    "mode-not-passed": {"verify-passed"},  # class 10, positive: its interface cannot express a mode
    "leaky": {"verify-crash"},  # class 11
    "helper": {"verify-passed"},  # class 2
    "victim": {"verify-mismatch", "verify-undeclared-mode"},  # class 2 (zeros in every mode)
    "stopper": {"verify-passed"},  # class 11
    "killer": {"verify-passed"},  # class 11
    "daemon": {"verify-passed"},  # class 11
}


def _tree_hashes() -> dict[str, str]:
    return {p.relative_to(TREE).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(TREE.rglob("*")) if p.is_file()}


def _daemons() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == b"sleep\x007771\x00":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("hostile")
    before = _tree_hashes()
    env = {**os.environ, "COMPLIANCE_TEST_SECRET": SECRET}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "compliance", "verify", str(TREE), "--rules", "training/proposal-custom-kernels",
         "--seed", "50", "--no-large-table", "--build-dir", str(out / "builds"), "--format", "json",
         "--output", str(out / "report.json")],
        env=env, capture_output=True, text=True, timeout=1500, check=False)
    report_text = (out / "report.json").read_text() if (out / "report.json").exists() else ""
    by_kernel: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in json.loads(report_text)["findings"] if report_text else []:
        by_kernel[f["kernel"] or "-"].append(f)
    return {"exit": proc.returncode, "stderr": proc.stderr, "text": report_text, "kernels": by_kernel,
            "before": before, "after": _tree_hashes(), "seconds": time.monotonic() - started}


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_hostile_kernel_gets_its_verdict(run: dict[str, Any], kernel: str) -> None:
    found = run["kernels"][kernel]
    assert {f["rule_id"] for f in found} == EXPECTED[kernel], [f["message"] for f in found]


def test_the_run_fails_and_writes_its_report(run: dict[str, Any]) -> None:
    assert run["exit"] == 1, run["stderr"][-3000:]
    assert run["text"], "no report: the verifier was stopped or killed"


def test_the_secret_never_reaches_the_report(run: dict[str, Any]) -> None:
    assert SECRET not in run["text"] and SECRET not in run["stderr"]
    leaky = run["kernels"]["leaky"][0]["message"]
    assert "$COMPLIANCE_TEST_SECRET" in leaky


def test_entry_evidence_says_what_ran(run: dict[str, Any]) -> None:
    shim = run["kernels"]["shim-forge"][0]["message"]
    assert "shim_honest" in shim and "verified through shim verify/binding.cpp" in shim
    same_name = run["kernels"]["shim-forge-same-name"][0]["message"]
    assert "outside the kernel's declared sources" in same_name
    passed = run["kernels"]["through-shim"][0]["message"]
    assert "verified through shim verify/binding.cpp" in passed and "covered: dims" in passed


def test_verdicts_say_how_undeclared_modes_were_answered(run: dict[str, Any]) -> None:
    ignored = run["kernels"]["mode-ignored"][0]["message"]
    assert "2 of" in ignored and "mode 'mean' is not among the declared modes" in ignored
    refused = run["kernels"]["mode-refused"][0]["message"]
    assert "undeclared modes: mean refused, max refused" in refused
    assert "undeclared modes called: max, mean" in refused
    through = run["kernels"]["through-shim"][0]["message"]
    assert "undeclared modes: mean right, max refused" in through
    aborts = run["kernels"]["mode-aborts"][0]["message"]
    assert "undeclared modes: mean refused (the process ended: signal 6), max refused (the process ended: " \
           "signal 6)" in aborts
    not_passed = run["kernels"]["mode-not-passed"][0]["message"]
    assert "the interface passes none, so only sum can be called" in not_passed


def test_coverage_names_the_missing_shapes(run: dict[str, Any]) -> None:
    narrow = next(f for f in run["kernels"]["narrow-domain"] if f["rule_id"] == "verify-coverage-narrow")
    assert narrow["severity"] == "error"
    assert "dim 128" in narrow["message"] and "bags of 100 lookups" in narrow["message"]
    assert "recommendation_v2/torchrec_dlrm" in narrow["message"]


def test_no_daemon_outlives_the_run_and_the_tree_is_untouched(run: dict[str, Any]) -> None:
    assert not _daemons()
    assert run["after"] == run["before"]
    assert not any(f["rule_id"] == "verify-tree-modified" for fs in run["kernels"].values() for f in fs)
