"""Only the operator picks the rules (issue 23, item 1): a tree names ids, never paths.

Each test is a regression case for one way a submission could choose its own
rules or make the checker read files outside the rule directories.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from compliance.cli.main import cli
from compliance.errors import InputError
from compliance.ruleset import RULES_PATH_ENV, is_ruleset_id, load_ruleset
from tests.compliance.treeutil import BASE, fake_binary

MANIFEST = "Acme/benchmarks/dlrm/implementations/torch/kernel_manifest.yaml"
SECRET = "TOP-SECRET-CONTENT-7f3a"
PERMISSIVE = f"""schema_version: 1
id: training/mine
usage: training
round: mine
status: proposal
title: {SECRET}
provenance: {{decision: none, date: "2020-01-01"}}
layout: training
benchmarks: [dlrm]
binary_policy: {{without_source: "off"}}
allowlist:
  - id: anything
    title: anything
    benchmarks: [dlrm]
    languages: [cuda]
    requires: {{source: false}}
    provenance: {{decision: none, date: "2020-01-01"}}
checks:
  undeclared-kernel: {{level: "off"}}
  layout-unknown-benchmark: {{level: "off"}}
"""


def _hostile_tree(tmp_path: Path, ruleset: str) -> Path:
    """The base tree plus an undeclared kernel, an ELF blob, an unknown category, and
    a manifest naming ``ruleset``."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(BASE, tree)
    impl = tree / "Acme/benchmarks/dlrm/implementations/torch"
    (impl / "hidden.cu").write_text("__global__ void hidden(float* x) { x[0] = 1; }\n")
    (impl / "blob.so").write_bytes(fake_binary("elf-so"))
    (tree / "rules").mkdir()
    (tree / "rules/mine.yaml").write_text(PERMISSIVE)
    text = (impl / "kernel_manifest.yaml").read_text()
    text = text.replace("ruleset: training/v0.7", f"ruleset: {ruleset}")
    (impl / "kernel_manifest.yaml").write_text(text.replace("dlrm-embedding", "anything"))
    return tree


def _check(tree: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [*args, "check", str(tree)])
    return result.exit_code, result.output


def test_a_tree_cannot_name_its_own_rule_file(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    tree = _hostile_tree(tmp_path, "rules/mine.yaml")
    monkeypatch.chdir(tree)  # where a reviewer runs it: the path would resolve here
    code, output = _check(tree)
    assert code == 2, output
    assert f"{MANIFEST}:2:" in output and "'rules/mine.yaml'" in output
    assert "not a rule-set id" in output and SECRET not in output
    # The same tree under the rule set the operator picks fails on all three findings.
    result = CliRunner().invoke(cli, ["check", str(tree), "--rules", "training/v0.7"])
    assert result.exit_code == 1
    for rule in ("undeclared-kernel", "binary-without-source", "kernel-not-allowlisted"):
        assert rule in result.output


def test_an_absolute_path_is_refused_and_never_read(tmp_path: Path) -> None:
    outside = tmp_path / "passwd"
    outside.write_text(f"root:x:0:0:{SECRET}:/root:/bin/bash\n")
    for target in (str(outside), "/etc/passwd"):
        code, output = _check(_hostile_tree(tmp_path / target.replace("/", "_"), target))
        assert code == 2 and "not a rule-set id" in output, output
        assert SECRET not in output and "root:x:0:0" not in output


def test_dot_dot_cannot_leave_the_rule_directories(tmp_path: Path) -> None:
    roots = tmp_path / "site"
    (roots / "training").mkdir(parents=True)
    (tmp_path / "x.yaml").write_text(PERMISSIVE)  # what training/../../x would reach
    code, output = _check(_hostile_tree(tmp_path, "training/../../x"), "--rules-dir", str(roots))
    assert code == 2 and "not a rule-set id" in output, output
    assert SECRET not in output


def test_extends_cannot_reach_outside_the_rule_roots(tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "training").mkdir(parents=True)
    (tmp_path / "evil.yaml").write_text(PERMISSIVE)  # what site/../evil.yaml reaches
    child = root / "training" / "child.yaml"
    child.write_text(PERMISSIVE.replace("id: training/mine", "id: training/child")
                     .replace(f"title: {SECRET}", "title: child") + "extends: ../evil\n")
    with pytest.raises(InputError) as raised:
        load_ruleset("training/child", extra_roots=[root])
    assert "extends" in str(raised.value) and str(child) in str(raised.value)
    assert SECRET not in str(raised.value)


def test_an_unknown_id_is_an_input_error_naming_id_and_manifest(tmp_path: Path) -> None:
    code, output = _check(_hostile_tree(tmp_path, "training/v9.9"))
    assert code == 2
    assert f"{MANIFEST}:2:" in output and "'training/v9.9'" in output
    assert "--rules-dir" in output


def test_operator_directories_add_rule_sets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "training").mkdir(parents=True)
    (site / "training" / "mine.yaml").write_text(PERMISSIVE)
    tree = _hostile_tree(tmp_path, "training/mine")
    assert _check(tree)[0] == 2  # not known until the operator adds the directory
    code, output = _check(tree, "--rules-dir", str(site))
    assert code == 0, output
    monkeypatch.setenv(RULES_PATH_ENV, str(site))
    assert _check(tree)[0] == 0
    listed = CliRunner().invoke(cli, ["rules", "list"]).output
    assert "training/mine" in listed and "training/v5.1" in listed


@given(st.text(max_size=40))
def test_a_valid_id_never_leaves_its_root(text: str) -> None:
    if not is_ruleset_id(text):
        return
    root = Path("/rules-root")
    resolved = (root / f"{text}.yaml").resolve()
    assert resolved.parent.parent == root and len(Path(text).parts) == 2
    assert not text.startswith(("/", ".")) and ".." not in text


@pytest.mark.parametrize("text", ["rules/mine.yaml/x", "/etc/passwd", "training/../../x",
                                  "training/..", "../training/v0.7", "training\\v0.7", "",
                                  "training/v0.7/", "a/b/c", "training/.hidden",
                                  "rules/mine.yaml"])
def test_malformed_ids(text: str) -> None:
    assert not is_ruleset_id(text)


def test_the_stricter_round_is_read_from_the_operators_directories(tmp_path: Path) -> None:
    """The tree names the lenient training/v1.0; the operator's directory holds a stricter round
    that fits it. Its verdict (the ruleset-stricter-round-fits warning) must be computed from that
    directory, like the main verdict: before, the stricter round was loaded from the shipped rules
    alone, so an operator's round was "unknown" (exit 2) and a shadowed shipped id judged by the
    shipped copy."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(BASE, tree)
    impl = tree / "Acme/benchmarks/dlrm/implementations/torch"
    (impl / "hidden.cu").write_text("__global__ void hidden(float* x) { x[0] = 1; }\n")
    manifest = impl / "kernel_manifest.yaml"
    manifest.write_text(manifest.read_text().replace("ruleset: training/v0.7", "ruleset: training/v1.0"))
    site = tmp_path / "site"
    (site / "training").mkdir(parents=True)
    shipped = Path(load_ruleset("training/v0.7").source).read_text()
    strict = shipped.replace("id: training/v0.7", "id: training/site-strict").replace(
        "  kernel-not-allowlisted: {level: error}\n",
        "  kernel-not-allowlisted: {level: error}\n  layout-variant: {level: error}\n"
        "  implementation-fork: {level: error}\n")
    (site / "training" / "site-strict.yaml").write_text(strict)
    result = CliRunner().invoke(cli, ["--rules-dir", str(site), "check", str(tree), "--format", "json"])
    assert result.exit_code == 0, result.output  # v1.0's verdict: the undeclared kernel is a warning
    import json

    report = json.loads(result.stdout)
    assert report["ruleset"]["id"] == "training/v1.0"
    assert report["ruleset"]["stricter_round_fits"] == "training/site-strict"
    stricter = [f for f in report["findings"] if f["rule_id"] == "ruleset-stricter-round-fits"]
    assert len(stricter) == 1 and stricter[0]["details"]["stricter_round"] == "training/site-strict"
    assert stricter[0]["details"]["stricter_errors"] >= 1, stricter[0]["message"]
