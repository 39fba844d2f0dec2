"""``rules diff`` between consecutive rounds reads as a changelog of benchmarks and policy."""

from __future__ import annotations

import itertools

import pytest

from compliance.ruleset import list_shipped, load_ruleset
from compliance.ruletools.diff import diff, render_text

ROUNDS = {usage: sorted((load_ruleset(i) for i in list_shipped()
                         if i.startswith(f"{usage}/") and load_ruleset(i).status == "adopted"),
                        key=lambda rs: tuple(int(x) for x in rs.round[1:].split(".")))
          for usage in ("training", "inference")}
PAIRS = [(a.id, b.id) for rounds in ROUNDS.values() for a, b in itertools.pairwise(rounds)]


@pytest.mark.parametrize(("old", "new"), PAIRS)
def test_consecutive_rounds_diff_as_a_changelog(old: str, new: str) -> None:
    before, after = load_ruleset(old), load_ruleset(new)
    assert after.extends == old  # each round states only what it changes
    result = diff(before, after)
    by_subject = {c.subject: c for c in result.changes if c.area == "round"}
    assert by_subject["round"].fields[0].after == after.round
    gained = set(after.benchmarks) - set(before.benchmarks)
    lost = set(before.benchmarks) - set(after.benchmarks)
    if gained or lost:
        change = by_subject["benchmarks"].fields[0]
        assert (set(change.added), set(change.removed)) == (gained, lost)
    else:
        assert "benchmarks" not in by_subject
    text = render_text(result)
    assert all(f"+{b}" in text for b in gained) and all(f"-{b}" in text for b in lost)
    assert "why: [" in text  # every change names the rule set (and document) behind it


def test_custom_kernel_policy_changes_show_in_the_changelog() -> None:
    text = render_text(diff(load_ruleset("training/v0.6"), load_ruleset("training/v0.7")))
    assert "+ dlrm-embedding" in text and "undeclared-kernel: warning -> error" in text
    text = render_text(diff(load_ruleset("training/v0.7"), load_ruleset("training/v1.0")))
    assert "- dlrm-embedding" in text and "undeclared-kernel: error -> warning" in text
