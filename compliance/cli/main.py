"""The ``compliance`` command group.

Exit codes (every command): 0 compliant / nothing wrong, 1 findings at error
level, 2 usage or input errors (bad rule file, missing path, bad option),
3 internal error (a bug in this tool; never a verdict on the tree), 4 not
verified (``compliance verify`` only: a declared kernel could not run on this
machine and nothing else failed; ``--allow-unverified`` accepts that), 141 the
reader of standard output closed it early (``compliance … | head``; the code a
shell gives a process that SIGPIPE ends).
Commands raise ``InputError`` for bad input; ``reports_input_errors`` turns it
into a message on stderr and exit code 2, and any other exception into a
one-line message naming the command's path and where the tool failed, with
exit code 3 (no traceback unless ``COMPLIANCE_DEBUG=1``), so Click's test
runner and the console script behave the same.
"""

from __future__ import annotations

from pathlib import Path

import click

from compliance import __version__
from compliance.cli import check, inventory, manifest, rules, vendored, verify
from compliance.cli.exits import (
    DEBUG_VARIABLE,
    EXIT_FINDINGS,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_OUTPUT_CLOSED,
    internal_error_message,
    output_closed,
    reports_input_errors,
)

__all__ = ["DEBUG_VARIABLE", "EXIT_FINDINGS", "EXIT_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_OUTPUT_CLOSED",
           "cli", "internal_error_message", "main", "reports_input_errors"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="compliance")
@click.option("--rules-dir", "rules_dirs", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Add a directory of rule sets (<DIR>/<usage>/<name>.yaml), searched before "
                   "$COMPLIANCE_RULES_PATH and the shipped ones; repeatable.")
def cli(rules_dirs: tuple[Path, ...]) -> None:
    """Check MLPerf-style submission trees for custom-kernel compliance.

    Exit codes: 0 compliant, 1 error-level findings, 2 usage or input errors,
    3 internal error (a bug in this tool), 4 not verified (verify only), 141 standard
    output closed by its reader.
    """
    # The operator's rule directories stay in this command's context; each command passes them
    # down (compliance.cli.common.operator_rules_dirs). A submission tree names only ids found there.


# Each command lives in its own module, below this one; the group adds them here (a command
# module never imports this one, so there is no circle).
for _command in (check.check_command, inventory.inventory_command, manifest.manifest, rules.rules,
                 vendored.vendored, verify.verify_command):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    try:
        cli.main(prog_name="compliance")
    except BrokenPipeError as exc:  # raised outside a command callback (help text, say)
        raise SystemExit(output_closed()) from exc
