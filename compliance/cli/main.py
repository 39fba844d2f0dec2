"""The ``compliance`` command group.

Exit codes (every command): 0 compliant / nothing wrong, 1 findings at error
level, 2 usage or input errors (bad rule file, missing path, bad option).
"""

from __future__ import annotations

import sys

import click

from compliance import __version__
from compliance.errors import InputError

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT = 0, 1, 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="compliance")
def cli() -> None:
    """Check MLPerf-style submission trees for custom-kernel compliance.

    Exit codes: 0 compliant, 1 error-level findings, 2 usage or input errors.
    """


def _register_commands() -> None:
    # Each command group lives in its own module; importing registers it.
    from compliance.cli import check, inventory, rules  # noqa: F401


def main() -> None:
    """Console-script entry point: maps input errors to exit code 2."""
    _register_commands()
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_INPUT)
    except click.ClickException as exc:  # usage errors: Click's own exit code is 2
        exc.show()
        sys.exit(EXIT_INPUT)
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INPUT)
    sys.exit(EXIT_OK)
