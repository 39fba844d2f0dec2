"""``compliance rules``: read, check and compare rule sets (a thin layer over
``compliance.ruletools``; see docs/rules.md).

Exit codes: 0 success (``validate``: every file valid; ``diff``: always,
unless ``--exit-code`` and the rule sets differ), 1 ``validate`` found
problems in a file (or ``diff --exit-code`` found differences), 2 usage or
input errors (unknown rule set or rule id, missing file, bad option; for ``show``
and ``diff`` also a rule file that does not load); each command's ``--help``
ends with the codes it can return.
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

import click

from compliance.cli.common import RULES_METAVAR, echo, operator_rules_dirs
from compliance.cli.exits import EXIT_FINDINGS, EXIT_OK, exit_codes_epilog, reports_input_errors
from compliance.ruleset import load_ruleset
from compliance.ruletools import diff as diff_tools
from compliance.ruletools import explain as explain_tools
from compliance.ruletools import listing
from compliance.ruletools import show as show_tools
from compliance.ruletools import validate as validate_tools
from compliance.schema_validation import load_schema, schema_file

FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(["text", "json"]),
                             default="text", show_default=True, help="Output format.")


_PRINTED = exit_codes_epilog({EXIT_OK: "printed"})


def _print_json(document: dict[str, Any]) -> None:
    echo(json.dumps(document, indent=2, sort_keys=False))


@click.group("rules", epilog=exit_codes_epilog({
    EXIT_OK: "success", EXIT_FINDINGS: "validate found errors, or diff --exit-code found differences"}))
def rules() -> None:
    """Read, validate and compare rule sets; list and explain rule ids.

    NAME is a shipped rule-set id (`compliance rules list`), FILE a rule file.
    """


@rules.command("list", short_help="The shipped rule sets, with status and parent.", epilog=_PRINTED)
@FORMAT_OPTION
@reports_input_errors
def list_command(fmt: str) -> None:
    """The shipped rule sets: usage, round, status (adopted/proposal) and parent."""
    infos = listing.list_rulesets(operator_rules_dirs())
    if fmt == "json":
        _print_json(listing.to_json(infos, operator_rules_dirs()))
    else:
        echo(listing.render_text(infos), nl=False)


@rules.command("show", short_help="A rule set after extends, with provenance.", epilog=_PRINTED)
@click.argument("name", metavar=RULES_METAVAR)
@click.option("--origin", is_flag=True, help="Name the rule set each value comes from.")
@FORMAT_OPTION
@reports_input_errors
def show_command(name: str, origin: bool, fmt: str) -> None:
    """A rule set after resolving `extends`, with the provenance of every allowlist entry."""
    view = show_tools.view(load_ruleset(name, operator_rules_dirs()))
    if fmt == "json":
        _print_json(show_tools.to_json(view, with_origin=origin))
    else:
        echo(show_tools.render_text(view, with_origin=origin), nl=False)


@rules.command("validate", short_help="Every error of rule files, at file:line:col.",
               epilog=exit_codes_epilog({EXIT_OK: "every file is valid", EXIT_FINDINGS: "a file has errors"}))
@click.argument("files", nargs=-1, metavar=f"{RULES_METAVAR}...")
@click.option("--shipped", is_flag=True, help="Also validate every shipped rule set.")
@FORMAT_OPTION
@reports_input_errors
def validate_command(files: tuple[str, ...], shipped: bool, fmt: str) -> None:
    """Report every YAML, schema and semantic error of rule files, as file:line:column.

    A FILE that does not exist, or no FILE and no --shipped, is a usage error (exit 2).
    """
    report = validate_tools.validate(files, shipped=shipped, extra_roots=operator_rules_dirs())
    if fmt == "json":
        _print_json(validate_tools.to_json(report))
    else:
        echo(validate_tools.render_text(report), nl=False)
    raise SystemExit(EXIT_OK if report.valid else EXIT_FINDINGS)


@rules.command("diff", short_help="What a round changed, with provenance.",
               epilog=exit_codes_epilog({EXIT_OK: "compared (whether or not they differ, unless --exit-code)",
                                         EXIT_FINDINGS: "with --exit-code: the rule sets differ"}))
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@click.option("--exit-code", "exit_code", is_flag=True,
              help="Exit 1 when the rule sets differ (like `git diff --exit-code`).")
@FORMAT_OPTION
@reports_input_errors
def diff_command(old: str, new: str, exit_code: bool, fmt: str) -> None:
    """What NEW changes relative to OLD: kernel categories, requirements, policies, provenance.

    OLD and NEW are each a NAME or a FILE. Prints nothing (text) when they mean the same.
    """
    result = diff_tools.diff(load_ruleset(old, operator_rules_dirs()), load_ruleset(new, operator_rules_dirs()))
    if fmt == "json":
        _print_json(diff_tools.to_json(result))
    else:
        echo(diff_tools.render_text(result), nl=False)
    raise SystemExit(EXIT_FINDINGS if exit_code and not result.empty else EXIT_OK)


@rules.command("ids", short_help="Every rule id with its one-line summary.", epilog=_PRINTED)
@FORMAT_OPTION
@reports_input_errors
def ids_command(fmt: str) -> None:
    """Every rule id, its default level and its one-line summary (`rules explain ID` says more)."""
    if fmt == "json":
        _print_json(explain_tools.ids_json())
    else:
        echo(explain_tools.ids_text(), nl=False)


@rules.command("explain", short_help="Documentation of a rule id.",
               epilog=exit_codes_epilog({EXIT_OK: "printed (an unknown RULE_ID is exit 2)"}))
@click.argument("rule_id", metavar="RULE_ID")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True,
              help="text: plain (styled when the output is a terminal); markdown: as in docs/rule-reference.md.")
@reports_input_errors
def explain_command(rule_id: str, fmt: str) -> None:
    """What a rule looks for and why, a passing and a failing example, how to fix it.

    `compliance rules ids` lists every RULE_ID.
    """
    spec = explain_tools.find_spec(rule_id)
    if fmt == "json":
        _print_json(explain_tools.to_json(spec))
    elif fmt == "markdown":
        echo(explain_tools.render_markdown(spec), nl=False)
    else:
        terminal = sys.stdout.isatty()
        width = min(shutil.get_terminal_size().columns, 100) - 2 if terminal else 88
        echo(explain_tools.render_terminal(spec, styled=terminal, width=width), nl=False)


@rules.command("schema", short_help="The JSON Schema of rule files or manifests.", epilog=_PRINTED)
@click.option("--manifest", is_flag=True, help="The kernel-manifest schema instead.")
@click.option("--path", "as_path", is_flag=True,
              help="Print where the schema file is installed instead of its content.")
@reports_input_errors
def schema_command(manifest: bool, as_path: bool) -> None:
    """Print the JSON Schema of rule files (or of kernel manifests) for editors and CI.

    Save it and point your editor at it with a first line such as
    `# yaml-language-server: $schema=ruleset.schema.json` (see docs/rules.md).
    """
    name = "manifest" if manifest else "ruleset"
    if as_path:
        echo(schema_file(name))
    else:
        _print_json(load_schema(name))
