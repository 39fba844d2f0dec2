"""``compliance rules explain``, the generated rule reference and ``rules schema``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from compliance.ruleset import list_shipped, shipped_rules_dir
from compliance.rulespecs.registry import all_specs
from compliance.ruletools.explain import find_spec, render_markdown, render_terminal
from compliance.ruletools.reference import anchor, render_reference
from compliance.ruletools.reference import main as reference_main
from compliance.schema_validation import load_schema
from tests.rules.helpers import REPO, invoke, invoke_json

REFERENCE = REPO / "docs" / "rule-reference.md"
RULE_IDS = [s.id for s in all_specs()]


def test_the_registry_is_not_empty() -> None:
    assert RULE_IDS, "no checks registered: explain and the reference would be empty"


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_explain_exists_for_every_registered_rule(rule_id: str) -> None:
    spec = find_spec(rule_id)
    result = invoke("explain", rule_id)
    assert result.exit_code == 0
    flat = " ".join(result.stdout.split())
    for part in (spec.doc, spec.hint, spec.passing, spec.failing):
        assert part.strip(), f"{rule_id}: empty documentation part"
        assert " ".join(part.strip().splitlines()[0].split()) in flat
    # Plain text for a pipe: no Markdown markup, no escape sequences.
    assert result.stdout.startswith(f"{rule_id}: {spec.title}\n")
    assert f"default level: {spec.default_level}" in result.stdout
    assert not any(mark in result.stdout for mark in ("###", "**", "```", "\x1b"))
    markdown = invoke("explain", rule_id, "--format", "markdown")
    assert markdown.exit_code == 0 and markdown.stdout == render_markdown(spec)


def test_explain_is_styled_for_a_terminal() -> None:
    spec = find_spec("undeclared-kernel")
    styled = render_terminal(spec, styled=True)
    assert "\x1b[1m" in styled and "`" not in styled.split("Passes:")[0]
    plain = render_terminal(spec, styled=False)
    assert click.unstyle(styled).replace("`", "") == plain.replace("`", "")


def test_rules_ids_lists_every_rule_with_its_summary() -> None:
    result = invoke("ids")
    assert result.exit_code == 0
    listed = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert list(listed) == RULE_IDS
    for spec in all_specs():
        assert listed[spec.id].endswith(spec.title) and f" {spec.default_level} " in listed[spec.id]
    doc = invoke_json("ids")
    assert [r["id"] for r in doc["rules"]] == RULE_IDS
    assert "ids" in invoke("--help").stdout


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_explain_json(rule_id: str) -> None:
    doc = invoke_json("explain", rule_id)
    assert doc["schema_version"] == 1 and doc["id"] == rule_id
    assert {"doc", "hint", "passing", "failing", "default_level", "options"} <= set(doc)


def test_unknown_rule_id_is_an_input_error_with_a_suggestion() -> None:
    existing = RULE_IDS[0]
    result = invoke("explain", existing[:-1] + "x")
    assert result.exit_code == 2
    assert f"did you mean {existing}" in result.stderr


def _spec_constants() -> dict[str, str]:
    """Rule id -> ``module.NAME`` of every module-level ``NAME = CheckSpec(...)`` in ``compliance``."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "compliance").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", "") == "CheckSpec"):
                ids = [k.value.value for k in node.value.keywords
                       if k.arg == "id" and isinstance(k.value, ast.Constant)]
                found[str(ids[0])] = f"{path.relative_to(REPO)}:{node.targets[0].id}"  # type: ignore[attr-defined]
    return found


def test_every_spec_constant_is_listed_in_the_registry() -> None:
    """The registry is an explicit list: a spec declared anywhere but not listed there fails here."""
    constants = _spec_constants()
    assert len(constants) >= 50, "the scanner found too few CheckSpec constants"
    assert sorted(set(constants) - set(RULE_IDS)) == []
    assert sorted(set(RULE_IDS) - set(constants)) == []


@pytest.mark.slow  # a fresh interpreter: 4 s
def test_importing_a_check_module_registers_nothing() -> None:
    """Registration is no import side effect: the registry is the same before and after importing
    every compliance module, and it is built only when first asked for."""
    code = (
        "import importlib, pkgutil, compliance\n"
        "from compliance.rulespecs import registry\n"
        "assert registry.registry.cache_info().currsize == 0\n"
        "before = [s.id for s in registry.all_specs()]\n"
        "for m in pkgutil.walk_packages(compliance.__path__, 'compliance.'):\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except ImportError:\n"
        "        pass  # optional extras (torch) absent\n"
        "registry.registry.cache_clear()\n"
        "print(before == [s.id for s in registry.all_specs()], len(before))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert out.stdout.split() == ["True", str(len(RULE_IDS))]


_RULE_ID_ARGUMENT = {"finding": 0, "Finding": 0, "_problem": 0, "_finding": 2}
"""Calls that take a rule id -> its positional index (``_finding(ctx, dk, rule, ...)``)."""


def _literal_rule_ids(tree: ast.AST) -> set[str]:
    """String literals given as a rule id: ``ctx.finding("x", ...)``, ``Finding("x", ...)``,
    ``Finding(rule_id="x")``, ``_finding(ctx, dk, "x", ...)``, ``_problem("x", ...)``,
    ``{"rule": "x"}``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found |= {str(v.value) for k, v in zip(node.keys, node.values, strict=True)
                      if isinstance(k, ast.Constant) and k.value == "rule" and isinstance(v, ast.Constant)}
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        position = _RULE_ID_ARGUMENT.get(name)
        if position is not None and len(node.args) > position and isinstance(node.args[position], ast.Constant):
            found.add(str(node.args[position].value))  # type: ignore[attr-defined]
        found |= {str(k.value.value) for k in node.keywords
                  if k.arg in ("rule_id", "rule") and isinstance(k.value, ast.Constant)}
    return found


def test_no_rule_id_is_passed_as_a_literal() -> None:
    """Rule ids reach findings only through their spec constants (``X.id``): a literal fails, registered or not."""
    literal: dict[str, set[str]] = {}
    for path in (REPO / "compliance").rglob("*.py"):
        for rule_id in _literal_rule_ids(ast.parse(path.read_text(encoding="utf-8"))):
            literal.setdefault(str(path.relative_to(REPO)), set()).add(rule_id)
    assert literal == {}


def test_no_registered_rule_id_is_spelled_out_in_the_code() -> None:
    """Outside the ``id=`` of its ``CheckSpec``, no string in ``compliance`` equals a rule id
    (comparisons, tuples, dict keys use ``X.id`` too, so a renamed id cannot leave a stale copy)."""
    ids, spelled = set(RULE_IDS), []
    for path in (REPO / "compliance").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        spec_ids = {id(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
                    and getattr(node.func, "id", "") == "CheckSpec" for k in node.keywords if k.arg == "id"}
        spelled += [f"{path.relative_to(REPO)}:{n.lineno}: {n.value}" for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and n.value in ids and id(n) not in spec_ids]
    assert spelled == []


def test_rule_id_scanner_sees_every_call_form() -> None:
    tree = ast.parse("ctx.finding('a-b', 'p')\nFinding(rule_id='c-d', path='x')\nctx.finding(X.id)\n"
                     "Finding('e-f', Severity.ERROR, 'p', 'm')\n_finding(ctx, dk, 'g-h', 'm')\n"
                     "_problem('i-j', 'm')\nd = {'rule': 'k-l'}\n_problem(R.id, 'm')")
    assert _literal_rule_ids(tree) == {"a-b", "c-d", "e-f", "g-h", "i-j", "k-l"}


def test_reference_is_up_to_date() -> None:
    assert REFERENCE.is_file(), "run: python -m compliance.ruletools.reference"
    assert REFERENCE.read_text(encoding="utf-8") == render_reference(all_specs()), (
        "docs/rule-reference.md is stale; run: python -m compliance.ruletools.reference")


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_reference_contains_exactly_what_explain_prints(rule_id: str) -> None:
    assert invoke("explain", rule_id, "--format", "markdown").stdout in REFERENCE.read_text(encoding="utf-8")


def test_reference_index_links_resolve_to_headings() -> None:
    text = render_reference(all_specs())
    headings = {anchor(line) for line in text.splitlines() if line.startswith("### ")}
    links = {part.split(")")[0] for part in text.split("](#")[1:]}
    assert links and links <= headings


def test_reference_check_mode(tmp_path: Path) -> None:
    target = tmp_path / "ref.md"
    assert reference_main([str(target), "--check"]) == 1
    assert reference_main([str(target)]) == 0
    assert reference_main([str(target), "--check"]) == 0
    target.write_text(target.read_text() + "edited by hand\n")
    assert reference_main([str(target), "--check"]) == 1


def test_markdown_lists_options_when_a_check_has_some() -> None:
    from compliance.rulespecs.interface import CheckSpec, OptionSpec

    spec = CheckSpec(id="demo", title="Demo", default_level="warning", doc="Finds demos.",
                     hint="Remove the demo.", passing="ok", failing="demo",
                     options=(OptionSpec("max", int, 3, "How many demos are fine."),))
    text = render_markdown(spec)
    assert "| `max` | int | `3` | How many demos are fine. |" in text
    assert "Default level: **warning**" in text


class TestSchema:
    def test_prints_the_rule_file_schema(self) -> None:
        result = invoke("schema")
        assert result.exit_code == 0
        assert json.loads(result.stdout) == load_schema("ruleset")

    def test_prints_the_manifest_schema(self) -> None:
        assert json.loads(invoke("schema", "--manifest").stdout) == load_schema("manifest")

    def test_path_points_at_the_same_schema(self) -> None:
        path = Path(invoke("schema", "--path").stdout.strip())
        assert json.loads(path.read_text(encoding="utf-8")) == load_schema("ruleset")

    @pytest.mark.parametrize("ruleset_id", list_shipped())
    def test_shipped_files_carry_a_working_editor_schema_hint(self, ruleset_id: str) -> None:
        path = shipped_rules_dir() / f"{ruleset_id}.yaml"
        first = path.read_text(encoding="utf-8").splitlines()[0]
        prefix = "# yaml-language-server: $schema="
        assert first.startswith(prefix)
        schema_path = (path.parent / first[len(prefix):]).resolve()
        assert json.loads(schema_path.read_text(encoding="utf-8")) == load_schema("ruleset")
        assert yaml.safe_load(path.read_text(encoding="utf-8"))["schema_version"] == 1
