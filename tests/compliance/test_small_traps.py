"""Issue 38's small traps, each a regression test: a broken command module is an internal error
(exit 3), ``--rules-dir`` leaves no state behind, a finding never says "benchmark None", and the
host-overhead tests skip without the kernels extra."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import compliance.cli
from compliance.checks import declarations
from compliance.cli import entry
from compliance.cli.main import cli
from compliance.engine import build_context
from compliance.ruleset import list_shipped
from tests.compliance.treeutil import BASE
from tests.rules.helpers import VALID

REPO = Path(__file__).resolve().parents[2]


def test_a_command_module_that_fails_to_import_is_an_internal_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A fresh load of the command line in which compliance.cli.rules cannot be imported.
    monkeypatch.delitem(sys.modules, "compliance.cli.main")
    monkeypatch.delattr(compliance.cli, "main")
    monkeypatch.delattr(compliance.cli, "rules")
    monkeypatch.setitem(sys.modules, "compliance.cli.rules", None)
    monkeypatch.setattr(sys, "argv", ["compliance", "rules", "list"])
    monkeypatch.delenv("COMPLIANCE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exited:
        entry.main()
    assert exited.value.code == 3
    err = capsys.readouterr().err
    assert err.startswith("Error: internal error while loading the command line: ModuleNotFoundError")
    assert "compliance.cli.rules" in err and "Traceback" not in err and err.count("\n") == 1


def test_rules_dir_is_passed_down_and_leaves_no_state(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(VALID, site)
    with_site = CliRunner().invoke(cli, ["--rules-dir", str(site), "rules", "list"])
    assert with_site.exit_code == 0 and "training/child" in with_site.output
    # Neither the library nor the next command sees the operator's directory any more.
    assert "training/child" not in list_shipped()
    without = CliRunner().invoke(cli, ["rules", "list"])
    assert without.exit_code == 0 and "training/child" not in without.output


def test_a_manifest_in_no_benchmark_is_never_called_benchmark_none() -> None:
    ctx, _ = build_context(BASE, "training/v1.0")  # v1.0 allows no category: every kernel is flagged
    item = next(ctx.kernels())
    nowhere = dataclasses.replace(item, location=dataclasses.replace(item.location, benchmark=None))
    messages = [f.message for f in declarations._allowlist(ctx, nowhere) if f is not None]
    assert messages and all("None" not in m for m in messages), messages
    assert "lies in no benchmark's directory" in messages[0]
    placed = [f.message for f in declarations._allowlist(ctx, item) if f is not None]
    assert "(allowed for benchmark 'dlrm': none)" in placed[0]


@pytest.mark.slow
def test_host_overhead_tests_skip_without_the_kernels_extra() -> None:
    """With the test extra but not kernels (no cuda-bindings), README's test command skips the two
    host-overhead tests instead of failing them (``import cuda`` made to fail in a child run)."""
    code = ("import sys; sys.modules['cuda'] = None; import pytest; "
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-m', '', '-k', 'host_overhead', "
            "'tests/kernels/test_cpu_launch.py']))")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "2 skipped" in run.stdout
