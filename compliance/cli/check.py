"""``compliance check``: static checks (plus --upstream / --verify stages when asked)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from compliance.cachedir import SCAN
from compliance.cli.common import (
    DIR_TYPE,
    OUTPUT_OPTION,
    PATH_ARGUMENT,
    RULES_OPTION,
    UPSTREAM_CACHE_HELP,
    echo,
    emit,
    operator_rules_dirs,
)
from compliance.cli.exits import EXIT_FINDINGS, EXIT_OK, exit_codes_epilog, reports_input_errors
from compliance.engine import run_check
from compliance.model import CheckOptions, CheckReport
from compliance.report import FORMATS
from compliance.report.text import render_text
from compliance.tracked import tracked_copy
from compliance.upstream.options import UpstreamOptions
from compliance.verify.options import VerifyOptions


@click.command("check", epilog=exit_codes_epilog({
    EXIT_OK: "compliant (warnings allowed)",
    EXIT_FINDINGS: "error-level findings (with --verify, a kernel not verified here is one: verify-not-run)"}))
@PATH_ARGUMENT
@RULES_OPTION
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), default="text", show_default=True,
              help="Report format.")
@OUTPUT_OPTION
@click.option("--upstream", is_flag=True,
              help="Prove each upstream link with git (fetches; off by default).")
@click.option("--upstream-cache", type=DIR_TYPE, metavar="DIR", help=UPSTREAM_CACHE_HELP)
@click.option("--offline", is_flag=True, help="With --upstream: use only what the cache holds.")
@click.option("--require-upstream", is_flag=True,
              help="For gates: a vendored copy that --upstream has not proven is an error, not a warning.")
@click.option("--verify", is_flag=True,
              help="Also build each declared kernel from source and verify it numerically.")
@click.option("--seed", type=int, metavar="N", help="With --verify: seed for the generated inputs.")
@click.option("--allow-unverified", is_flag=True,
              help="With --verify: a kernel this machine cannot run is a warning (verify-skipped), not the "
                   "error verify-not-run.")
@click.option("--tracked", is_flag=True,
              help="PATH is in a git repository: check the files its index tracks (what a commit submits), "
                   "not the working tree's untracked or ignored files (local build outputs) or .git.")
@click.option("--verbose", "-v", is_flag=True,
              help="Text format: list every finding (default: a few per implementation and rule).")
@click.option("--summary", is_flag=True,
              help="Text format: one line per organization and benchmark (verdict and counts).")
@click.option("--no-scan-cache", is_flag=True,
              help="Read every file again, even one the scan cache holds unchanged (docs/security.md).")
@reports_input_errors
def check_command(path: Path, rules: str | None, fmt: str, output: Path | None, upstream: bool,
                  upstream_cache: Path | None, offline: bool, require_upstream: bool, verify: bool,
                  seed: int | None, allow_unverified: bool, tracked: bool, verbose: bool, summary: bool,
                  no_scan_cache: bool) -> None:
    """Check the submission tree at PATH (one organization or a directory of them)."""
    if (offline or upstream_cache) and not upstream:
        raise click.UsageError("--offline and --upstream-cache need --upstream")
    if (seed is not None or allow_unverified) and not verify:
        raise click.UsageError("--seed and --allow-unverified need --verify")
    if (verbose or summary) and fmt != "text":
        raise click.UsageError("--verbose and --summary apply to --format text (JSON and SARIF keep every finding)")
    options = CheckOptions(rules=rules, rules_dirs=tuple(operator_rules_dirs()),
                           upstream=UpstreamOptions(cache_dir=upstream_cache, offline=offline) if upstream else None,
                           verify=VerifyOptions(seed=seed, allow_unverified=allow_unverified) if verify else None,
                           require_upstream=require_upstream,
                           # a --tracked copy is new each run: nothing in it could be found again
                           scan_cache=None if no_scan_cache or tracked else SCAN.default())
    report = _run(path, options, tracked)
    text = render_text(report, verbose=verbose, summary=summary) if fmt == "text" else FORMATS[fmt](report)
    emit(text, output, checked_root=path)
    if output is not None:
        echo(f"report written to {output}; {'PASS' if report.passed else 'FAIL'}", err=True)
    raise SystemExit(report.exit_code)


def _run(path: Path, options: CheckOptions, tracked: bool) -> CheckReport:
    if not tracked:
        return run_check(path, options)
    with tracked_copy(path) as copy:
        # Findings name paths relative to the root: the report names PATH, the tree the user gave.
        return replace(run_check(copy, options), root=path.resolve())
