"""Layers, no circles: the import graph of ``compliance/`` and ``reference_kernels/``, read with ``ast``.

Every ``import`` statement counts as an edge, wherever it stands: at module level, inside a
function (a lazy import of a project module is still a dependency, and hiding a circle in a
function does not remove it) and under ``if TYPE_CHECKING:`` (a type-only reference is a
dependency on the module above too). An edge goes to the most specific project module the
statement names (``from compliance.checks import specs`` -> ``compliance.checks.specs``); the
implicit import of a parent package's ``__init__`` is not counted. Imports of outside packages
(torch, click) are not edges. A second test forbids importing a package's underscore (private)
modules or names from outside that package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("compliance", "reference_kernels")
OUTSIDE = ("tests", "benchmarks", "examples")
# fixture submission trees (data, not the project's code: some of their .py files are not even Python)
FIXTURE_TREES = {"cases", "rounds", "fixtures"}

# No circle is allowed anywhere (issue 38): the compiled host path (host.py) sits below the launcher and
# the index check, and the layers above bind it (host_binding.py, registered by the package __init__);
# the index check registers itself with the launcher below it (launch.use_index_check).
KNOWN_CIRCLES: list[list[str]] = []


def _module_files(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = {name: path for package in PACKAGES for name, path in _module_files(package).items()}


def _project_module(name: str) -> str | None:
    """The most specific project module ``name`` lies in (None: not a project module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of everything ``path`` imports, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def import_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for module, path in MODULES.items():
        for name, _ in imported_names(module, path):
            target = _project_module(name)
            if target is not None and target != module:
                edges[module].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_reader_finds_a_circle_and_a_lazy_edge() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    # a function-local import is an edge like any other
    assert "compliance.detect" in import_graph()["compliance.engine"]


def test_no_import_circle_in_the_packages() -> None:
    assert circles(import_graph()) == KNOWN_CIRCLES


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def test_no_private_import_from_outside_a_package() -> None:
    """tests/, benchmarks/, examples/ and each project package import only public modules and names
    of another package (``reference_kernels.plan``, never ``reference_kernels._plan``)."""
    offenders = []
    files = [(p, None) for top in OUTSIDE for p in sorted((REPO / top).rglob("*.py"))
             if not FIXTURE_TREES & set(p.relative_to(REPO).parts)]
    files += [(path, module.partition(".")[0]) for module, path in MODULES.items()]
    for path, own_package in files:
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for name, line in imported_names(module, path):
            parts = name.split(".")
            if parts[0] in PACKAGES and parts[0] != own_package and any(_is_private(p) for p in parts[1:]):
                offenders.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert offenders == []


def test_no_read_of_cpythons_private_environment() -> None:
    """``os.environ._data`` (or any private attribute of ``os.environ``, by name or through getattr)
    is CPython's implementation, not an interface: the packages read the environment through
    ``os.environ`` itself."""
    offenders = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and _is_private(node.attr) and ast.unparse(node.value) == "os.environ":
                offenders.append(f"{module}:{node.lineno}")
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr" and len(node.args) >= 2
                    and ast.unparse(node.args[0]) == "os.environ" and isinstance(node.args[1], ast.Constant)
                    and _is_private(str(node.args[1].value))):
                offenders.append(f"{module}:{node.lineno}")
    assert offenders == []
