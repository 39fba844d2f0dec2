"""Issue 39's patterns as fixture rounds: each ``rounds/<pattern>/`` holds a ``tree/`` and a
``round.yaml`` naming the rule set, the exit code and the verdict of every path a finding can
be about (``rule-id/level`` list; an empty list: no finding there). Every finding must be
about a listed path, so a kernel that vanishes or a new false error both fail the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.engine import run_check
from compliance.model import CheckOptions
from tests.compliance.treeutil import materialise_round, tree_digest

ROUNDS = Path(__file__).parent / "rounds"
PATTERNS = sorted(p for p in ROUNDS.iterdir() if p.is_dir())


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_pattern_round(pattern: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    spec = materialise_round(pattern, tree)
    before = tree_digest(tree)
    report = run_check(tree, CheckOptions(rules=spec["rules"]))
    found: dict[str, list[str]] = {}
    for finding in report.findings:
        found.setdefault(finding.path, []).append(f"{finding.rule_id}/{finding.severity.value}")
    detail = "\n".join(f"{f.rule_id} {f.severity.value} {f.path} {f.message}" for f in report.findings)
    expected = {path: sorted(verdict) for path, verdict in spec["verdicts"].items()}
    assert {p: sorted(v) for p, v in found.items() if p in expected} == {p: v for p, v in expected.items() if v}, detail
    assert set(found) <= set(expected), f"findings about unlisted paths:\n{detail}"
    assert report.exit_code == spec["exit_code"], detail
    assert tree_digest(tree) == before
