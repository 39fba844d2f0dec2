"""Every module of the kernel lab (benchmarks/) imports on a machine without a GPU, runs nothing
at import, has a main() (or its command names another function), and reaches reference_kernels
through public names only."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "benchmarks"
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts)
    for path in LAB.rglob("*.py") if path.name not in ("__init__.py", "__main__.py"))


def test_the_lab_has_the_suite_experiments_and_speed_checks() -> None:
    assert "benchmarks.harness" in MODULES
    assert {m.rsplit(".", 1)[0] for m in MODULES} == {"benchmarks", "benchmarks.experiments", "benchmarks.compliance"}
    assert len(MODULES) >= 10


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_without_running_and_has_a_main(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from benchmarks.__main__ import commands

    importlib.import_module(module)
    # its command's entry: its main(), or the function its command names (training_dlrm: the
    # training suite's main_dlrm_alone, which runs the suite with that case alone)
    target = commands().get(module.rsplit(".", 1)[1], module)
    module_name, _, function = target.partition(":")
    entry = getattr(importlib.import_module(module_name), function or "main", None)
    assert callable(entry), f"{module} has no main() and its command names no function"
    assert capsys.readouterr().out == "", f"{module} printed at import: it runs something"


@pytest.mark.parametrize("module", MODULES)
def test_module_uses_only_public_names_of_reference_kernels(module: str) -> None:
    text = (ROOT / Path(*module.split("."))).with_suffix(".py").read_text()
    tree = ast.parse(text)
    private = re.findall(r"\b(?:rk|reference_kernels)\._(?!_)\w+", text)  # dunders are public
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("reference_kernels"):
            names = [node.module, *(alias.name for alias in node.names)]
            private += [n for n in names if any(part.startswith("_") for part in n.split("."))]
        elif isinstance(node, ast.Import):
            private += [a.name for a in node.names
                        if a.name.startswith("reference_kernels") and "._" in a.name]
    assert not private, f"{module} imports private parts of reference_kernels: {private}"


@pytest.mark.slow  # imports every lab module: 6 s
def test_entry_point_lists_every_command() -> None:
    pytest.importorskip("torch")  # the experiments import torch (the bench extra)
    out = subprocess.run([sys.executable, "-m", "benchmarks", "list"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    for module in MODULES:
        name = "suite" if module == "benchmarks.harness" else module.rsplit(".", 1)[1]
        assert f"  {name} " in out, (name, out)
