"""The stage's rule ids are registered like every other check; cache locations are predictable."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from compliance.blobs import blob_hash, diff_summary
from compliance.cachedir import UPSTREAM, VERIFY
from compliance.cli.main import cli
from compliance.rulespecs.registry import all_specs
from compliance.upstream.gitcache import (
    FailureKind,
    cache_key,
    classify,
)

STAGE_IDS = {"upstream-unreachable", "upstream-auth-required", "upstream-cache-corrupt", "upstream-not-cached",
             "upstream-commit-unknown", "upstream-commit-unmerged", "upstream-path-missing",
             "upstream-content-differs", "upstream-verified", "upstream-vendored-differs",
             "upstream-vendored-verified", "upstream-vendored-identified"}


def test_every_stage_id_is_registered_with_docs_and_examples() -> None:
    specs = {s.id: s for s in all_specs() if s.stage == "upstream"}
    assert set(specs) == STAGE_IDS
    assert all(s.doc and s.hint and s.passing and s.failing for s in specs.values())


def test_rules_explain_knows_the_stage_ids() -> None:
    result = CliRunner().invoke(cli, ["rules", "explain", "upstream-commit-unmerged"])
    assert result.exit_code == 0, result.output
    assert "compliance check --upstream" in result.output


def test_default_cache_dir_follows_xdg_and_the_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert UPSTREAM.default() == tmp_path / "xdg" / "mlperf-compliance" / "upstream"
    monkeypatch.setenv("COMPLIANCE_UPSTREAM_CACHE", str(tmp_path / "mine"))
    assert UPSTREAM.default() == tmp_path / "mine"


def test_every_cache_lives_under_one_application_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Upstream caches and verification builds share ``<user cache>/mlperf-compliance``; each keeps its
    override variable, and an explicit option (``--upstream-cache``, ``--build-dir``) wins over both."""
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for variable in ("COMPLIANCE_UPSTREAM_CACHE", "COMPLIANCE_BUILD_DIR"):
        monkeypatch.delenv(variable, raising=False)
    assert {area.default().parent for area in (UPSTREAM, VERIFY)} == {tmp_path / "xdg" / "mlperf-compliance"}
    monkeypatch.setenv("COMPLIANCE_BUILD_DIR", str(tmp_path / "builds"))
    assert VERIFY.default() == tmp_path / "builds"
    assert VERIFY.resolve(tmp_path / "chosen") == (tmp_path / "chosen").resolve()
    monkeypatch.setattr("sys.platform", "darwin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert UPSTREAM.default() == tmp_path / "home" / "Library" / "Caches" / "mlperf-compliance" / "upstream"


def test_cache_key_is_stable_and_ignores_a_git_suffix() -> None:
    key = cache_key("https://github.com/Acme/Kernels")
    assert key == cache_key("https://github.com/acme/kernels.git/")
    assert key.startswith("github.com/acme-kernels-") and key.endswith(".git")
    assert cache_key("https://github.com/acme/kernels") != cache_key("https://gitlab.com/acme/kernels")


def test_blob_hash_matches_git_hash_object() -> None:
    assert blob_hash(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_diff_summary_counts_lines() -> None:
    summary = diff_summary(b"a\nb\nc\n", b"a\nB\nc\nd\n")
    assert (summary.lines_added, summary.lines_removed, summary.first_difference_line) == (2, 1, 2)
    assert diff_summary(b"a \nb\n", b"a\nb\n").only == "whitespace"


@pytest.mark.parametrize(("stderr", "network", "kind"), [
    ("fatal: could not read Username for 'https://github.com': terminal prompts disabled", True, FailureKind.AUTH),
    ("fatal: remote error: upload-pack: not our ref 1111111111111111111111111111111111111111", True,
     FailureKind.NOT_FOUND),
    ("fatal: unable to access 'https://x.invalid/a/b/': Could not resolve host: x.invalid", True,
     FailureKind.UNREACHABLE),
    ("error: inflate: data stream error (incorrect header check)", False, FailureKind.CORRUPT),
    ("fatal: not a git repository: '/cache/x.git'", False, FailureKind.CORRUPT),
])
def test_git_errors_are_classified(stderr: str, network: bool, kind: FailureKind) -> None:
    assert classify(stderr, network) is kind
