"""Every format carries the rule set and why it was chosen; SARIF and JUnit stay linear and
never print a file name's control characters raw (issue 40 items 10 and 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from compliance.engine import run_check
from compliance.findings import Finding, Severity
from compliance.inventory import Inventory
from compliance.model import CheckReport, RuleSetChoice
from compliance.report.json_report import render_json
from compliance.report.junit import render_junit
from compliance.report.sarif import render_sarif
from compliance.report.text import render_text
from compliance.ruleset import load_ruleset
from tests.compliance.treeutil import BASE, CASES, build_case


def _report(findings: tuple[Finding, ...], reason: str = "--rules") -> CheckReport:
    inventory = Inventory(root=Path("/t"), style="training", organizations=(), file_count=0, native=(),
                          binaries=(), symlinks=(), manifests=(), setup_extensions=(), vendored=())
    choice = RuleSetChoice(load_ruleset("training/v0.7"), reason, signal="rules-option")
    return CheckReport(Path("/t"), choice, findings, inventory, ("static",))


REPO = Path(__file__).resolve().parents[2]


def _finding(path: str, index: int = 0) -> Finding:
    return Finding(rule_id="undeclared-kernel", severity=Severity.ERROR, path=path, line=index + 1,
                   message="native kernel code is not declared", hint="declare it", submitter=None)


def test_every_format_names_the_rule_set_and_why(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    build_case(CASES / "negative" / "round-readme-names-lenient-round", tree)
    report = run_check(tree)
    assert report.choice.signal == "readme" and report.choice.stricter == "training/v0.7"
    assert json.loads(render_json(report))["ruleset"]["signal"] == "readme"
    sarif = json.loads(render_sarif(report))["runs"][0]["properties"]["ruleset"]
    assert sarif["id"] == "training/v1.0" and "README.md" in sarif["chosen_by"]
    assert sarif["stricter_round_fits"] == "training/v0.7"
    properties = {p.get("name"): p.get("value") for p in ET.fromstring(render_junit(report)).iter("property")}
    assert properties["ruleset.id"] == "training/v1.0" and "README.md" in properties["ruleset.chosen_by"]
    text = render_text(report)
    assert "training/v1.0" in text and "README.md" in text and "training/v0.7" in text


def test_junit_escapes_a_newline_in_a_file_name() -> None:
    junit = render_junit(_report((_finding("a\nPASS: everything.cu"),)))
    assert "a\\x0aPASS: everything.cu" in junit and "\nPASS" not in junit


@pytest.mark.slow
def test_sarif_of_200000_findings_is_linear() -> None:
    """The old renderer took 25 s and 1.44 GB for 200,000 findings (an indented dump of one tree
    of dicts); now each result is encoded alone: about 4 s and 190 MB peak (findings included)."""
    code = ("import re, sys, time; from pathlib import Path; "
            "from tests.compliance.test_report_formats import _report, _finding; "
            "from compliance.report.sarif import render_sarif; "
            "r = _report(tuple(_finding(f'Acme/k{i}.cu', i) for i in range(200_000))); "
            "t = time.perf_counter(); out = render_sarif(r); t = time.perf_counter() - t; "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1); "
            "print(int(hwm) // 1024, round(t, 1), out.count('\"ruleId\"'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120).stdout
    peak_mb, seconds, results = out.split()
    assert int(results) == 200_000
    assert int(peak_mb) < 600 and float(seconds) < 12, out


def test_base_tree_chose_by_manifest_everywhere(tmp_path: Path) -> None:
    report = run_check(BASE)
    assert report.choice.signal == "manifest" and report.choice.stricter is None
    assert json.loads(render_sarif(report))["runs"][0]["properties"]["ruleset"]["id"] == "training/v0.7"


def test_rule_directory_inside_the_tree_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative COMPLIANCE_RULES_PATH (or --rules-dir) into the checked tree could shadow a
    shipped id with the submitter's own levels (issue 40 item 11): exit 2, naming it."""
    from tests.compliance.test_cli import invoke

    tree = tmp_path / "t"
    build_case(CASES / "negative" / "undeclared-triton", tree)
    rules = tree / "rules" / "training"
    rules.mkdir(parents=True)
    (rules / "v0.7.yaml").write_text("id: training/v0.7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COMPLIANCE_RULES_PATH", "t/rules")
    code, _, err = invoke("check", "t")
    assert code == 2 and "t/rules" in err and "inside the checked tree" in err
    monkeypatch.delenv("COMPLIANCE_RULES_PATH")
    code, _, err = invoke("--rules-dir", "t/rules", "check", "t")
    assert code == 2 and "inside the checked tree" in err


def test_unwritable_output_is_exit_2_naming_it(tmp_path: Path) -> None:
    """An --output symlink loop and `> /dev/full` were internal errors (exit 3)."""
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    command = [sys.executable, "-m", "compliance", "check", str(BASE)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    looped = subprocess.run([*command, "--output", str(tmp_path / "a")], capture_output=True, text=True,
                            env=env, timeout=60, check=False)
    assert looped.returncode == 2 and str(tmp_path / "a") in looped.stderr, looped.stderr
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=60,
                                  check=False)
        assert done.returncode == 2 and "/dev/full" in done.stderr, done.stderr


def test_manifest_draft_comments_escape_newline_names(tmp_path: Path) -> None:
    """A kernel file named with a newline was copied raw into the draft's YAML comments."""
    import yaml

    from compliance.draft import draft_manifest, render_draft

    tree = tmp_path / "t"
    build_case(CASES / "negative" / "undeclared-triton", tree)
    impl = tree / "Acme/benchmarks/dlrm/implementations/torch"
    (impl / "kernels" / "evil\nkernels: []\n#.cu").write_text("__global__ void evil(float* x) {}\n")
    text = render_draft(draft_manifest(impl, load_ruleset("training/v0.7")))
    assert all(not line.startswith("kernels: []") for line in text.splitlines()[6:]), text
    assert len(yaml.safe_load(text)["kernels"]) >= 2
