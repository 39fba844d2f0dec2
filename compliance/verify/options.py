"""What the user asks of the verification stage (light: importing it loads no torch)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_BUILD_TIMEOUT_S = 1800
"""Seconds a build may take (a CUDA extension with many sources is slow)."""

Progress = Callable[[str], None]
"""Where progress lines go."""


def print_to_stderr(line: str) -> None:
    """The default progress sink: one line on stderr, flushed (a run can take minutes)."""
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class VerifyOptions:
    """Options of the verification stage (``compliance verify``, ``check --verify``, the pytest plugin)."""

    seed: int | None = None
    """Master seed for the generated inputs; None: a fresh one (printed, so a run can be repeated)."""
    build_dir: Path | None = None
    """Where builds go (outside the checked tree); None: ``compliance.cachedir``'s."""
    kernels: tuple[str, ...] = ()
    """Kernel ids to verify; empty: every declared kernel."""
    build_timeout_s: int = DEFAULT_BUILD_TIMEOUT_S
    """Limit for building one kernel."""
    time_limit_s: int | None = None
    """Limit for running one kernel's cases; None: the manifest's ``time_limit_s`` or the default."""
    large: bool = True
    """Include the case with a table of more than 2^31 elements."""
    progress: Progress | None = print_to_stderr
    """Where progress lines go (None: nowhere)."""
    allow_unverified: bool = False
    """Accept kernels this machine cannot run (a verify-skipped warning) instead of failing the run
    (the error verify-not-run; ``compliance verify`` exits 4)."""
