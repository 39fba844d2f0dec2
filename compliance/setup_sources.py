"""What a setup.py's extension sources resolve to, read from its AST (never run).

Sources are often computed: ``glob.glob(os.path.join(extensions_dir, "*.cu"))``,
``[os.path.join(d, f) for f in os.listdir(d)]``, ``main + sources_cuda``, with
``extensions_dir`` assigned earlier from ``os.path.dirname(os.path.abspath(__file__))``.
This module evaluates the small, side-effect-free part of Python those use (string
constants, names assigned once at module level, ``os.path.join``/``dirname``/
``abspath``/``realpath``, ``__file__``, ``glob``, ``os.listdir``, list literals,
``+``, comprehensions over ``os.listdir``/``glob``, f-strings of known parts) into
*items*: literal paths and glob patterns, relative to the setup.py's directory.
Anything else is unknown and yields nothing (no finding is made from a guess).
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

SETUP_DIR = "\0setup-dir\0"
"""Placeholder for the setup.py's own directory (``os.path.dirname(__file__)`` and kin)."""
_PATH_CALLS = {"join", "dirname", "abspath", "realpath", "normpath"}


@dataclass(frozen=True)
class SourceItem:
    """One source a setup.py names: a literal path or a glob pattern (setup-directory-relative)."""

    text: str
    """The path or pattern, ``/``-separated, relative to the setup.py's directory."""
    pattern: bool
    """True for a ``glob``/``os.listdir`` pattern."""


def module_assignments(tree: ast.AST) -> dict[str, ast.expr]:
    """Names assigned exactly once (``name = expr``) anywhere in the module; reassigned names are unknown."""
    seen: dict[str, ast.expr | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            seen[name] = None if name in seen else node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            seen[node.target.id] = None
    return {k: v for k, v in seen.items() if v is not None}


class _Evaluator:
    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names
        self.depth = 0

    def string(self, node: ast.AST) -> str | None:
        """A string expression's value (SETUP_DIR standing for the setup.py's directory), or None."""
        self.depth += 1
        try:
            if self.depth > 50:
                return None
            return self._string(node)
        finally:
            self.depth -= 1

    def _string(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return f"{SETUP_DIR}/setup.py"
            value = self.names.get(node.id)
            return self.string(value) if value is not None else None
        if isinstance(node, ast.JoinedStr):
            parts = [self.string(v.value) if isinstance(v, ast.FormattedValue) else self.string(v) for v in node.values]
            return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.string(node.left), self.string(node.right)
            return None if left is None or right is None else left + right
        if isinstance(node, ast.Call):
            return self._path_call(node)
        return None

    def _path_call(self, node: ast.Call) -> str | None:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name not in _PATH_CALLS or node.keywords:
            return None
        args = [self.string(a) for a in node.args]
        if any(a is None for a in args) or not args:
            return None
        values = [a for a in args if a is not None]
        if name == "join":
            joined = ""
            for part in values:
                joined = part if part.startswith(("/", SETUP_DIR)) or not joined else f"{joined.rstrip('/')}/{part}"
            return joined
        if name == "dirname":
            return values[0].rpartition("/")[0] if "/" in values[0] else ""
        return values[0]  # abspath, realpath, normpath: the same place for our purpose

    def items(self, node: ast.AST | None) -> list[SourceItem] | None:
        """The sources an expression lists, or None when any part is unknown."""
        self.depth += 1
        try:
            if node is None or self.depth > 50:
                return None
            return self._items(node)
        finally:
            self.depth -= 1

    def _items(self, node: ast.AST) -> list[SourceItem] | None:
        if isinstance(node, (ast.List, ast.Tuple)):
            found: list[SourceItem] = []
            for element in node.elts:
                inner = self.items(element.value) if isinstance(element, ast.Starred) else None
                if inner is None:
                    text = self.string(element)
                    inner = None if text is None else [SourceItem(text, False)]
                if inner is None:
                    return None
                found.extend(inner)
            return found
        if isinstance(node, ast.Name):
            value = self.names.get(node.id)
            return self.items(value) if value is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.items(node.left), self.items(node.right)
            return None if left is None or right is None else left + right
        if isinstance(node, ast.Call):
            return self._listing_call(node)
        if isinstance(node, ast.ListComp) and len(node.generators) == 1:
            return self._comprehension(node)
        return None

    def _listing_call(self, node: ast.Call) -> list[SourceItem] | None:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name in ("glob", "iglob") and node.args:
            pattern = self.string(node.args[0])
            return None if pattern is None else [SourceItem(pattern, True)]
        if name == "listdir" and node.args:
            directory = self.string(node.args[0])
            return None if directory is None else [SourceItem(f"{directory.rstrip('/')}/*", True)]
        if name in ("list", "sorted") and len(node.args) == 1:
            return self.items(node.args[0])
        return None

    def _comprehension(self, node: ast.ListComp) -> list[SourceItem] | None:
        listing = self.items(node.generators[0].iter)
        if not listing or not all(item.pattern for item in listing):
            return None
        target = node.generators[0].target
        element = node.elt
        if isinstance(element, ast.Name) and isinstance(target, ast.Name) and element.id == target.id:
            return listing
        if isinstance(element, ast.Call) and isinstance(target, ast.Name):  # os.path.join(d, f)
            last = element.args[-1] if element.args else None
            if isinstance(last, ast.Name) and last.id == target.id:
                return listing
        return None


def extension_sources(call: ast.Call, names: dict[str, ast.expr]) -> list[SourceItem] | None:
    """The sources of an extension call (second positional argument or ``sources=``), or None."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    node = call.args[1] if len(call.args) > 1 else keywords.get("sources")
    return _Evaluator(names).items(node)


def relative_to_root(item_text: str, setup_dir: str) -> str | None:
    """A setup-directory-relative item as a root-relative path (None when it is absolute or leaves)."""
    text = item_text.replace(f"{SETUP_DIR}/", "").replace(SETUP_DIR, "")
    if text.startswith("/") or "\0" in text:
        return None
    parts: list[str] = [p for p in setup_dir.split("/") if p]
    for part in text.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


def as_written(item_text: str) -> str:
    """An item as the setup.py spells it (its own directory's placeholder shown as ``<setup.py dir>``)."""
    return item_text.replace(SETUP_DIR, "<setup.py dir>")


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Glob semantics of ``glob.glob(recursive=True)``: ``*``/``?``/``[...]`` stay within one
    path component, ``**`` as a whole component spans any number of them."""
    out = []
    for index, part in enumerate(pattern.split("/")):
        sep = "/" if index else ""
        if part == "**":
            out.append("(?:/[^/]+)*" if index else "(?:[^/]+(?:/|$))*")
            continue
        out.append(sep + _component(part))
    return re.compile("".join(out) + r"\Z")


def _component(part: str) -> str:
    regex, i = [], 0
    while i < len(part):
        char = part[i]
        if char == "*":
            regex.append("[^/]*")
        elif char == "?":
            regex.append("[^/]")
        elif char == "[" and "]" in part[i + 2:]:
            end = part.index("]", i + 2)
            body = part[i + 1:end]
            regex.append("[" + ("^" + re.escape(body[1:]) if body.startswith("!") else re.escape(body)) + "]")
            i = end
        else:
            regex.append(re.escape(char))
        i += 1
    return "".join(regex)


class FileIndex:
    """Root-relative files, sorted, so a glob pattern is matched only against the files under its
    fixed leading directory (a few hundred, not a round's 150,000)."""

    def __init__(self, files: frozenset[str] | set[str]) -> None:
        self._files = sorted(files)

    def matching(self, pattern: str) -> list[str]:
        """Files matching the root-relative glob ``pattern``."""
        fixed = fixed_directory(pattern)
        prefix = fixed + "/" if fixed else ""
        regex = _pattern_regex(pattern)
        start = bisect.bisect_left(self._files, prefix)
        found = []
        for rel in self._files[start:]:
            if not rel.startswith(prefix):
                break
            if regex.match(rel):
                found.append(rel)
        return found

    def holds_directory(self, directory: str) -> bool:
        """True when some file lies under the root-relative ``directory`` (the root holds every file)."""
        if not directory:
            return bool(self._files)
        prefix = directory + "/"
        at = bisect.bisect_left(self._files, prefix)
        return at < len(self._files) and self._files[at].startswith(prefix)


def fixed_directory(pattern: str) -> str:
    """The directory a glob pattern searches: its leading components without a wildcard."""
    fixed = []
    for part in pattern.split("/")[:-1]:
        if any(c in part for c in "*?["):
            break
        fixed.append(part)
    return "/".join(fixed)


def fnmatch_under(pattern: str, rel: str) -> bool:
    """True when root-relative ``rel`` matches the root-relative glob ``pattern``."""
    return _pattern_regex(pattern).match(rel) is not None


# --------------------------------------------------------------------------- generated sources

_WRITE_MODES = frozenset("wax")


def generated_sources(tree: ast.AST, setup_dir: str, wanted: frozenset[str],
                      read_module: Callable[[str], ast.AST | None]) -> set[str]:
    """The root-relative paths among ``wanted`` that the setup.py writes before it builds: it hands
    the path to ``open`` for writing, or to a function of a module in the tree (imported by name
    from the setup.py's directory, read through ``read_module``) that opens that parameter for
    writing, as LoadGen's ``version_generator.generate_loadgen_version_definitions`` does."""
    evaluator = _Evaluator(module_assignments(tree))
    imported = _imported_functions(tree)
    found: set[str] = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        slots: list[tuple[int | str, ast.expr]] = [*enumerate(call.args)]
        slots += [(k.arg, k.value) for k in call.keywords if k.arg]
        for slot, argument in slots:
            text = evaluator.string(argument)
            rel = relative_to_root(text, setup_dir) if text is not None else None
            if rel is None or rel not in wanted or rel in found:
                continue
            if slot == 0 and _opens_for_writing(call):
                found.add(rel)
                continue
            origin = imported.get(_called_name(call) or "")
            module = relative_to_root(origin[0].replace(".", "/") + ".py", setup_dir) if origin else None
            module_tree = read_module(module) if module is not None else None
            if origin is not None and module_tree is not None and _writes_parameter(module_tree, origin[1], slot):
                found.add(rel)
    return found


def _called_name(call: ast.Call) -> str | None:
    """``f`` for ``f(...)``, ``m.f`` for ``m.f(...)``."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        return f"{call.func.value.id}.{call.func.attr}"
    return None


def _imported_functions(tree: ast.AST) -> dict[str, tuple[str, str]]:
    """Name a module-level call uses -> (module, function): ``from m import f [as g]`` gives ``g``,
    ``import m [as n]`` gives ``n.*`` (absolute imports only: the setup.py's directory is first on
    ``sys.path`` when it runs)."""
    found: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.update({alias.asname or alias.name: (node.module, alias.name) for alias in node.names})
        elif isinstance(node, ast.Import):
            modules.update({alias.asname or alias.name: alias.name for alias in node.names})
    for call in ast.walk(tree):
        name = _called_name(call) if isinstance(call, ast.Call) else None
        if name and "." in name and name.partition(".")[0] in modules:
            found[name] = (modules[name.partition(".")[0]], name.partition(".")[2])
    return found


def _writes_parameter(tree: ast.AST, function: str, slot: int | str) -> bool:
    """A module-level ``def function`` opens the parameter at ``slot`` (position or keyword) for writing."""
    for node in getattr(tree, "body", ()):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            params = [a.arg for a in node.args.posonlyargs + node.args.args]
            if isinstance(slot, int):
                param = params[slot] if slot < len(params) else None
            else:
                param = slot if slot in params or slot in (a.arg for a in node.args.kwonlyargs) else None
            return param is not None and any(
                isinstance(inner, ast.Call) and _opens_for_writing(inner)
                and isinstance(inner.args[0], ast.Name) and inner.args[0].id == param for inner in ast.walk(node))
    return False


def _opens_for_writing(call: ast.Call) -> bool:
    """``call`` is ``open(path, mode)`` with a literal mode that writes, appends or creates."""
    if not call.args or _called_name(call) != "open":
        return False
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    mode = call.args[1] if len(call.args) > 1 else keywords.get("mode")
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(_WRITE_MODES & set(mode.value))
