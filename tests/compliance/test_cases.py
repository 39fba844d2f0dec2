"""Acceptance cases as data: positive/<case> must pass, negative/<case> must report its rule ids.

Each case is ``case.yaml`` (description, rules, overlay instructions, expected
rule ids and exit code) plus ``files/`` copied over ``cases/base``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.engine import run_check
from compliance.model import CheckOptions
from tests.compliance.treeutil import CASES, build_case, tree_digest

CASE_DIRS = sorted(p for kind in ("positive", "negative") for p in (CASES / kind).iterdir() if p.is_dir())


@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=[f"{p.parent.name}/{p.name}" for p in CASE_DIRS])
def test_case(case_dir: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    case = build_case(case_dir, tree)
    rules = case.get("rules")
    if rules and rules.endswith(".yaml"):
        rules = str(case_dir / rules)
    before = tree_digest(tree)
    report = run_check(tree, CheckOptions(rules=rules))
    found = {f.rule_id for f in report.findings}
    detail = "\n".join(f"{f.rule_id} {f.location()} {f.message}" for f in report.findings)
    if case_dir.parent.name == "positive":
        assert not report.findings, detail
    else:
        assert set(case["expect"]) <= found, detail
        unexpected = found - set(case["expect"])
        assert not unexpected, f"unexpected rule ids {unexpected}:\n{detail}"
    assert report.exit_code == case["exit_code"], detail
    assert tree_digest(tree) == before, "the check wrote into the tree it checked"


def test_every_static_rule_has_a_negative_case() -> None:
    from compliance.rulespecs.registry import all_specs

    covered = set()
    import yaml

    for case_dir in (CASES / "negative").iterdir():
        covered.update(yaml.safe_load((case_dir / "case.yaml").read_text())["expect"])
    static = {s.id for s in all_specs() if s.stage == "static"}
    assert static - covered == set()
