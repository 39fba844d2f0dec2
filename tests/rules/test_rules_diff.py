"""``compliance rules diff``: golden outputs, self-diffs, provenance per change."""

from __future__ import annotations

import json
import os

import pytest

from compliance.ruleset import list_shipped, load_ruleset
from compliance.ruletools.diff import diff, render_text, to_json
from tests.rules.helpers import GOLDEN, fixture, invoke, normalise

SHIPPED_PAIRS = [("training/v0.7", "training/v1.0"),
                 ("training/v1.0", "training/proposal-custom-kernels"),
                 ("training/v0.7", "training/proposal-custom-kernels"),
                 ("training/v0.6", "training/v0.7"), ("training/v5.0", "training/v5.1"),
                 ("inference/v4.0", "inference/v4.1")]
FIXTURE_PAIRS = [("base", "child"), ("child", "proposal"), ("child", "base")]
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
"""``UPDATE_GOLDEN=1 pytest tests/rules`` rewrites the golden files (review the git diff!)."""


def _name(old: str, new: str) -> str:
    return f"{old.replace('/', '_')}__{new.replace('/', '_')}"


def _golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(actual, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert actual == path.read_text(encoding="utf-8")


def _target(name: str) -> str:
    """A shipped id as is; a bare fixture name as its file."""
    return name if "/" in name else fixture(name)


def _args(old: str, new: str) -> tuple[str, str]:
    return _target(old), _target(new)


@pytest.mark.parametrize(("old", "new"), SHIPPED_PAIRS + FIXTURE_PAIRS)
def test_text_output_matches_golden(old: str, new: str) -> None:
    result = invoke("diff", *_args(old, new))
    assert result.exit_code == 0
    _golden(_name(old, new) + ".txt", normalise(result.stdout))


@pytest.mark.parametrize(("old", "new"), SHIPPED_PAIRS + FIXTURE_PAIRS)
def test_json_output_matches_golden(old: str, new: str) -> None:
    result = invoke("diff", "--format", "json", *_args(old, new))
    assert result.exit_code == 0
    _golden(_name(old, new) + ".json", normalise(result.stdout))


@pytest.mark.parametrize("ruleset_id", [*list_shipped(), "base", "child", "proposal"])
def test_a_round_against_itself_prints_nothing_and_exits_0(ruleset_id: str) -> None:
    target = _target(ruleset_id)
    result = invoke("diff", target, target)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    assert invoke("diff", "--exit-code", target, target).exit_code == 0


def test_self_diff_in_json_has_no_changes() -> None:
    result = invoke("diff", "--format", "json", "training/v0.7", "training/v0.7")
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 1 and doc["changes"] == []


def test_exit_code_flag_reports_differences() -> None:
    assert invoke("diff", "training/v0.7", "training/v1.0").exit_code == 0
    assert invoke("diff", "--exit-code", "training/v0.7", "training/v1.0").exit_code == 1


def test_unknown_rule_set_is_an_input_error() -> None:
    result = invoke("diff", "training/v0.7", "training/v9")
    assert result.exit_code == 2
    assert "unknown rule set 'training/v9'" in result.stderr


class TestCore:
    """The typed result, without Click."""

    def test_v1_0_removes_the_one_time_exception_with_both_decisions(self) -> None:
        result = diff(load_ruleset("training/v0.7"), load_ruleset("training/v1.0"))
        (removed,) = [c for c in result.changes if c.area == "allowlist"]
        assert (removed.kind, removed.subject, removed.why.ruleset) == (
            "removed", "dlrm-embedding", "training/v1.0")
        assert removed.previously is not None
        assert removed.previously.ruleset == "training/v0.7"
        assert removed.previously.provenance.decision.endswith("training_policies/issues/291")

    def test_benchmarks_of_the_round_are_reported_as_set_changes(self) -> None:
        result = diff(load_ruleset("training/v0.7"), load_ruleset("training/v1.0"))
        (bench,) = [c for c in result.changes if c.subject == "benchmarks"]
        (field,) = bench.fields
        assert set(field.added) == {"rnnt", "unet3d"}
        assert set(field.removed) == {"gnmt", "transformer"}

    def test_proposal_status_change_is_reported(self) -> None:
        result = diff(load_ruleset("training/v1.0"),
                      load_ruleset("training/proposal-custom-kernels"))
        (status,) = [c for c in result.changes if c.subject == "status"]
        assert (status.fields[0].before, status.fields[0].after) == ("adopted", "proposal")
        assert "PROPOSAL, not MLPerf policy" in render_text(result)

    def test_changed_entry_lists_requirements_and_tolerances(self) -> None:
        result = diff(load_ruleset(fixture("base")), load_ruleset(fixture("child")))
        (emb,) = [c for c in result.changes if c.subject == "emb"]
        fields = {f.field: f for f in emb.fields}
        assert fields["requires.upstream"].after is True
        assert fields["languages"].added == ("triton",)
        assert fields["verification.reference_ops"].added == ("embedding_bag",)
        assert fields["tolerance.float16.absolute_floor"].after == 0.001
        assert emb.why.provenance.decision == "https://example.org/decisions/4"

    def test_policy_changes_carry_the_provenance_of_the_file_that_set_them(self) -> None:
        result = diff(load_ruleset(fixture("base")), load_ruleset(fixture("child")))
        areas = {(c.area, c.subject): c for c in result.changes}
        hosts = areas[("upstream_policy", "allowed_hosts")]
        assert hosts.fields[0].added == ("gitlab.com",) and hosts.why.ruleset == "training/child"
        assert areas[("vendored", "min_native_files")].fields[0].after == 20
        assert areas[("checks", "vendored-unproven")].fields[0].after == "error"

    def test_reverse_diff_swaps_added_and_removed(self) -> None:
        forward = diff(load_ruleset(fixture("base")), load_ruleset(fixture("child")))
        backward = diff(load_ruleset(fixture("child")), load_ruleset(fixture("base")))
        kinds = {c.subject: c.kind for c in forward.changes if c.area == "allowlist"}
        back = {c.subject: c.kind for c in backward.changes if c.area == "allowlist"}
        assert kinds == {"emb": "changed", "attn": "removed", "conv": "added"}
        assert back == {"emb": "changed", "attn": "added", "conv": "removed"}

    def test_json_is_versioned_and_empty_for_identical_rule_sets(self) -> None:
        same = diff(load_ruleset("training/v1.0"), load_ruleset("training/v1.0"))
        assert same.empty and render_text(same) == ""
        assert to_json(same)["changes"] == [] and to_json(same)["schema_version"] == 1
