"""The GitHub Action (action.yml) and the example workflow: linted by actionlint, and the
action's steps run here by tests/ci/action_runner.py on submitters' repositories."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from .action_runner import ActionError, run_action
from .helpers import REPOSITORY, ROUND, clone_checkout, submitter_repository

ACTION = REPOSITORY / "action.yml"
EXAMPLE = REPOSITORY / "docs" / "examples" / "compliance-workflow.yml"
LINT_CONFIG = REPOSITORY / "docs" / "examples" / "actionlint.yaml"
PLACEHOLDER = "OWNER/mlperf-kernel-compliance@COMMIT"

needs_actionlint = pytest.mark.skipif(shutil.which("actionlint") is None,
                                      reason="needs actionlint (pip install -e '.[dev]')")


def _actionlint(project: Path, *files: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["actionlint", "-no-color", *files], cwd=project, capture_output=True, text=True,
                          check=False, timeout=120)


def _project_using_the_action(tmp_path: Path, workflow: str) -> Path:
    """A repository whose workflow uses this action as a local action (``uses: ./``), so that
    actionlint checks the workflow's inputs against action.yml and parses action.yml itself."""
    project = tmp_path / "project"
    (project / ".github" / "workflows").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    shutil.copy(ACTION, project / "action.yml")
    shutil.copy(LINT_CONFIG, project / ".github" / "actionlint.yaml")
    (project / ".github" / "workflows" / "compliance.yml").write_text(workflow)
    return project


@needs_actionlint
def test_the_example_workflow_and_the_action_pass_actionlint(tmp_path: Path) -> None:
    run = subprocess.run(["actionlint", "-no-color", "-config-file", str(LINT_CONFIG), str(EXAMPLE)],
                         capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    example = EXAMPLE.read_text()
    assert PLACEHOLDER in example
    project = _project_using_the_action(tmp_path, example.replace(PLACEHOLDER, "./"))
    run = _actionlint(project)
    assert run.returncode == 0, run.stdout + run.stderr


@needs_actionlint
def test_actionlint_reads_the_action_metadata(tmp_path: Path) -> None:
    """The lint above can fail: an input action.yml does not declare, and a missing required one."""
    workflow = EXAMPLE.read_text().replace(PLACEHOLDER, "./").replace("rules: training/v0.7", "rulez: x")
    run = _actionlint(_project_using_the_action(tmp_path, workflow))
    assert run.returncode == 1
    assert 'input "rulez" is not defined in action' in run.stdout
    assert 'missing input "rules"' in run.stdout


def test_the_runner_substitutes_inputs_and_conditions(tmp_path: Path) -> None:
    action = tmp_path / "action.yml"
    action.write_text("""
name: t
description: t
inputs:
  word: {description: w, required: true}
  flag: {description: f, default: "false"}
outputs:
  said: {description: s, value: "${{ steps.say.outputs.said }}"}
runs:
  using: composite
  steps:
    - {name: setup, uses: actions/setup-python@v5}
    - name: say
      id: say
      shell: bash
      env: {WORD: "${{ inputs.word }}"}
      run: echo "said=$WORD" >> "$GITHUB_OUTPUT"
    - {name: flagged, if: "inputs.flag == 'true'", shell: bash, run: "exit 3"}
    - {name: fail, shell: bash, run: "exit 4"}
    - {name: after a failure, shell: bash, run: "echo no"}
    - {name: always, if: "always() && steps.say.outputs.said != ''", shell: bash, run: "echo yes"}
""")
    result = run_action(action, {"word": "a b; $(x)"}, tmp_path, tmp_path)
    assert result.outputs == {"said": "a b; $(x)"}  # an input reaches the script as data
    notes = {s.name: (s.ran, s.returncode, s.note) for s in result.steps}
    assert notes["setup"] == (False, 0, "uses: actions/setup-python@v5 (not run here)")
    assert notes["flagged"][0] is False and notes["fail"] == (True, 4, "")
    assert notes["after a failure"][0] is False and notes["always"][:2] == (True, 0)
    with pytest.raises(ActionError, match="required input 'word'"):
        run_action(action, {}, tmp_path, tmp_path)
    with pytest.raises(ActionError, match="do not declare|does not declare"):
        run_action(action, {"word": "x", "nope": "1"}, tmp_path, tmp_path)


@pytest.fixture(scope="module")
def installed_action(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A clone of this checkout (the action's directory) and a PATH whose python is a fresh virtual
    environment (its site-packages see the system's, so pip finds the dependencies installed)."""
    base = tmp_path_factory.mktemp("action")
    clone, _ = clone_checkout(base / "mlperf-kernel-compliance")
    env_dir = base / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if sys.platform == "win32" else "bin")
    return clone / "action.yml", {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"}


def _sarif_rules(path: str) -> list[str]:
    return [r["ruleId"] for r in json.loads(Path(path).read_text())["runs"][0]["results"]]


@pytest.mark.slow
@pytest.mark.parametrize("undeclared", [False, True], ids=["clean", "undeclared-kernel"])
def test_the_action_on_a_submitters_repository(tmp_path: Path, installed_action: tuple[Path, dict[str, str]],
                                              undeclared: bool) -> None:
    action, env = installed_action
    repo = submitter_repository(tmp_path, "Acme", undeclared_kernel=undeclared)
    (repo / "build").mkdir()
    (repo / "build" / "untracked.cu").write_text("__global__ void untracked(float* x) {}\n")  # not judged
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    result = run_action(action, {"rules": ROUND}, repo, temp, env)
    install, check = result.step("Install compliance"), result.step("compliance check")
    assert install.ran and install.returncode == 0, install.output
    assert check.ran and check.returncode == 0, check.output
    assert result.step("Upload SARIF to code scanning").note.startswith("uses: github/codeql-action/upload-sarif")
    assert result.step("compliance verify").note == "condition false"
    assert f"rule set {ROUND} (adopted; --rules)" in result.summary
    verdict = result.step("Verdict")
    if undeclared:
        assert result.outputs["exit-code"] == "1" and verdict.returncode == 1
        assert "scratch.cu" in check.output and "undeclared-kernel" in check.output
        assert _sarif_rules(result.outputs["sarif"]) == ["undeclared-kernel"]
    else:
        assert result.outputs["exit-code"] == "0" and verdict.returncode == 0, check.output
        assert _sarif_rules(result.outputs["sarif"]) == []
