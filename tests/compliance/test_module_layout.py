"""The dependency direction of ``compliance``: engine -> stages -> model, never back."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "compliance"
ENTRY_POINTS = {"cli", "pytest_plugin.py"}
"""What may import the orchestrator: the command-line layer and the pytest plugin."""


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_only_entry_points_import_the_orchestrator() -> None:
    importers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                       if p.relative_to(PACKAGE).parts[0] not in ENTRY_POINTS and p.name != "engine.py"
                       and "compliance.engine" in _imported_modules(p))
    assert importers == []


def test_the_scanner_sees_both_import_forms(tmp_path: Path) -> None:
    for text in ("from compliance.engine import run_check\n", "from compliance import engine\n",
                 "import compliance.engine\n"):
        (tmp_path / "m.py").write_text(text)
        assert "compliance.engine" in _imported_modules(tmp_path / "m.py"), text
