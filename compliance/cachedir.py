"""Where the tool keeps what it may reuse between runs: one application directory, one subdirectory per use.

``<user cache>/mlperf-compliance/`` holds ``upstream/`` (bare git caches of
upstream repositories, ``--upstream``), ``verify/`` (kernel builds,
``compliance verify``) and ``scan/`` (what each file of a checked tree held,
``compliance.scan_cache``). The user cache is ``$XDG_CACHE_HOME`` (else
``~/.cache``) on Linux, ``~/Library/Caches`` on macOS and ``%LOCALAPPDATA%``
on Windows. Each subdirectory has its own environment override, and the
command-line options (``--upstream-cache``, ``--build-dir``) win over both.
Nothing here creates a directory: the stage that writes does, outside the
checked tree.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

APPLICATION = "mlperf-compliance"
"""The one directory name under the user's cache directory."""


@dataclass(frozen=True)
class CacheArea:
    """One subdirectory of the application cache and the variable that moves it elsewhere."""

    subdirectory: str
    """Name below ``<user cache>/mlperf-compliance``."""
    override_variable: str
    """Environment variable naming the directory to use instead."""

    def default(self) -> Path:
        """``$<override_variable>`` when set, else ``<user cache>/mlperf-compliance/<subdirectory>``."""
        explicit = os.environ.get(self.override_variable)
        if explicit:
            return Path(explicit).expanduser()
        return user_cache_base() / APPLICATION / self.subdirectory

    def resolve(self, chosen: Path | None) -> Path:
        """The absolute directory to use: ``chosen`` (a command-line option) if given, else the default."""
        return (chosen or self.default()).expanduser().resolve()


UPSTREAM = CacheArea("upstream", "COMPLIANCE_UPSTREAM_CACHE")
"""Bare git caches of upstream repositories (``--upstream``, ``vendored``, ``manifest draft --identify``)."""
VERIFY = CacheArea("verify", "COMPLIANCE_BUILD_DIR")
"""Kernel builds of ``compliance verify`` / ``check --verify`` / the pytest plugin."""


def user_cache_base() -> Path:
    """The platform's per-user cache directory."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
SCAN = CacheArea("scan", "COMPLIANCE_SCAN_CACHE")
"""What the walk found in each file of a checked tree, reused while the file is unchanged
(``compliance check``; ``--no-scan-cache`` turns it off)."""
