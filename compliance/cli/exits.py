"""Exit codes and the error boundary of every command (below the command modules and the group).

Commands raise ``InputError`` for bad input; ``reports_input_errors`` turns it into a message on
stderr and exit code 2, and any other exception into a one-line message naming the command's
input and where the tool failed, with exit code 3 (no traceback unless ``COMPLIANCE_DEBUG=1``).
Every message starts ``Error:``, as Click's own usage errors do. ``exit_codes_epilog`` writes the
exit-code paragraph that closes each command's ``--help``.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from compliance.cli.common import echo
from compliance.errors import InputError
from compliance.report.safetext import one_line

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL, EXIT_NOT_VERIFIED = 0, 1, 2, 3, 4
EXIT_OUTPUT_CLOSED = 141
"""Standard output was closed by its reader (128 + SIGPIPE, as a shell reports it)."""
DEBUG_VARIABLE = "COMPLIANCE_DEBUG"
"""Set to 1 to get the traceback of an internal error instead of the one-line message."""

ERROR_PREFIX = "Error: "
"""How every error message starts (Click's spelling for usage errors, so there is one style)."""

F = TypeVar("F", bound=Callable[..., Any])

_EVERY_COMMAND = {EXIT_INPUT: "usage or input error",
                  EXIT_INTERNAL: "internal error (a bug in this tool, never a verdict)",
                  EXIT_OUTPUT_CLOSED: "standard output closed by its reader"}
"""What every command may return besides its own codes."""


def exit_codes_epilog(meanings: dict[int, str]) -> str:
    """The ``Exit codes: 0 ..., 1 ...`` paragraph of a command's help: its own codes, then those
    every command shares (2, 3, 141)."""
    codes = {**meanings, **_EVERY_COMMAND}
    return "Exit codes: " + "; ".join(f"{code} {codes[code]}" for code in sorted(codes)) + "."


def reports_input_errors(func: F) -> F:
    """Decorator for command callbacks: ``InputError`` -> stderr + exit 2; any other
    exception (a bug) -> one line naming the input and the failing code + exit 3."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            echo(f"{ERROR_PREFIX}{one_line(str(exc))}", err=True)  # names from the tree: escaped
            raise SystemExit(EXIT_INPUT) from exc
        except BrokenPipeError as exc:
            raise SystemExit(output_closed()) from exc
        except (SystemExit, click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_VARIABLE) == "1":
                raise
            echo(internal_error_message(exc, kwargs), err=True)
            raise SystemExit(EXIT_INTERNAL) from exc

    return wrapper  # type: ignore[return-value]


def output_closed() -> int:
    """The reader of stdout went away (``| head``): not a bug and not a verdict. Later writes,
    the interpreter's final flush included, go to the null device instead of raising again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (a test runner's buffer)
        pass
    finally:
        os.close(devnull)
    return EXIT_OUTPUT_CLOSED


def internal_error_message(exc: BaseException, arguments: dict[str, Any]) -> str:
    """``Error: internal error while processing <path>: <type>: <message> (at <file>:<line>)``."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    subject = next((str(arguments[k]) for k in ("path", "name", "files", "old") if arguments.get(k)), "")
    about = f" while processing {subject}" if subject else ""
    text = one_line(str(exc))[:300]
    return (f"{ERROR_PREFIX}internal error{about}: {type(exc).__name__}: {text}{where}; this is a bug in compliance, "
            f"not a verdict on the input (set {DEBUG_VARIABLE}=1 for the traceback)")
