"""End to end on the CPU: the C++ extension fixtures are built and verified; each
adversarial kernel fails with the rule that names its flaw, the honest ones pass."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from compliance.engine import build_context
from compliance.findings import Finding
from compliance.verify import run_verification_checks
from compliance.verify.options import VerifyOptions

from .conftest import CPU_TREE, RULES

pytestmark = pytest.mark.slow

EXPECTED = {
    "good-bag": {"verify-passed"},
    "returning-bag": {"verify-passed"},
    "gather": {"verify-passed"},
    "empty": {"verify-unwritten"},
    "partial-write": {"verify-unwritten"},
    "empty-bag-mean": {"verify-mismatch"},
    "reads-past-table": {"verify-mismatch"},
    "cached-result": {"verify-output-invalid"},
    "hang": {"verify-timeout"},
    "mutates-input": {"verify-input-modified"},
    "writes-past-output": {"verify-out-of-bounds-write"},
    # issue 40: the module's static constructor forges "case passed" events and silences the real ones;
    # the kernel writes zeros. Before the verdicts were computed outside the kernel's process: PASS.
    "forged-pass": {"verify-mismatch"},
    # issue 40: non-JSON, a forged "no GPU" and a 3 MiB line on the progress channel (before: exit 3)
    "garbage-channel": {"verify-passed"},
}


@pytest.fixture(scope="module")
def findings(build_root: Path) -> dict[str, list[Finding]]:
    ctx, _ = build_context(CPU_TREE, RULES)
    lines: list[str] = []
    options = VerifyOptions(seed=20260611, build_dir=build_root, progress=lines.append)
    by_kernel: dict[str, list[Finding]] = defaultdict(list)
    for f in run_verification_checks(ctx, options):
        by_kernel[f.kernel or "-"].append(f)
    by_kernel["-progress-"] = lines  # type: ignore[assignment]
    return by_kernel


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_fixture_gets_its_finding(findings: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in findings[kernel]}
    messages = [f.message for f in findings[kernel]]
    if EXPECTED[kernel] == {"verify-passed"}:
        assert rules == {"verify-passed"}, messages
    else:  # its own rule, perhaps with consequences (a mutated index also gives wrong sums)
        assert EXPECTED[kernel] <= rules and "verify-passed" not in rules, messages


def test_overflow_fails_only_on_the_large_table(findings: dict[str, list[Finding]]) -> None:
    got = findings["overflow32"]
    assert {f.rule_id for f in got} <= {"verify-crash", "verify-mismatch"} and got
    for f in got:
        details = dict(f.details)
        cases = [c["case"] for c in details.get("cases", [])]
        assert all(c.startswith("large-table") for c in cases)
        if f.rule_id == "verify-crash":  # the process died in the large case, after all the others passed
            assert details["cases_run"] == details["cases_planned"] - 1
            assert "large-table" in f.message


def test_findings_say_where_and_how_bad(findings: dict[str, list[Finding]]) -> None:
    mismatch = findings["reads-past-table"][0]
    details = dict(mismatch.details)
    assert mismatch.path.endswith("kernel_manifest.yaml") and mismatch.line
    assert details["seed"] == 20260611
    first = details["cases"][0]
    assert first["positions"] and {"index", "got", "expected", "bound"} <= set(first["positions"][0])
    timeout = dict(findings["hang"][0].details)
    assert "time limit of 20 s" in findings["hang"][0].message and "log_excerpt" in timeout


def test_progress_names_kernel_case_and_elapsed(findings: dict[str, list[Finding]]) -> None:
    lines = findings["-progress-"]
    assert lines[0].startswith("verification seed 20260611")
    assert any(line.startswith("[1/14 good-bag] case 1/") and line.endswith(" s]") for line in lines)


def test_cli_verify_json_and_exit_codes(build_root: Path, tmp_path: Path) -> None:
    # Two verify runs (each builds the extension afresh, as every run does): one that passes, one that fails.
    base = [sys.executable, "-m", "compliance", "verify", str(CPU_TREE), "--rules", RULES,
            "--build-dir", str(build_root), "--seed", "5", "--no-large-table"]
    # garbage-channel writes non-JSON, a forged "no GPU" and a 3 MiB line on the progress channel
    good = subprocess.run([*base, "--kernel", "gather", "--kernel", "garbage-channel", "--format", "json"],
                          check=False, capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    report = json.loads(good.stdout)
    assert sorted((f["kernel"], f["rule_id"]) for f in report["findings"]) == [
        ("garbage-channel", "verify-passed"), ("gather", "verify-passed")]
    assert "verification seed 5" in good.stderr and "[1/2 gather] case 1/" in good.stderr
    bad = subprocess.run([*base, "--kernel", "empty", "-q", "-o", str(tmp_path / "r.txt")],
                         check=False, capture_output=True, text=True)
    assert bad.returncode == 1 and "verify-unwritten" in (tmp_path / "r.txt").read_text()
    assert "case 1/" not in bad.stderr  # --quiet
    unknown = subprocess.run([*base, "--kernel", "nope"], check=False, capture_output=True, text=True)
    assert unknown.returncode == 2 and "no declared kernel with id nope" in unknown.stderr
    inside = subprocess.run([sys.executable, "-m", "compliance", "verify", str(CPU_TREE), "--rules", RULES,
                             "--build-dir", str(CPU_TREE / "b")], check=False, capture_output=True, text=True)
    assert inside.returncode == 2 and "outside the checked tree" in inside.stderr


def test_check_without_verify_builds_nothing(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from compliance.engine import run_check; "
            f"run_check(Path({str(CPU_TREE)!r})); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={"COMPLIANCE_BUILD_DIR": str(tmp_path),
                                                                   "PATH": "/usr/bin:/bin"})
    assert list(tmp_path.iterdir()) == []
