"""``compliance rules validate``: shipped files valid, one negative fixture per error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compliance.errors import InputError, InputErrors
from compliance.ruleset import list_shipped, load_ruleset, ruleset_problems
from compliance.ruletools.validate import expected_shape, render_text, to_json, validate
from compliance.schema_validation import load_schema
from tests.rules.helpers import INVALID, VALID, fixture, invoke, invoke_json

CASES = sorted(p.name for p in INVALID.iterdir() if (p / "expected.yaml").is_file())


def _expected(case: str) -> tuple[Path, list[dict[str, object]]]:
    spec = yaml.safe_load((INVALID / case / "expected.yaml").read_text(encoding="utf-8"))
    return INVALID / case / spec["validate"], spec["problems"]


@pytest.mark.parametrize("ruleset_id", list_shipped())
def test_every_shipped_rule_set_validates(ruleset_id: str) -> None:
    report = validate([ruleset_id])
    assert report.valid, render_text(report)


@pytest.mark.parametrize("name", ["base", "child", "proposal"])
def test_valid_fixtures_validate(name: str) -> None:
    assert validate([fixture(name)]).valid


def test_there_is_a_negative_fixture_per_semantic_error() -> None:
    required = {"duplicate-allowlist-id", "unknown-benchmark", "unknown-reference-op",
                "extends-cycle", "extends-missing-parent", "entry-without-provenance",
                "entry-provenance-not-a-link"}
    assert required <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_negative_fixture_reports_exactly_its_problems(case: str) -> None:
    target, expected = _expected(case)
    result = validate([str(target)]).files[0]
    assert not result.valid
    got = [(str(Path(p.path).resolve().relative_to((INVALID / case).resolve())), p.line, p.column,
            p.kind) for p in result.problems]
    assert got == [(e["file"], e["line"], e["column"], e["kind"]) for e in expected]
    for problem, want in zip(result.problems, expected, strict=True):
        assert str(want["message"]) in problem.message
        if "expected" in want:
            assert problem.expected is not None and str(want["expected"]) in problem.expected


@pytest.mark.parametrize("case", CASES)
def test_loader_rejects_every_negative_fixture(case: str) -> None:
    """`compliance check` (load_ruleset) refuses what `rules validate` rejects."""
    target, expected = _expected(case)
    with pytest.raises(InputError) as caught:
        load_ruleset(target)
    errors = caught.value.errors if isinstance(caught.value, InputErrors) else [caught.value]
    assert str(expected[0]["message"]) in "\n".join(e.message for e in errors)


def test_semantic_errors_are_all_reported_at_once() -> None:
    problems = ruleset_problems(INVALID / "several-errors-at-once" / "training" / "x.yaml")
    assert len(problems) == 4
    assert len({p.line for p in problems}) == 4


def test_schema_errors_say_what_shape_is_expected() -> None:
    result = validate([str(INVALID / "schema-wrong-shapes" / "training" / "x.yaml")]).files[0]
    by_line = {p.line: p for p in result.problems}
    assert by_line[9].expected is not None and by_line[9].expected.startswith("a non-empty list")
    assert by_line[15].expected == "a boolean"


def test_expected_shape_resolves_references() -> None:
    root = load_schema("ruleset")
    shape = expected_shape({"$ref": "#/$defs/provenance"}, root)
    assert shape.startswith("a mapping with keys decision, date (optional: round, body, note, documents)")


def test_text_report_names_file_line_column_and_summarises() -> None:
    target = INVALID / "duplicate-allowlist-id" / "training" / "x.yaml"
    text = render_text(validate([str(target), fixture("base")]))
    assert f"{target}:17:9: semantic error: duplicate allowlist id 'emb'" in text
    assert f"{fixture('base')}: ok" in text
    assert text.splitlines()[-1] == "2 rule files: 1 with errors (1 problem)"


def test_json_report() -> None:
    target = str(INVALID / "unknown-benchmark" / "training" / "x.yaml")
    doc = to_json(validate([target]))
    assert doc["schema_version"] == 1 and doc["valid"] is False
    (problem,) = doc["files"][0]["problems"]
    assert (problem["line"], problem["column"], problem["kind"]) == (12, 17, "semantic")


class TestCli:
    """Exit codes: 0 all valid, 1 a file has errors, 2 usage errors."""

    def test_valid_files_exit_0(self) -> None:
        result = invoke("validate", fixture("base"), "training/v0.7")
        assert result.exit_code == 0, result.output
        assert result.stdout.endswith("2 rule files: all valid\n")

    def test_shipped_flag_validates_every_shipped_rule_set(self) -> None:
        result = invoke("validate", "--shipped")
        assert result.exit_code == 0
        assert result.stdout.count(": ok\n") == len(list_shipped())

    def test_a_file_with_errors_exits_1(self) -> None:
        bad = str(INVALID / "extends-cycle" / "training" / "a.yaml")
        result = invoke("validate", fixture("base"), bad)
        assert result.exit_code == 1
        assert f"{bad}:3:10: semantic error: extends cycle" in result.stdout

    def test_missing_file_is_a_usage_error(self) -> None:
        result = invoke("validate", fixture("base"), "no/such/file.yaml")
        assert result.exit_code == 2
        assert "no/such/file.yaml: rule file not found" in result.stderr
        assert result.stdout == ""

    def test_no_file_is_a_usage_error(self) -> None:
        result = invoke("validate")
        assert result.exit_code == 2
        assert "nothing to validate" in result.stderr

    def test_json_output_and_exit_code(self) -> None:
        doc = invoke_json("validate", str(INVALID / "no-layout" / "training" / "x.yaml"))
        assert doc["schema_version"] == 1 and doc["valid"] is False
        result = invoke("validate", "--format", "json", str(VALID / "training" / "base.yaml"))
        assert result.exit_code == 0


def test_inherited_entry_error_points_at_the_child_and_names_the_parent_entry() -> None:
    case = INVALID / "inherited-entry-unknown-benchmark" / "training"
    (problem,) = validate([str(case / "x.yaml")]).files[0].problems
    assert problem.message.startswith("inherited allowlist entry 'seq' (defined at ")
    assert f"{case / 'base.yaml'}:11:5" in problem.message or "base.yaml:11:5" in problem.message
    assert validate([str(case / "base.yaml")]).valid


def test_rule_files_and_manifests_know_the_same_reference_ops() -> None:
    """An op a rule set may require must be one a manifest can claim, and vice versa."""
    rules = load_schema("ruleset")["$defs"]["verification_requirement"]
    manifest = load_schema("manifest")["$defs"]["semantics"]["properties"]["op"]
    assert set(rules["properties"]["reference_ops"]["items"]["enum"]) == set(manifest["enum"])
