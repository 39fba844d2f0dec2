"""Round reports a reviewer can read: grouped text, bounded length, kernels traced across submitters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compliance.engine import run_check
from compliance.findings import Finding, Severity
from compliance.inventory import Inventory
from compliance.layout import LayoutMapper, Organization
from compliance.model import CheckOptions, CheckReport, RuleSetChoice
from compliance.report.text import DEFAULT_MAX_LINES, render_text
from compliance.ruleset import load_ruleset
from compliance.rulespecs.registry import all_specs
from compliance.shared_sources import shared_sources
from tests.compliance.test_cli import invoke
from tests.compliance.test_inventory import make
from tests.compliance.treeutil import BASE
from tests.conftest import UpstreamBlobs

ORGS = [f"Org{i:02d}" for i in range(8)]
BENCHMARKS = ["dlrm", "bert", "resnet", "ssd", "maskrcnn"]
V07 = "training/v0.7"
"""The synthetic round fits five training rounds; v0.7 makes undeclared kernels errors."""
KERNELS_PER_IMPL = 25


def kernel(name: str) -> str:
    return f"__global__ void {name}(float* x) {{ x[threadIdx.x] = {len(name)}.f; }}\n"


def synthetic_round(root: Path) -> Path:
    """8 organizations x 5 benchmarks x 2 implementations x 25 undeclared kernels = 2,000 findings."""
    files: dict[str, str | bytes] = {}
    for org in ORGS:
        files[f"{org}/systems/sys.json"] = "{}\n"
        for bench in BENCHMARKS:
            for impl in ("pytorch", "mxnet"):
                base = f"{org}/benchmarks/{bench}/implementations/{impl}"
                files[f"{base}/train.py"] = "print('train')\n"
                files.update({f"{base}/csrc/k{i}.cu": kernel(f"{org}_{bench}_{impl}_{i}")
                              for i in range(KERNELS_PER_IMPL)})
    return make(root, files)


def test_two_thousand_findings_fit_in_two_hundred_lines_and_json_keeps_all(tmp_path: Path) -> None:
    report = run_check(synthetic_round(tmp_path / "round"))
    undeclared = [f for f in report.findings if f.rule_id == "undeclared-kernel"]
    assert len(undeclared) == 2000
    text = render_text(report)
    assert len(text.splitlines()) <= DEFAULT_MAX_LINES
    assert text.splitlines()[-1].startswith("FAIL: ")
    verbose = render_text(report, verbose=True)
    assert sum(1 for line in verbose.splitlines() if "[undeclared-kernel]" in line) == 2000
    assert verbose.count("fix: Declare the kernel") == len(ORGS) * len(BENCHMARKS) * 2
    code, out, _ = invoke("check", "--format", "json", str(tmp_path / "round"))
    assert code == 1 and len(json.loads(out)["findings"]) == len(report.findings)


def test_grouped_text_prints_each_hint_once_per_implementation_and_rule(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    shutil.copytree(BASE, tree)
    impl = "Acme/benchmarks/dlrm/implementations/torch"
    make(tree, {f"{impl}/extra/k{i}.cu": kernel(f"k{i}") for i in range(9)})
    text = render_text(run_check(tree))
    assert text.count("fix: Declare the kernel") == 1
    assert "undeclared-kernel: 9 error(s)" in text and "... and 6 more (--verbose lists them)" in text
    lines = text.splitlines()
    assert lines.index("Acme") < lines.index("  dlrm") < lines.index("    torch: FAIL (9 error(s), 0 warning(s))")


def test_summary_is_one_line_per_organization_and_benchmark(tmp_path: Path) -> None:
    synthetic_round(tmp_path / "round")
    code, out, _ = invoke("check", "--summary", "--rules", V07, str(tmp_path / "round"))
    rows = [line.split() for line in out.splitlines() if line.startswith("Org")]
    benchmark_rows = [r for r in rows if r[2] in BENCHMARKS]
    assert code == 1 and len(benchmark_rows) == len(ORGS) * len(BENCHMARKS)
    assert benchmark_rows[0] == ["Org00", "/", "bert", "FAIL", "50", "0", "50", "0", "0"]
    assert {r[2] for r in rows} - set(BENCHMARKS) == {"(no"}  # layout findings of the org itself
    code, _, err = invoke("check", "--summary", "--rules", V07, "--format", "json", str(tmp_path / "round"))
    assert code == 2 and "--format text" in err


def test_same_kernel_in_two_submitters_modulo_line_endings_is_one_group(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    for org in ("Acme", "Beta"):
        shutil.copytree(BASE / "Acme", tree / org)
    lf = b"// gather\n__global__ void gather_rows(const float* t, float* o) { o[0] = t[0]; }\n"
    make(tree, {"Acme/benchmarks/dlrm/implementations/torch/gather/gather_gpu.cu": lf,
                "Beta/benchmarks/dlrm/implementations/torch/csrc/gather_gpu.cu": lf.replace(b"\n", b"\r\n"),
                "Beta/benchmarks/dlrm/implementations/torch/csrc/copy_of_gather.cu": lf.replace(b"\n", b"\r\n"),
                "Acme/benchmarks/dlrm/implementations/torch/solo/one.cu": kernel("one"),
                "Acme/benchmarks/dlrm/implementations/torch/solo/same_impl.cu": kernel("one")})
    report = run_check(tree)
    groups = shared_sources(report.inventory)
    shared = {g.relation: [f.path for f in g.files] for g in groups}
    acme_emb = "Acme/benchmarks/dlrm/implementations/torch/kernels/emb.cu"
    assert shared["identical"] == [acme_emb, acme_emb.replace("Acme", "Beta")]
    assert shared["identical modulo line endings"] == [
        "Acme/benchmarks/dlrm/implementations/torch/gather/gather_gpu.cu",
        "Beta/benchmarks/dlrm/implementations/torch/csrc/copy_of_gather.cu",
        "Beta/benchmarks/dlrm/implementations/torch/csrc/gather_gpu.cu"]
    assert len(groups) == 2  # one.cu and same_impl.cu sit in one implementation: not a group
    text = render_text(report)
    assert ("    same source: Beta/benchmarks/dlrm/implementations/torch/csrc/gather_gpu.cu "
            "(identical modulo line endings)") in text
    code, out, _ = invoke("check", "--format", "sarif", str(tree))
    assert code == 1 and len(json.loads(out)["runs"][0]["properties"]["shared_sources"]) == 2


def test_the_largest_fixture_round_reads_on_one_report(tmp_path: Path, upstream_blobs: UpstreamBlobs) -> None:
    from tests.compliance.round_fixture import build_round, register_upstream

    register_upstream(upstream_blobs)
    report = run_check(build_round(tmp_path / "round"))
    inv = report.inventory
    undeclared = [f.path for f in report.findings if f.rule_id == "undeclared-kernel"]
    assert len(undeclared) == 1841
    # licence files at NVIDIA's root and at Google's implementation root hide nothing
    assert sum(p.startswith("NVIDIA/benchmarks/gnmt/") for p in undeclared) == 30
    assert sum(p.startswith("Google/benchmarks/dlrm/implementations/tf/") for p in undeclared) == 56
    assert {(f.project, f.location.benchmark, f.location.implementation) for f in inv.forks} == {
        ("hugectr", "dlrm", "hugectr"), ("maskrcnn-benchmark", "maskrcnn", "pytorch")}
    nccl = [t for t in inv.vendored if t.project == "nccl"]
    assert len(nccl) == 4 and all(t.native_files == 12 and t.source_files == 53 for t in nccl)
    assert not any("/nccl/" in p or "/TransformerEngine/" in p for p in undeclared)
    assert any(p.endswith("submodules/rnnt_loss.py") for p in undeclared)
    assert not any(".ninja_deps" in n.path or "/build/" in n.path for n in inv.native)
    # the object file and the module setup.py builds: one build-products-committed per build directory
    assert sum(f.rule_id == "build-products-committed" for f in report.findings) == 6
    text = render_text(report)
    lines = text.splitlines()
    assert len(lines) <= DEFAULT_MAX_LINES
    te = next(i for i, line in enumerate(lines) if "vendored TransformerEngine" in line)
    assert lines[te + 1].startswith("        vendored CUTLASS (https://github.com/NVIDIA/cutlass)")
    assert ("    same source: NVIDIA/benchmarks/dlrm/implementations/hugectr/gather/gather_gpu.cu "
            "(identical modulo line endings)") in lines


def synthetic_report(organizations: int, benchmarks: int, rules: list[str], count: int) -> CheckReport:
    """``count`` findings spread over organizations, benchmarks, 3 implementations and ``rules`` (no tree)."""
    orgs = [Organization(f"Org{i}", (f"Org{i}",), None) for i in range(organizations)]
    findings = []
    for n in range(count):
        org, bench = orgs[n % len(orgs)].name, BENCHMARKS[(n // len(orgs)) % benchmarks]
        path = f"{org}/benchmarks/{bench}/implementations/impl{n % 3}/k{n}.cu"
        findings.append(Finding(rules[n % len(rules)], Severity.ERROR if n % 4 else Severity.WARNING, path,
                                n % 50 or None, "message", "hint", org, bench))
    inv = Inventory(Path("/round"), "training", tuple(orgs), len(findings), (), (), (), (), (), (),
                    mapper=LayoutMapper(orgs, "training"))
    return CheckReport(Path("/round"), RuleSetChoice(load_ruleset("training/v0.7"), "default"),
                       tuple(findings), inv, ("static",))


RULE_IDS = sorted(s.id for s in all_specs())


@st.composite
def synthetic_reports(draw: st.DrawFn) -> CheckReport:
    """Findings spread over random organizations, benchmarks, implementations and rules."""
    return synthetic_report(draw(st.integers(1, 60)), draw(st.integers(1, len(BENCHMARKS))),
                            draw(st.lists(st.sampled_from(RULE_IDS), min_size=1, max_size=6, unique=True)),
                            draw(st.integers(0, 3000)))


def test_the_widest_round_falls_back_to_one_line_per_organization() -> None:
    report = synthetic_report(60, len(BENCHMARKS), RULE_IDS[:6], 3000)
    lines = render_text(report).splitlines()
    assert len(lines) <= DEFAULT_MAX_LINES
    org_lines = [line for line in lines if line.startswith("Org")]
    assert len(org_lines) == 60 and org_lines[0].startswith("Org0: pass (0 error(s), 50 warning(s)): ")
    # every 4th finding is a warning and 60 is a multiple of 4: Org0, Org4, ... have warnings only
    assert "  60 organizations: 15 pass, 45 FAIL (--summary or --verbose lists them)" in lines
    assert lines[-1].startswith("FAIL: 2250 error(s), 750 warning(s) in 60 organization(s);")


@given(synthetic_reports())
@settings(max_examples=40, deadline=None)
def test_default_text_never_exceeds_the_line_budget(report: CheckReport) -> None:
    assert len(render_text(report).splitlines()) <= DEFAULT_MAX_LINES
    assert render_text(report, verbose=True).count(" [") >= len(report.findings)


def test_the_wide_fixture_round_shows_every_cross_organization_group_and_vendored_project(
        tmp_path: Path, upstream_blobs: UpstreamBlobs) -> None:
    """Issue 39 item 6: 34 organizations, 32 groups across organizations, seven vendored projects.
    The old default fell back to a table that hid the vendored names and cut the groups at 3."""
    from tests.compliance.round_fixture import build_round, register_upstream

    register_upstream(upstream_blobs, wide=True)
    report = run_check(build_round(tmp_path / "round", wide=True))
    lines = render_text(report).splitlines()
    text = "\n".join(lines)
    assert len(lines) <= DEFAULT_MAX_LINES
    across = [g for g in shared_sources(report.inventory) if len({f.submitter for f in g.files}) > 1]
    assert len(across) == 32
    assert all(f.path in text for g in across for f in g.files)
    projects = {t.project_name for t in report.inventory.vendored}
    assert len(projects) == 7 and all(f"  {name} (https://github.com/" in text for name in projects)
    # one organization count: the rule-set line, the folded verdicts and the last line agree
    assert "training layout (34 organization(s)" in lines[1]
    assert "  34 organizations: 33 pass, 1 FAIL (--summary or --verbose lists them)" in lines
    assert " in 34 organization(s); " in lines[-1]
    assert sum(line.startswith("Wide") for line in lines) == 28  # one line per organization
    assert any(line.startswith("  NVIDIA/benchmarks/gnmt: ") for line in lines)  # its one error is shown


def _inference_org(tree: Path, division: str) -> dict[str, str | bytes]:
    org = f"{division}/Acme"
    return {f"{org}/systems/sys1.json": "{}\n",
            f"{org}/results/sys1/resnet/Offline/performance/run_1/mlperf_log_summary.txt": "Result is : VALID\n",
            f"{org}/code/resnet/tensorrt/main.py": "print(1)\n",
            f"{org}/code/plugin/nms/nms.cu": kernel(f"nms_{division}"),
            f"{org}/code/harness/lwis/lwis.cpp": "int main() { return 0; }\n"}


def test_inference_shared_code_is_no_benchmark_and_one_organization_in_two_divisions_counts_once(
        tmp_path: Path) -> None:
    tree = make(tmp_path / "round", {**_inference_org(tmp_path, "closed"), **_inference_org(tmp_path, "open")})
    code, out, _ = invoke("check", "--summary", "--rules", "inference/v4.1", str(tree))
    rows = [line.split("  ")[0].strip() for line in out.splitlines() if line.startswith("Acme /")]
    assert code == 0 and rows == ["Acme / (shared code)"]  # was: Acme / harness, Acme / plugin
    report = run_check(tree)
    text = render_text(report)
    assert "  plugin" not in text.splitlines() and "  code/plugin/ (shared code)" in text.splitlines()
    assert " in 1 organization(s); " in text.splitlines()[-1] and "(1 organization(s)" in text.splitlines()[1]


def test_layout_variants_are_one_line_per_organization(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {"Acme/systems/sys.json": "{}\n"}
    for bench in ("bert", "resnet", "ssd", "rnnt", "unet3d"):
        files[f"Acme/benchmarks/{bench}/implementation/train.py"] = "print(1)\n"
        files[f"Acme/results/sys/{bench}/result_0.txt"] = ":::MLLOG {}\n"
    report = run_check(make(tmp_path / "round", files), CheckOptions(rules="training/v3.0"))
    assert sum(f.rule_id == "layout-variant" for f in report.findings) == 5  # JSON keeps each
    lines = render_text(report).splitlines()
    assert [line for line in lines if "layout-variant" in line] == [
        "  layout-variant: 5 warning(s), read as the canonical form: Acme/benchmarks/bert/implementation: "
        "implementation/ is read as an implementation directory instead of implementations/ (canonical: "
        "bert/implementations/<impl>/) (and 4 more; --verbose lists them)"]
    assert sum("[layout-variant]" in line for line in render_text(report, verbose=True).splitlines()) == 5
