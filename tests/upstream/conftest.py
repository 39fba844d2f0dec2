"""Fixtures for the upstream tests: local upstream repositories and a git setup isolated from the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from compliance.engine import run_check
from compliance.model import CheckOptions, CheckReport
from compliance.upstream.options import NETWORK_TIMEOUT_S, UpstreamOptions
from tests.upstream.repos import (
    KernelUpstream,
    build_kernel_upstream,
    build_vendored_upstream,
)
from tests.upstream.trees import RULES

VENDORED_FILES = 3000
"""Files in the synthetic vendored framework."""


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No user or system git configuration (insteadOf, credential helpers) leaks into a test."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("COMPLIANCE_UPSTREAM_CACHE", raising=False)
    yield


@pytest.fixture(scope="session")
def kernel_upstream(tmp_path_factory: pytest.TempPathFactory) -> KernelUpstream:
    """The standard upstream repository (built once; tests only read it)."""
    return build_kernel_upstream(tmp_path_factory.mktemp("upstream") / "kernels")


@pytest.fixture(scope="session")
def vendored_upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(file:// URL, commit) of a framework with VENDORED_FILES .cu files under csrc/."""
    return build_vendored_upstream(tmp_path_factory.mktemp("upstream") / "framework", VENDORED_FILES)


def check(tree: Path, cache: Path, *, offline: bool = False, network_timeout_s: float = NETWORK_TIMEOUT_S,
          mirrors: dict[str, str] | None = None) -> CheckReport:
    """``compliance check --upstream`` on ``tree`` with the local-upstream rule set."""
    upstream = UpstreamOptions(cache, offline, network_timeout_s, mirrors or {})
    return run_check(tree, CheckOptions(rules=str(RULES), upstream=upstream))


def upstream_ids(report: CheckReport) -> list[str]:
    """Rule ids of the findings the upstream stage (or the upstream-link checks) produced."""
    return sorted(f.rule_id for f in report.findings if f.rule_id.startswith("upstream-"))
