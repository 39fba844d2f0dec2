"""Helpers shared by the command modules: output (stdout, files, devices) and common options."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from compliance.errors import InputError
from compliance.report.safetext import encodable

F = TypeVar("F", bound=Callable[..., Any])

SPECIAL_PREFIXES = ("/dev/", "/proc/")
"""Paths written in place, never replaced (``/dev/stdout``, ``/dev/null``, ``/proc/self/fd/N``)."""


def is_inside(path: Path, root: Path) -> bool:
    """True when ``path`` (resolved) is ``root`` or lies below it."""
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def operator_rules_dirs() -> list[Path]:
    """The rule directories the operator gave the group (``compliance --rules-dir DIR …``), read
    from the running command's root context and passed down explicitly (no module state)."""
    context = click.get_current_context(silent=True)
    if context is None:
        return []
    return list(context.find_root().params.get("rules_dirs") or ())


def echo(text: str, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of text escaped to what the stream's encoding can hold.

    Report text can carry the tree's undecodable file names (lone surrogates) or any
    character of a manifest; a strict UTF-8 (or ASCII) stdout must not crash on them.
    """
    stream = sys.stderr if err else sys.stdout
    click.echo(encodable(text, getattr(stream, "encoding", None) or "utf-8"), err=err, nl=nl)


def emit(text: str, output: Path | None, checked_root: Path | None = None) -> None:
    """Print ``text``, or write it to ``output`` (never inside the checked tree).

    A regular file (or a new one) is written atomically: a temporary file in the same
    directory, given the mode a plain ``open`` would (0666 less the umask, or the
    existing file's mode), then renamed over it. Anything else that exists (a device
    such as /dev/null, a FIFO, /dev/stdout) is opened and written in place.
    """
    if output is None:
        try:
            echo(text, nl=False)
        except BrokenPipeError:
            raise
        except OSError as exc:  # > /dev/full: a write error is the operator's input problem (exit 2)
            raise InputError(f"cannot write the report to standard output: {exc.strerror or exc}",
                             _stdout_name()) from exc
        return
    try:
        inside = checked_root is not None and is_inside(output, checked_root)
    except (OSError, RuntimeError) as exc:  # a symlink loop: RuntimeError from Path.resolve
        raise InputError(f"cannot write the report: {exc}", output) from exc
    if inside:
        raise InputError("refusing to write the report inside the checked tree; choose a path "
                         "outside it", output)
    data = encodable(text).encode("utf-8")
    try:
        existing = os.stat(output)
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise InputError(f"cannot write the report: {exc.strerror or exc}", output) from exc
    try:
        if str(output).startswith(SPECIAL_PREFIXES) or (existing and not stat.S_ISREG(existing.st_mode)):
            _write_in_place(output, data)
        else:
            _write_atomically(output, data, stat.S_IMODE(existing.st_mode) if existing else None)
    except (OSError, RuntimeError) as exc:
        raise InputError(f"cannot write the report: {getattr(exc, 'strerror', None) or exc}", output) from exc


def _stdout_name() -> str:
    """What standard output is (``/dev/full``, a file), for the error message."""
    try:
        return os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}")
    except (OSError, ValueError):
        return "<stdout>"


def _write_in_place(output: Path, data: bytes) -> None:
    with open(output, "wb") as handle:
        handle.write(data)


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_atomically(output: Path, data: bytes, mode: int | None) -> None:
    directory = output.resolve().parent
    if not directory.is_dir():
        raise InputError("output directory does not exist", directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), _default_mode() if mode is None else mode)
            handle.write(data)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


PATH_ARGUMENT = click.argument(
    "path", type=click.Path(exists=True, file_okay=False, dir_okay=True, path_type=Path))
RULES_METAVAR = "NAME|FILE"
"""One spelling for "a shipped rule-set id or a rule file", in every command and argument."""
RULES_OPTION = click.option(
    "--rules", "rules", metavar=RULES_METAVAR,
    help="Rule set id (e.g. training/v0.7) or rule file. Default: the rule-set id the manifests "
         "name (`ruleset:`), else the round detected from the tree (the report says why).")
DIR_TYPE = click.Path(file_okay=False, path_type=Path)
"""A directory option (a cache, a build directory): shown as DIR in every --help."""
UPSTREAM_CACHE_HELP = "Cache directory for upstream repositories (default: the user's cache directory)."


def output_option(what: str) -> Callable[[F], F]:
    """``--output/-o FILE``: where ``what`` (``the report``, ``the draft manifest``) is written."""
    return click.option(
        "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
        help=f"Write {what} to FILE (outside the checked tree) instead of stdout; a device or "
             "FIFO (/dev/stdout, /dev/null) is written in place, a regular file atomically.")


OUTPUT_OPTION = output_option("the report")
