"""The CLI: exit codes, formats, output files, no torch on the static path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from compliance.cli.main import cli
from tests.compliance.treeutil import BASE, CASES, build_case, tree_digest

EXAMPLE = Path(__file__).parents[2] / "submissions_example"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_example_submission_passes() -> None:
    before = tree_digest(EXAMPLE)
    code, out, _ = invoke("check", str(EXAMPLE))
    assert code == 0, out
    assert out.strip().splitlines()[-1].startswith("PASS")
    assert "PROPOSAL, not MLPerf policy" in out
    assert tree_digest(EXAMPLE) == before


def test_failing_tree_exits_1_with_path_line_and_hint(tmp_path: Path) -> None:
    build_case(CASES / "negative" / "undeclared-cuda-in-header", tmp_path / "t")
    code, out, _ = invoke("check", str(tmp_path / "t"))
    assert code == 1
    assert "Acme/benchmarks/dlrm/implementations/torch/util/helpers.h:2: error:" in out
    assert "[undeclared-kernel]" in out and "fix: Declare the kernel" in out
    assert out.strip().splitlines()[-1].startswith("FAIL: 1 error(s)")


@pytest.mark.parametrize("args", [["check", "/no/such/dir"], ["check", "{tree}", "--rules", "training/v9"],
                                  ["check", "{tree}", "--format", "xml"], ["check", "{tree}", "--offline"],
                                  ["check", "{tree}", "-o", "{tree}/report.json"]])
def test_usage_and_input_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    shutil.copytree(BASE, tmp_path / "t")
    code, _, err = invoke(*[a.format(tree=tmp_path / "t") for a in args])
    assert code == 2
    assert not (tmp_path / "t" / "report.json").exists()


def test_bad_rule_file_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    rules = tmp_path / "bad.yaml"
    rules.write_text("schema_version: 1\nid: t/x\nusage: training\nround: r\nstatus: adopted\n"
                     "title: t\nprovenance: {decision: x, date: 2020-6-1}\n")
    code, _, err = invoke("check", str(BASE), "--rules", str(rules))
    assert code == 2 and f"{rules}:7:" in err and "provenance.date" in err


def test_json_report(tmp_path: Path) -> None:
    build_case(CASES / "negative" / "upstream-not-pinned", tmp_path / "t")
    out_file = tmp_path / "report.json"
    code, _, _ = invoke("check", str(tmp_path / "t"), "--format", "json", "--output", str(out_file))
    assert code == 1
    doc = json.loads(out_file.read_text())
    assert doc["schema_version"] == 1 and doc["summary"]["passed"] is False
    assert doc["ruleset"]["id"] == "training/v0.7" and "291" in doc["ruleset"]["provenance"]["decision"]
    (finding,) = doc["findings"]
    assert finding["rule_id"] == "upstream-not-pinned" and finding["line"] == 10
    assert finding["submitter"] == "Acme" and finding["benchmark"] == "dlrm"


def test_junit_and_sarif_render_the_same_findings(tmp_path: Path) -> None:
    build_case(CASES / "negative" / "kernel-source-missing", tmp_path / "t")
    code, junit, _ = invoke("check", str(tmp_path / "t"), "--format", "junit")
    failures = [tc.get("name") for tc in ET.fromstring(junit).iter("testcase") if tc.find("failure") is not None]
    assert code == 1 and failures == ["kernel-source-missing"]
    code, sarif, _ = invoke("check", str(tmp_path / "t"), "--format", "sarif")
    results = json.loads(sarif)["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["kernel-source-missing"]


def test_round_directory_summarises_each_organization(tmp_path: Path) -> None:
    shutil.copytree(BASE / "Acme", tmp_path / "round" / "Acme")
    build_case(CASES / "negative" / "kernel-source-empty", tmp_path / "b")
    shutil.copytree(tmp_path / "b" / "Acme", tmp_path / "round" / "Bolt")
    code, out, _ = invoke("check", str(tmp_path / "round"))
    assert code == 1
    assert "  Acme: pass (0 error(s), 0 warning(s))" in out
    assert "  Bolt: FAIL (1 error(s), 0 warning(s))" in out


def test_disagreeing_manifests_are_an_input_error(tmp_path: Path) -> None:
    shutil.copytree(BASE / "Acme", tmp_path / "round" / "Acme")
    shutil.copytree(BASE / "Acme", tmp_path / "round" / "Bolt")
    manifest = tmp_path / "round/Bolt/benchmarks/dlrm/implementations/torch/kernel_manifest.yaml"
    manifest.write_text(manifest.read_text().replace("training/v0.7", "training/v1.0"))
    code, _, err = invoke("check", str(tmp_path / "round"))
    assert code == 2 and "different rule sets" in err
    code, _, _ = invoke("check", str(tmp_path / "round"), "--rules", "training/v0.7")
    assert code == 0


def test_inventory_command(tmp_path: Path) -> None:
    code, out, _ = invoke("inventory", str(EXAMPLE), "--format", "json")
    doc = json.loads(out)
    native = doc["submitters"]["Acme"]["dlrm"]["native"]
    assert code == 0 and {n["path"].rsplit("/", 1)[-1] for n in native} == {"embedding_bag.cu", "binding.cpp"}


def test_static_check_never_imports_torch() -> None:
    code = ("import sys; from pathlib import Path; from compliance.engine import run_check;"
            f"r = run_check(Path({str(EXAMPLE)!r})); assert r.passed;"
            "heavy = [m for m in ('torch', 'cupy', 'cuda', 'git', 'numpy') if m in sys.modules];"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_python_m_compliance_and_console_script_agree() -> None:
    result = subprocess.run([sys.executable, "-m", "compliance", "check", str(EXAMPLE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_inference_layout_with_division_level(tmp_path: Path) -> None:
    rules = tmp_path / "inference.yaml"
    rules.write_text(
        "schema_version: 1\nid: inference/test\nusage: inference\nround: test\nstatus: proposal\n"
        "title: test inference rules\nprovenance: {decision: none, date: '2026-01-01'}\n"
        "layout: inference\ndivisions: [closed, open]\nbenchmarks: [dlrm-v2]\n"
        "allowlist:\n  - id: emb\n    title: t\n    benchmarks: [dlrm-v2]\n    divisions: [open]\n"
        "    languages: [cuda]\n    requires: {source: true}\n"
        "    provenance: {decision: none, date: '2026-01-01'}\n")
    root = tmp_path / "round"
    for division in ("closed", "open"):
        impl = root / division / "Acme" / "code" / "dlrm-v2" / "pt"
        (impl / "k").mkdir(parents=True)
        (impl / "k" / "e.cu").write_text('extern "C" __global__ void e() {}\n')
        (impl / "kernel_manifest.yaml").write_text(
            "manifest_version: 1\nkernels:\n  - id: e\n    category: emb\n    language: cuda\n"
            "    sources: [k/e.cu]\n    entry_symbols: [e]\n    semantics: {op: embedding_bag}\n")
        (root / division / "Acme" / "systems").mkdir()
        (root / division / "Acme" / "systems" / "s.json").write_text("{}")
        (root / division / "Acme" / "results" / "s" / "dlrm-v2").mkdir(parents=True)
    code, out, _ = invoke("check", str(root), "--rules", str(rules), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert [(f["rule_id"], f["path"]) for f in doc["findings"]] == [
        ("kernel-not-allowlisted", "closed/Acme/code/dlrm-v2/pt/kernel_manifest.yaml")]
