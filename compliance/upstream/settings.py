"""How the ``--upstream`` stage and ``vendored identify`` may use git: the cache, offline mode,
time limits, mirrors. Below the stage and the identification modules that all take it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compliance.upstream.gitcache import LOCAL_TIMEOUT_S, CachedRepository, GitRunner, cache_key
from compliance.upstream.options import NETWORK_TIMEOUT_S


@dataclass(frozen=True)
class UpstreamSettings:
    """How the stage may use git."""

    cache_dir: Path
    """Root of the cache (one bare repository per upstream URL below it)."""
    offline: bool = False
    """Use only what the cache holds; never fetch."""
    network_timeout_s: float = NETWORK_TIMEOUT_S
    """Limit for each fetch."""
    local_timeout_s: float = LOCAL_TIMEOUT_S
    """Limit for each git operation on the cache."""
    mirrors: Mapping[str, str] = field(default_factory=dict)
    """Manifest URL -> URL or path to fetch it from instead (cache entries keep the manifest URL)."""

    def repository(self, url: str) -> CachedRepository:
        """The cache entry for ``url``."""
        runner = GitRunner(self.cache_dir / cache_key(url), self.network_timeout_s, self.local_timeout_s)
        return CachedRepository(url, self.mirrors.get(url, url), runner)
