"""Every published round: its own benchmark set checks clean, and the round is detected."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.engine import run_check
from compliance.model import CheckOptions
from compliance.ruleset import list_shipped, load_ruleset
from tests.compliance.roundgen import write_round

ADOPTED = [i for i in list_shipped() if load_ruleset(i).status == "adopted"]


def test_every_published_round_is_shipped() -> None:
    training = ["v0.5", "v0.6", "v0.7", "v1.0", "v1.1", "v2.0", "v2.1", "v3.0", "v3.1", "v4.0",
                "v4.1", "v5.0", "v5.1"]
    inference = ["v0.5", "v0.7", "v1.0", "v1.1", "v2.0", "v2.1", "v3.0", "v3.1", "v4.0", "v4.1",
                 "v5.0", "v5.1"]
    expected = {f"training/{r}" for r in training} | {f"inference/{r}" for r in inference}
    assert expected <= set(ADOPTED)


@pytest.mark.parametrize("ruleset_id", ADOPTED)
def test_round_tree_is_clean_and_detected(ruleset_id: str, tmp_path: Path) -> None:
    ruleset = load_ruleset(ruleset_id)
    tree = write_round(tmp_path / "round", ruleset, submitters=2)
    told = run_check(tree, CheckOptions(rules=ruleset_id))
    assert not told.findings, [f"{f.rule_id} {f.path} {f.message}" for f in told.findings]
    detected = run_check(tree)
    chosen = detected.ruleset
    assert detected.choice.reason.startswith("detected: ")
    assert (chosen.usage, chosen.layout) == (ruleset.usage, ruleset.layout)
    assert set(chosen.benchmarks) == set(ruleset.benchmarks), detected.choice.reason
    if chosen.id != ruleset_id:  # rounds with the same benchmark list: said, not silent
        assert "AMBIGUOUS" in detected.choice.reason and ruleset_id in detected.choice.reason \
            or "rounds" in detected.choice.reason
    assert not detected.findings


def test_a_readme_naming_the_round_settles_it(tmp_path: Path) -> None:
    tree = write_round(tmp_path / "round", load_ruleset("training/v1.1"))
    (tree / "README.md").write_text("# MLPerf™ Training v1.1 Results\n")
    report = run_check(tree)
    assert report.ruleset.id == "training/v1.1"
    assert "README" in report.choice.reason and "AMBIGUOUS" not in report.choice.reason


def test_ambiguity_is_said(tmp_path: Path) -> None:
    tree = write_round(tmp_path / "round", load_ruleset("training/v1.0"))
    reason = run_check(tree).choice.reason
    assert "AMBIGUOUS" in reason and "training/v1.0" in reason and "--rules" in reason


def test_unknown_names_are_named_and_stay_errors(tmp_path: Path) -> None:
    tree = write_round(tmp_path / "round", load_ruleset("training/v5.1"))
    (tree / "Org00" / "results" / "org00_sys" / "warp_drive").mkdir()
    report = run_check(tree)
    assert report.ruleset.id == "training/v5.1"
    assert "fit no round: warp_drive" in report.choice.reason
    assert {f.rule_id for f in report.findings} == {"layout-unknown-benchmark"}
    assert report.exit_code == 1


def test_no_layout_falls_back_to_the_default_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    report = run_check(tmp_path / "empty")
    assert report.choice.reason.startswith("default (no training or inference")
