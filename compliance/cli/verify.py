"""``compliance verify``: build every declared kernel from its source and compare it with torch."""

from __future__ import annotations

from pathlib import Path

import click

from compliance.cli.common import (
    DIR_TYPE,
    OUTPUT_OPTION,
    PATH_ARGUMENT,
    RULES_OPTION,
    echo,
    emit,
    operator_rules_dirs,
)
from compliance.cli.exits import EXIT_FINDINGS, EXIT_NOT_VERIFIED, EXIT_OK, exit_codes_epilog, reports_input_errors
from compliance.engine import build_context, report_for
from compliance.findings import Severity
from compliance.model import CheckReport
from compliance.report import FORMATS
from compliance.rulespecs.verify import NOT_RUN
from compliance.verify import VerifyStage
from compliance.verify.options import VerifyOptions


@click.command("verify", epilog=exit_codes_epilog({
    EXIT_OK: "every selected kernel verified (warnings allowed)",
    EXIT_FINDINGS: "error-level findings (a kernel failed)",
    EXIT_NOT_VERIFIED: "not verified: a kernel could not run here (no torch, no GPU) and nothing failed; "
                       "--allow-unverified accepts that"}))
@PATH_ARGUMENT
@RULES_OPTION
@click.option("--kernel", "kernels", multiple=True, metavar="ID",
              help="Verify only this kernel id (repeatable). Default: every declared kernel.")
@click.option("--seed", type=int, metavar="N", help="Seed for the generated inputs (default: a fresh one, printed).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Report format.")
@OUTPUT_OPTION
@click.option("--build-dir", type=DIR_TYPE, metavar="DIR",
              help="Where builds go (outside the tree). Default: $COMPLIANCE_BUILD_DIR or "
                   "~/.cache/mlperf-compliance/verify.")
@click.option("--time-limit", "time_limit", type=click.IntRange(1, 36000), metavar="SECONDS",
              help="Time limit for running one kernel's cases (default: the manifest's, else 300).")
@click.option("--build-time-limit", type=click.IntRange(1, 36000), default=1800, show_default=True,
              metavar="SECONDS", help="Time limit for building one kernel.")
@click.option("--no-large-table", is_flag=True,
              help="Skip the case with a table of more than 2^31 elements (it needs 4-8 GiB of address space).")
@click.option("--allow-unverified", is_flag=True,
              help="Accept kernels this machine cannot run (no torch, no GPU): a verify-skipped warning and "
                   "exit 0 instead of exit 4.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@reports_input_errors
def verify_command(path: Path, rules: str | None, kernels: tuple[str, ...], seed: int | None, fmt: str,
                   output: Path | None, build_dir: Path | None, time_limit: int | None,
                   build_time_limit: int, no_large_table: bool, allow_unverified: bool, quiet: bool) -> None:
    """Build each kernel declared under PATH from its sources and verify it against torch.

    Each kernel runs in its own subprocess with a time limit, on fresh random inputs from a
    printed seed, twice per case; the inputs, the reference and the verdict are computed in
    this process, never in the kernel's.
    """
    options = VerifyOptions(seed=seed, build_dir=build_dir, kernels=kernels, build_timeout_s=build_time_limit,
                            time_limit_s=time_limit, large=not no_large_table, allow_unverified=allow_unverified,
                            progress=None if quiet else (lambda line: echo(line, err=True)))
    ctx, choice = build_context(path, rules, tuple(operator_rules_dirs()))
    report = report_for(ctx, choice, [VerifyStage(options)])
    emit(FORMATS[fmt](report), output, checked_root=path)
    code = verify_exit_code(report)
    if output is not None:
        verdict = "NOT VERIFIED" if code == EXIT_NOT_VERIFIED else "PASS" if report.passed else "FAIL"
        echo(f"report written to {output}; {verdict}", err=True)
    raise SystemExit(code)


def verify_exit_code(report: CheckReport) -> int:
    """The report's exit code, except 4 when the only errors say that a kernel was not verified here."""
    errors = {f.rule_id for f in report.findings if f.severity is Severity.ERROR}
    return EXIT_NOT_VERIFIED if errors == {NOT_RUN.id} else report.exit_code
