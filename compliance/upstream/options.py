"""What the user asks of the ``--upstream`` stage (light: importing it loads no git code)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

NETWORK_TIMEOUT_S = 120.0
"""Default limit for a fetch."""


@dataclass(frozen=True)
class UpstreamOptions:
    """Options of the upstream stage (``compliance check --upstream``)."""

    cache_dir: Path | None = None
    """Cache directory for upstream clones (``--upstream-cache``); None: ``compliance.cachedir``'s."""
    offline: bool = False
    """Use only what the upstream cache holds; never fetch (``--offline``)."""
    network_timeout_s: float = NETWORK_TIMEOUT_S
    """Limit for each fetch."""
    mirrors: Mapping[str, str] = field(default_factory=dict)
    """Manifest URL -> URL or path to fetch it from instead (tests and air-gapped mirrors)."""
