"""The console script and ``python -m compliance``: load the command line, then run it.

A command module that fails to import is a bug in this tool like any other: the documented
internal error (one line on stderr, exit 3), never a command that silently goes missing
("No such command", exit 2). ``compliance.cli.main`` imports every command module at its top,
so loading it is where such a failure shows.
"""

from __future__ import annotations

import os

from compliance.cli.common import echo
from compliance.cli.exits import DEBUG_VARIABLE, ERROR_PREFIX, EXIT_INTERNAL
from compliance.report.safetext import one_line


def main() -> None:
    """Console-script entry point."""
    try:
        # Not at module level: this import is what the handler below guards (no circle: entry is above main).
        from compliance.cli import main as command_line
    except Exception as exc:
        if os.environ.get(DEBUG_VARIABLE) == "1":
            raise
        echo(f"{ERROR_PREFIX}internal error while loading the command line: {type(exc).__name__}: "
             f"{one_line(str(exc))[:300]}; "
             f"this is a bug in compliance, not a verdict on the input (set {DEBUG_VARIABLE}=1 for the traceback)",
             err=True)
        raise SystemExit(EXIT_INTERNAL) from exc
    command_line.main()
