"""The report leads with the round's question: custom kernels grouped by category, policy first."""

from __future__ import annotations

import json
from pathlib import Path

from compliance.engine import run_check
from compliance.kernel_groups import kernel_groups
from compliance.model import CheckOptions
from compliance.report.json_report import render_json
from compliance.report.text import DEFAULT_MAX_LINES, render_text
from tests.compliance.test_inventory import make
from tests.compliance.test_round_report import kernel, synthetic_round

V07 = CheckOptions(rules="training/v0.7")
MANIFEST = """manifest_version: 1
ruleset: training/v0.7
kernels:
  - id: emb-sum
    category: dlrm-embedding
    language: cuda
    sources: [kernels/bag.cu]
    entry_symbols: [emb_sum]
    upstream:
      repository: https://github.com/acme/kernels
      commit: 0123456789abcdef0123456789abcdef01234567
      paths: [csrc/bag.cu]
    semantics: {op: embedding_bag, modes: [sum], layouts: [fixed]}
"""


def dlrm_round(root: Path) -> Path:
    """A v0.7-like round: two submitters' embedding gathers, their other DLRM kernels, a bert kernel."""
    files: dict[str, str | bytes] = {}
    for org in ("Nvidia", "Inspur"):
        base = f"{org}/benchmarks/dlrm/implementations/pytorch"
        files[f"{org}/systems/sys.json"] = "{}\n"
        files[f"{base}/src/gather_gpu.cu"] = kernel(f"{org}_gather")
        files[f"{base}/src/dot_based_interact.cu"] = kernel(f"{org}_dot")
        files[f"{org}/benchmarks/bert/implementations/pytorch/csrc/fmha.cu"] = kernel(f"{org}_fmha")
    return make(root, files)


def test_the_dlrm_embedding_kernels_open_the_report_with_organization_path_and_verdict(tmp_path: Path) -> None:
    report = run_check(dlrm_round(tmp_path / "round"), V07)
    lines = render_text(report).splitlines()
    opening = lines.index("custom kernels (6 file(s), 6 FAIL), by category:")
    assert opening == 4  # right after the header
    heading = lines[opening + 1]
    assert heading.startswith("  dlrm-embedding — ") and "decided by the round's policy" in heading
    assert lines[opening + 2:opening + 4] == [
        "    Inspur: Inspur/benchmarks/dlrm/implementations/pytorch/src/gather_gpu.cu: FAIL (undeclared-kernel)",
        "    Nvidia: Nvidia/benchmarks/dlrm/implementations/pytorch/src/gather_gpu.cu: FAIL (undeclared-kernel)"]
    assert lines[opening + 4].startswith("  benchmark:dlrm — other custom kernels in dlrm [not allowlisted")
    assert lines[opening + 7] == ("  benchmark:bert — other custom kernels in bert: 2 file(s), 2 FAIL: "
                                  "Inspur x1, Nvidia x1")


def test_json_carries_the_same_grouping(tmp_path: Path) -> None:
    report = run_check(dlrm_round(tmp_path / "round"), V07)
    groups = json.loads(render_json(report))["custom_kernels"]
    assert [g["category"] for g in groups] == ["dlrm-embedding", "benchmark:dlrm", "benchmark:bert"]
    assert groups == [g.to_dict() for g in kernel_groups(report)]
    first = groups[0]
    assert first["decided_by_policy"] and first["failed"] == 2
    assert {(k["organization"], k["verdict"], k["why"]) for k in first["kernels"]} == {
        ("Inspur", "FAIL", "its path mentions 'gather'"), ("Nvidia", "FAIL", "its path mentions 'gather'")}


def test_a_declared_kernel_is_in_its_declared_category_whatever_its_name(tmp_path: Path) -> None:
    base = "Acme/benchmarks/dlrm/implementations/torch"
    root = make(tmp_path / "round", {"Acme/systems/sys.json": "{}\n", f"{base}/kernel_manifest.yaml": MANIFEST,
                                     f"{base}/kernels/bag.cu": kernel("emb_sum")})
    groups = kernel_groups(run_check(root, V07))
    assert [(g.category, [(k.kernel, k.why) for k in g.kernels]) for g in groups] == [
        ("dlrm-embedding", [("emb-sum", "declared")])]


def test_rounds_without_a_kernel_policy_group_by_benchmark(tmp_path: Path) -> None:
    report = run_check(dlrm_round(tmp_path / "round"), CheckOptions(rules="training/v1.0"))
    groups = kernel_groups(report)
    assert [(g.category, g.decided, g.covered, len(g.kernels)) for g in groups] == [
        ("benchmark:bert", False, False, 2), ("benchmark:dlrm", False, False, 4)]


def test_two_thousand_kernels_keep_the_policy_category_first_within_the_line_budget(tmp_path: Path) -> None:
    root = synthetic_round(tmp_path / "round")
    make(root, {f"Org0{i}/benchmarks/dlrm/implementations/pytorch/csrc/embedding_bag.cu": kernel(f"bag{i}")
                for i in range(8)})
    text = render_text(run_check(root, V07)).splitlines()
    assert len(text) <= DEFAULT_MAX_LINES
    assert text[5].startswith("  dlrm-embedding — ") and text[5].endswith("8 file(s), 8 FAIL")
    assert sum(1 for line in text if line.endswith("embedding_bag.cu: FAIL (undeclared-kernel)")) == 8
