"""Layers, no circles: the import graph of ``compliance/``, ``reference_kernels/`` and ``benchmarks/``,
read with ``ast``; and no circle between the folders of ``compliance/``.

Every ``import`` statement counts as an edge, wherever it stands: at module level, inside a
function (a lazy import of a project module is still a dependency, and hiding a circle in a
function does not remove it) and under ``if TYPE_CHECKING:`` (a type-only reference is a
dependency on the module above too). An edge goes to the most specific project module the
statement names (``from compliance.rulespecs import checks`` -> ``compliance.rulespecs.checks``); the
implicit import of a parent package's ``__init__`` is not counted. Imports of outside packages
(torch, click) are not edges. A second test forbids importing a package's underscore (private)
modules or names from outside that package.

A folder of ``compliance/`` (``checks``, ``verify``, ...) and each module directly in it
(``manifest``, ``context``, ...) is one unit of the folder graph: a unit depends on another when
any of its modules imports any of the other's. A cycle there is a tangle even without a module
circle (``checks`` importing ``verify.specs`` while ``verify`` imports ``checks.interface``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("compliance", "reference_kernels")
GRAPHED = (*PACKAGES, "benchmarks")  # the module graph (no circle anywhere) covers the kernel lab too
OUTSIDE = ("tests", "benchmarks", "examples")
# fixture submission trees (data, not the project's code: some of their .py files are not even Python)
FIXTURE_TREES = {"cases", "rounds", "fixtures"}

# No circle is allowed anywhere (issue 38): the compiled host path (host.py) sits below the launcher and
# the index check, and the layers above bind it (host_binding.py, registered by the package __init__);
# the index check registers itself with the launcher below it (launch.use_index_check).
KNOWN_CIRCLES: list[list[str]] = []

# Folder-level edges of compliance/ that close a cycle, allowed while known (none since issue 52
# moved the rule specs to compliance/rulespecs/ and blobs, semantics to the top). Shrink only: an
# entry whose edge is gone fails the test.
KNOWN_FOLDER_TANGLES: set[tuple[str, str]] = set()


def _module_files(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = {name: path for package in GRAPHED for name, path in _module_files(package).items()}


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


def folder_graph(edges: dict[str, set[str]], package: str = "compliance") -> dict[str, set[str]]:
    """The units of ``package`` (its folders, and its modules directly in it) and their imports."""
    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    units: dict[str, set[str]] = {}
    for module, targets in edges.items():
        if module.partition(".")[0] != package:
            continue
        here = units.setdefault(unit(module), set())
        here |= {unit(t) for t in targets if t.partition(".")[0] == package and unit(t) != unit(module)}
    return units


def test_a_deliberate_circle_is_found_in_benchmarks_and_between_compliance_folders() -> None:
    edges = {module: set(targets) for module, targets in import_graph().items()}
    assert "benchmarks.training_dlrm" in edges["benchmarks.training_suite"]
    edges["benchmarks.training_dlrm"].add("benchmarks.training_suite")  # the circle issue 52 removed
    assert ["benchmarks.training_dlrm", "benchmarks.training_suite"] in circles(edges)
    edges = {module: set(targets) for module, targets in import_graph().items()}
    edges["compliance.report.json_report"].add("compliance.cli.exits")  # no module circle: cli -> report -> cli
    assert circles(edges) == KNOWN_CIRCLES
    assert any({"compliance.cli", "compliance.report"} <= set(c) for c in circles(folder_graph(edges)))


def test_no_folder_cycle_in_compliance_beyond_the_known_tangles() -> None:
    graph = folder_graph(import_graph())
    stale = {(a, b) for a, b in KNOWN_FOLDER_TANGLES if b not in graph.get(a, set())}
    assert not stale, f"these tangles are gone: remove them from KNOWN_FOLDER_TANGLES: {sorted(stale)}"
    pruned = {a: {b for b in targets if (a, b) not in KNOWN_FOLDER_TANGLES} for a, targets in graph.items()}
    assert circles(pruned) == []


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def test_no_private_import_from_outside_a_package() -> None:
    """tests/, benchmarks/, examples/ and each project package import only public modules and names
    of another package (``reference_kernels.plan``, never ``reference_kernels._plan``)."""
    offenders = []
    files = [(p, None) for top in OUTSIDE for p in sorted((REPO / top).rglob("*.py"))
             if not FIXTURE_TREES & set(p.relative_to(REPO).parts)]
    files += [(path, module.partition(".")[0]) for module, path in MODULES.items()
              if module.partition(".")[0] in PACKAGES]
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
