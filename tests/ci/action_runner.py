"""Runs the ``run:`` steps of a composite GitHub Action (action.yml) here, as GitHub's runner would.

The CI test of action.yml: inputs (with their defaults) and the few contexts the action uses
(``inputs``, ``github.action_path``, ``github.workspace``, ``runner.temp``, ``steps.<id>.outputs``)
are substituted into each step's ``env`` and ``if``; ``run:`` steps run with ``bash --noprofile
--norc -eo pipefail`` in the workspace, with ``$GITHUB_OUTPUT`` and ``$GITHUB_STEP_SUMMARY`` files;
``uses:`` steps (setup-python, the SARIF upload) are recorded, not run. An expression this runner
does not know is an error, so a change to action.yml cannot slip past it unevaluated.

``python -m tests.ci.action_runner action.yml --input rules=training/v0.7 --workspace DIR`` runs it
from the command line.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
COMPARISON = re.compile(r"^(\S+)\s*(==|!=)\s*'([^']*)'$")


class ActionError(Exception):
    """action.yml uses something this runner cannot evaluate, or lacks a required input."""


@dataclass
class StepRun:
    """What one step did."""

    name: str
    ran: bool
    returncode: int = 0
    output: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    note: str = ""


@dataclass
class ActionRun:
    """Every step, the action's outputs and the job summary."""

    steps: list[StepRun]
    outputs: dict[str, str]
    summary: str

    @property
    def failed(self) -> bool:
        return any(s.ran and s.returncode != 0 for s in self.steps)

    def step(self, name: str) -> StepRun:
        return next(s for s in self.steps if s.name == name)


class _Contexts:
    def __init__(self, inputs: dict[str, str], action_path: Path, workspace: Path, temp: Path) -> None:
        self.inputs, self.action_path, self.workspace, self.temp = inputs, action_path, workspace, temp
        self.step_outputs: dict[str, dict[str, str]] = {}
        self.failed = False

    def value(self, name: str) -> str:
        parts = name.split(".")
        if parts[0] == "inputs" and len(parts) == 2 and parts[1] in self.inputs:
            return self.inputs[parts[1]]
        if name == "github.action_path":
            return str(self.action_path)
        if name == "github.workspace":
            return str(self.workspace)
        if name == "runner.temp":
            return str(self.temp)
        if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
            return self.step_outputs.get(parts[1], {}).get(parts[3], "")
        raise ActionError(f"unknown context value {name!r}")

    def substitute(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self.value(m.group(1)), text)

    def condition(self, text: str) -> bool:
        """``always()``, ``success()`` and ``A == 'x'`` / ``A != 'x'`` joined by ``&&``."""
        inner = EXPRESSION.fullmatch(text.strip())
        text = inner.group(1) if inner else text
        always = False
        result = True
        for term in (t.strip() for t in text.split("&&")):
            if term == "always()":
                always = True
                continue
            if term == "success()":
                result = result and not self.failed
                continue
            match = COMPARISON.match(term)
            if match is None:
                raise ActionError(f"unknown condition {term!r}")
            left, op, right = match.groups()
            equal = self.value(left) == right
            result = result and (equal if op == "==" else not equal)
        return result and (always or not self.failed)


def _outputs(file: Path) -> dict[str, str]:
    found = {}
    for line in file.read_text().splitlines():
        if "<<" in line:
            raise ActionError("multi-line outputs (NAME<<EOF) are not supported by this runner")
        if line:
            key, _, value = line.partition("=")
            found[key] = value
    return found


def _inputs(action: dict[str, Any], given: dict[str, str]) -> dict[str, str]:
    declared = action.get("inputs") or {}
    unknown = set(given) - set(declared)
    if unknown:
        raise ActionError(f"inputs action.yml does not declare: {sorted(unknown)}")
    inputs = {}
    for name, spec in declared.items():
        if name in given:
            inputs[name] = given[name]
        elif spec.get("required") and "default" not in spec:
            raise ActionError(f"required input {name!r} not given")
        else:
            inputs[name] = str(spec.get("default", ""))
    return inputs


def run_action(action_file: Path, given: dict[str, str], workspace: Path, temp: Path,
               env: dict[str, str] | None = None) -> ActionRun:
    """Run the composite action of ``action_file`` with the inputs ``given`` in ``workspace``."""
    action = yaml.safe_load(action_file.read_text())
    if action.get("runs", {}).get("using") != "composite":
        raise ActionError("not a composite action")
    ctx = _Contexts(_inputs(action, given), action_file.resolve().parent, workspace, temp)
    summary = temp / "step-summary.md"
    summary.write_text("")
    runs: list[StepRun] = []
    for index, step in enumerate(action["runs"]["steps"]):
        name = step.get("name") or step.get("id") or f"step {index}"
        if not ctx.condition(str(step.get("if", "success()"))):  # no `if`: run while nothing failed
            runs.append(StepRun(name, ran=False, note="condition false"))
            continue
        if "uses" in step:
            runs.append(StepRun(name, ran=False, note=f"uses: {step['uses']} (not run here)"))
            continue
        if step.get("shell") != "bash":
            raise ActionError(f"{name}: only `shell: bash` run steps are supported")
        output_file = temp / f"output-{index}"
        output_file.write_text("")
        step_env = {**os.environ, **(env or {}), "GITHUB_OUTPUT": str(output_file),
                    "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(workspace),
                    "RUNNER_TEMP": str(temp), "GITHUB_ACTION_PATH": str(ctx.action_path)}
        step_env.update({key: ctx.substitute(str(value)) for key, value in (step.get("env") or {}).items()})
        script = temp / f"step-{index}.sh"
        script.write_text(ctx.substitute(step["run"]))
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                              env=step_env, capture_output=True, text=True, check=False)
        outputs = _outputs(output_file)
        if "id" in step:
            ctx.step_outputs[step["id"]] = outputs
        runs.append(StepRun(name, ran=True, returncode=done.returncode, output=done.stdout + done.stderr,
                            outputs=outputs))
        ctx.failed = ctx.failed or done.returncode != 0
    declared = action.get("outputs") or {}
    return ActionRun(runs, {k: ctx.substitute(str(v.get("value", ""))) for k, v in declared.items()},
                     summary.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", type=Path)
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--workspace", type=Path, default=Path.cwd())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        result = run_action(args.action, dict(i.split("=", 1) for i in args.input), args.workspace, Path(temp))
    for step in result.steps:
        print(f"== {step.name}: " + (f"exit {step.returncode}" if step.ran else step.note))
        print(step.output, end="")
    print(f"outputs: {result.outputs}")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
