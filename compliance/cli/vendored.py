"""``compliance vendored``: the catalogue of copied upstream projects, and which upstream
commit a copy is (a thin layer over ``compliance.vendored_trees`` and
``compliance.upstream.identify``; see docs/upstream.md).

Exit codes of ``identify``: 0 a commit was identified (identical or closest),
1 no commit of the repository shares a file with the copy, 2 usage, input or
git errors (no repository known, unreachable host, nothing cached with
--offline).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from compliance.cli.common import DIR_TYPE, UPSTREAM_CACHE_HELP, echo
from compliance.cli.exits import EXIT_FINDINGS, EXIT_OK, exit_codes_epilog, reports_input_errors
from compliance.errors import InputError
from compliance.report.safetext import one_line
from compliance.vendored_trees import load_catalogue

FORMAT_OPTION = click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
                             show_default=True, help="Output format.")


@click.group("vendored", epilog=exit_codes_epilog({
    EXIT_OK: "success (identify: a commit was identified)", EXIT_FINDINGS: "identify: no commit matches"}))
def vendored() -> None:
    """Upstream projects that submissions copy, and which commit a copy is."""


@vendored.command("catalogue", short_help="The catalogued upstream projects and their signatures.",
                  epilog=exit_codes_epilog({EXIT_OK: "the catalogue was printed"}))
@FORMAT_OPTION
@reports_input_errors
def catalogue_command(fmt: str) -> None:
    """The projects recognised by their signature files (compliance/catalogue/vendored.yaml)."""
    entries = load_catalogue()
    if fmt == "json":
        echo(json.dumps([{"id": e.id, "name": e.name, "repository": e.repository,
                                "signature": list(e.signature), "min_match": e.min_match} for e in entries],
                              indent=2))
        return
    for e in entries:
        need = "" if e.min_match == len(e.signature) else f" ({e.min_match} of them)"
        echo(f"{e.id:<20} {e.name:<20} {e.repository}\n{'':<20} signature: {', '.join(e.signature)}{need}")


@vendored.command("identify", short_help="The upstream commit a copied tree is (or is closest to).",
                  epilog=exit_codes_epilog({EXIT_OK: "a commit was identified (identical or closest)",
                                            EXIT_FINDINGS: "no commit of the repository shares a file with the copy"}))
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--repository", metavar="URL", help="Upstream repository (default: the catalogued project "
              "whose signature PATH holds).")
@click.option("--upstream-path", metavar="REPO_DIR", help="Directory of the repository that PATH mirrors "
              "(default: guessed from where the copy's files live upstream).")
@click.option("--upstream-cache", type=DIR_TYPE, metavar="DIR", help=UPSTREAM_CACHE_HELP)
@click.option("--offline", is_flag=True, help="Use only what the cache holds; never fetch.")
@FORMAT_OPTION
@reports_input_errors
def identify_command(path: Path, repository: str | None, upstream_path: str | None,
                     upstream_cache: Path | None, offline: bool, fmt: str) -> None:
    """Find the upstream commit whose tree best matches the copy at PATH, by git blob hashes.

    Prints "identical to commit X" or "closest commit X with N files modified
    (with their diff sizes), M added, K removed", or that no commit matches.
    The repository's history is indexed once per cache entry.
    """
    from compliance.cachedir import UPSTREAM
    from compliance.upstream.gitcache import GitFailure
    from compliance.upstream.identify import identify
    from compliance.upstream.settings import UpstreamSettings

    settings = UpstreamSettings(UPSTREAM.resolve(upstream_cache), offline)
    try:
        result = identify(path, settings, repository, upstream_path)
    except GitFailure as exc:
        raise InputError(exc.message) from exc
    if fmt == "json":  # ensure_ascii: a lone surrogate (undecodable name) becomes \\udcXX
        echo(json.dumps(result.to_dict(), indent=2))
    else:  # names are the tree's: control characters and escapes never reach the terminal raw
        echo(f"{one_line(str(path))}: {one_line(result.describe())}")
        for m in result.modified:
            echo(f"  modified  {one_line(m.path)}: {m.diff.describe()}")
        for rel in result.added:
            echo(f"  added     {one_line(rel)}")
        for rel in result.removed:
            echo(f"  removed   {one_line(rel)}")
    raise SystemExit(EXIT_OK if result.commit is not None else EXIT_FINDINGS)
