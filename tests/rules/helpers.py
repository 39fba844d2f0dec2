"""Paths and small helpers shared by the ``compliance rules`` tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from compliance.cli.main import cli

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = HERE / "fixtures"
VALID = FIXTURES / "valid"
INVALID = FIXTURES / "invalid"
GOLDEN = HERE / "golden"


def fixture(name: str) -> str:
    """Path of a valid fixture rule file, e.g. ``fixture("child")``."""
    return str(VALID / "training" / f"{name}.yaml")


def invoke(*args: str) -> Result:
    """Run ``compliance rules ARGS`` in-process (stdout and stderr kept apart)."""
    return CliRunner().invoke(cli, ["rules", *args], catch_exceptions=False)


def invoke_json(*args: str) -> Any:
    """Run a ``--format json`` command and parse what it printed."""
    result = invoke(*args, "--format", "json")
    return json.loads(result.stdout)


def normalise(text: str) -> str:
    """Golden-file form: the checkout's absolute path replaced by ``<repo>``."""
    return text.replace(str(REPO), "<repo>")
