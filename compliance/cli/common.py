"""Helpers shared by the command modules: output files and common options."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from compliance.errors import InputError


def is_inside(path: Path, root: Path) -> bool:
    """True when ``path`` (resolved) is ``root`` or lies below it."""
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def emit(text: str, output: Path | None, checked_root: Path | None = None) -> None:
    """Print ``text``, or write it atomically to ``output`` (never inside the checked tree)."""
    if output is None:
        click.echo(text, nl=False)
        return
    if checked_root is not None and is_inside(output, checked_root):
        raise InputError("refusing to write the report inside the checked tree; choose a path "
                         "outside it", output)
    directory = output.resolve().parent
    if not directory.is_dir():
        raise InputError("output directory does not exist", directory)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{output.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


PATH_ARGUMENT = click.argument(
    "path", type=click.Path(exists=True, file_okay=False, dir_okay=True, path_type=Path))
RULES_OPTION = click.option(
    "--rules", "rules", metavar="NAME|FILE",
    help="Rule set id (e.g. training/v0.7) or rule file. Default: the rule-set id the manifests "
         "name (`ruleset:`), else the round detected from the tree (the report says why).")
OUTPUT_OPTION = click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to FILE (outside the checked tree) instead of stdout.")
