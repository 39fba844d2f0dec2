"""``compliance check``: static checks (plus --upstream / --verify stages when asked)."""

from __future__ import annotations

from pathlib import Path

import click

from compliance.cachedir import SCAN
from compliance.cli.common import OUTPUT_OPTION, PATH_ARGUMENT, RULES_OPTION, echo, emit, operator_rules_dirs
from compliance.cli.exits import reports_input_errors
from compliance.engine import run_check
from compliance.model import CheckOptions
from compliance.report import FORMATS
from compliance.report.text import render_text
from compliance.upstream.options import UpstreamOptions
from compliance.verify.options import VerifyOptions


@click.command("check")
@PATH_ARGUMENT
@RULES_OPTION
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), default="text", show_default=True,
              help="Report format.")
@OUTPUT_OPTION
@click.option("--upstream", is_flag=True,
              help="Prove each upstream link with git (fetches; off by default).")
@click.option("--upstream-cache", type=click.Path(file_okay=False, path_type=Path),
              help="Cache directory for upstream repositories (default: the user's cache directory).")
@click.option("--offline", is_flag=True, help="With --upstream: use only what the cache holds.")
@click.option("--require-upstream", is_flag=True,
              help="For gates: a vendored copy that --upstream has not proven is an error, not a warning.")
@click.option("--verify", is_flag=True,
              help="Also build each declared kernel from source and verify it numerically.")
@click.option("--seed", type=int, help="With --verify: seed for the generated inputs.")
@click.option("--allow-unverified", is_flag=True,
              help="With --verify: a kernel this machine cannot run is a warning (verify-skipped), not the "
                   "error verify-not-run.")
@click.option("--verbose", "-v", is_flag=True,
              help="Text format: list every finding (default: a few per implementation and rule).")
@click.option("--summary", is_flag=True,
              help="Text format: one line per organization and benchmark (verdict and counts).")
@click.option("--no-scan-cache", is_flag=True,
              help="Read every file again, even one the scan cache holds unchanged (docs/checks.md).")
@reports_input_errors
def check_command(path: Path, rules: str | None, fmt: str, output: Path | None, upstream: bool,
                  upstream_cache: Path | None, offline: bool, require_upstream: bool, verify: bool,
                  seed: int | None, allow_unverified: bool, verbose: bool, summary: bool,
                  no_scan_cache: bool) -> None:
    """Check the submission tree at PATH (one organization or a directory of them).

    Exit codes: 0 compliant, 1 error-level findings, 2 usage or input errors.
    """
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
                           scan_cache=None if no_scan_cache else SCAN.default())
    report = run_check(path, options)
    text = render_text(report, verbose=verbose, summary=summary) if fmt == "text" else FORMATS[fmt](report)
    emit(text, output, checked_root=path)
    if output is not None:
        echo(f"report written to {output}; {'PASS' if report.passed else 'FAIL'}", err=True)
    raise SystemExit(report.exit_code)
