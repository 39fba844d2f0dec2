"""``compliance inventory``: what the tree contains, per submitter and benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import click

from compliance.cli.common import PATH_ARGUMENT, RULES_OPTION, emit, operator_rules_dirs, output_option
from compliance.cli.exits import EXIT_OK, exit_codes_epilog, reports_input_errors
from compliance.engine import build_context
from compliance.inventory_report import inventory_dict, inventory_text


@click.command("inventory", epilog=exit_codes_epilog({EXIT_OK: "the inventory was printed or written"}))
@PATH_ARGUMENT
@RULES_OPTION
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@output_option("the inventory")
@reports_input_errors
def inventory_command(path: Path, rules: str | None, fmt: str, output: Path | None) -> None:
    """List native kernel code, binaries, manifests, vendored trees and links under PATH."""
    ctx, _ = build_context(path, rules, tuple(operator_rules_dirs()))
    text = json.dumps(inventory_dict(ctx.inventory), indent=2) + "\n" if fmt == "json" \
        else inventory_text(ctx.inventory)
    emit(text, output, checked_root=path)
