"""The example submission's upstream links verify against fixture repositories built from its sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from compliance.cli.main import cli
from compliance.engine import run_check
from compliance.model import CheckOptions
from compliance.upstream.options import UpstreamOptions
from tests.compliance.treeutil import tree_digest
from tests.upstream.example_upstream import (
    EXAMPLE,
    build_example_upstream,
    example_upstreams,
)

REGENERATE = "python3 -m tests.upstream.example_upstream --write"


@pytest.fixture(scope="module")
def example_mirrors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Manifest URL -> file:// URL of the fixture built for it (checked against the pins)."""
    base = tmp_path_factory.mktemp("example-upstream")
    mirrors = {}
    for index, (url, spec) in enumerate(sorted(example_upstreams().items())):
        commit = build_example_upstream(spec, base / str(index))
        assert spec.pinned == {commit}, (f"the example pins {sorted(spec.pinned)} for {url} but its sources "
                                         f"give {commit}; run `{REGENERATE}`")
        mirrors[url] = (base / str(index)).resolve().as_uri()
    return mirrors


def test_example_declares_upstreams() -> None:
    specs = example_upstreams()
    assert specs, "the example submission declares no upstream repository"
    assert all(url.startswith("https://") for url in specs)


def test_example_verifies_through_git_insteadof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                example_mirrors: dict[str, str]) -> None:
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("".join(f'[url "{mirror}"]\n\tinsteadOf = {url}\n' for url, mirror in example_mirrors.items()))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    before = tree_digest(EXAMPLE)
    result = CliRunner().invoke(cli, ["check", str(EXAMPLE), "--upstream", "--upstream-cache",
                                      str(tmp_path / "cache"), "--format", "json"])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.stdout)["findings"]
    kernels = {f["kernel"] for f in findings if f["rule_id"] == "upstream-verified"}
    declared = {f["kernel"] for f in findings if f["kernel"]}
    assert kernels and kernels == declared
    assert [f for f in findings if f["severity"] == "error"] == []
    assert tree_digest(EXAMPLE) == before


def test_example_verifies_offline_from_a_cache_filled_through_a_mirror(
        tmp_path: Path, example_mirrors: dict[str, str]) -> None:
    online = run_check(EXAMPLE, CheckOptions(upstream=UpstreamOptions(tmp_path / "cache",
                                                                          mirrors=example_mirrors)))
    offline = run_check(EXAMPLE, CheckOptions(upstream=UpstreamOptions(tmp_path / "cache", offline=True)))
    for report in (online, offline):
        assert report.exit_code == 0
        assert {f.rule_id for f in report.findings} == {"upstream-verified"}
