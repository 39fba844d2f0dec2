"""``compliance manifest``: write a first kernel manifest for an implementation (a thin layer
over ``compliance.draft``).

Exit codes: 0 the draft was printed or written, 2 usage or input errors (a
missing directory, an output path inside the implementation).
"""

from __future__ import annotations

from pathlib import Path

import click

from compliance.cli.common import (
    DIR_TYPE,
    PATH_ARGUMENT,
    RULES_OPTION,
    UPSTREAM_CACHE_HELP,
    echo,
    emit,
    operator_rules_dirs,
    output_option,
)
from compliance.cli.exits import EXIT_OK, exit_codes_epilog, reports_input_errors
from compliance.draft import draft_manifest, render_draft, tree_identifier
from compliance.ruleset import DEFAULT_RULESET, load_ruleset

_EXITS = exit_codes_epilog({EXIT_OK: "the draft was printed or written"})


@click.group("manifest", epilog=_EXITS)
def manifest() -> None:
    """Draft kernel manifests."""


@manifest.command("draft", short_help="A draft kernel_manifest.yaml for an implementation.", epilog=_EXITS)
@PATH_ARGUMENT
@RULES_OPTION
@output_option("the draft kernel_manifest.yaml (YAML, FILL-IN values to replace)")
@click.option("--identify", is_flag=True, help="Fill each catalogued vendored tree's commit with the one "
              "`compliance vendored identify` finds (fetches the upstream unless --offline).")
@click.option("--upstream-cache", type=DIR_TYPE, metavar="DIR", help="With --identify: " + UPSTREAM_CACHE_HELP)
@click.option("--offline", is_flag=True, help="With --identify: use only what the cache holds.")
@reports_input_errors
def draft_command(path: Path, rules: str | None, output: Path | None, identify: bool,
                  upstream_cache: Path | None, offline: bool) -> None:
    """Print a draft kernel_manifest.yaml for the implementation directory PATH.

    One kernel per extension module (setup.py CUDAExtension/CppExtension,
    load_inline/cpp_extension.load, standalone sources with kernel code), with
    sources, entry symbols, language and a guessed category; vendored trees it
    recognises. FILL-IN values mark what only you know (upstream, semantics,
    build): the manifest fails validation until they are replaced. Nothing is
    written into PATH; --output must lie outside it.
    """
    if (upstream_cache or offline) and not identify:
        raise click.UsageError("--upstream-cache and --offline need --identify")
    identifier = tree_identifier(upstream_cache, offline, path) if identify else None
    draft = draft_manifest(path, load_ruleset(rules or DEFAULT_RULESET, operator_rules_dirs()), identifier)
    emit(render_draft(draft), output, checked_root=path)
    if output is not None:
        echo(f"draft written to {output}: {len(draft.kernels)} kernel(s), "
                   f"{len(draft.vendored)} vendored tree(s); fill in the FILL-IN values", err=True)
