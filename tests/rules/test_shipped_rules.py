"""The rule sets live in ``rules/`` at the top of the repository; the wheel ships them.

The wheel is built from a copy of the sources (so nothing is written into the checkout),
installed into a fresh directory and asked for its list: it must equal the tree's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compliance.ruleset import available_rulesets, shipped_rules_dir

REPO = Path(__file__).resolve().parents[2]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "compliance", "reference_kernels",
                "rules")


def _tree_ids() -> list[str]:
    return sorted(f"{p.parent.name}/{p.stem}" for p in (REPO / "rules").glob("*/*.yaml"))


def test_a_checkout_reads_the_top_level_rules_directory() -> None:
    assert shipped_rules_dir() == REPO / "rules"
    assert list(available_rulesets([shipped_rules_dir()])) == _tree_ids()
    assert len(_tree_ids()) == 26  # 13 training and 12 inference rounds, and the proposal


@pytest.mark.slow
def test_the_installed_wheel_lists_the_trees_rule_sets(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"),
                    str(source)], check=True, capture_output=True)
    target = tmp_path / "installed"
    wheel = next((tmp_path / "dist").glob("*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    # Only the installed copy on the path, run from a directory with no checkout in it.
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("COMPLIANCE_RULES_PATH", None)
    listed = subprocess.run([sys.executable, "-m", "compliance", "rules", "list", "--format", "json"],
                            cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    document = json.loads(listed.stdout)
    assert Path(document["rules_dir"]) == target / "compliance" / "rulesets"
    assert [r["id"] for r in document["rulesets"]] == _tree_ids()
