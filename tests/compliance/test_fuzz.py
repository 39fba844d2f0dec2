"""Fuzzing (issue 23): mutated manifests, rule files and setup.py text never produce a
traceback, always end in a documented exit code (0, 1 or 2; 3 is an internal error and
fails these tests) and finish in bounded time.

The default run is small (a few seconds). Scale it with ``COMPLIANCE_FUZZ_EXAMPLES``
(examples per test), e.g. ``COMPLIANCE_FUZZ_EXAMPLES=2000 pytest tests/compliance/test_fuzz.py``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compliance.cli.main import EXIT_FINDINGS, EXIT_INPUT, EXIT_OK, cli
from compliance.manifest import parse_manifest
from tests.compliance.treeutil import BASE

EXAMPLES = int(os.environ.get("COMPLIANCE_FUZZ_EXAMPLES", "15"))
TIME_LIMIT_S = 10.0
"""Wall time allowed for one command on one mutated input."""
DOCUMENTED = (EXIT_OK, EXIT_FINDINGS, EXIT_INPUT)

REPO = Path(__file__).parents[2]
IMPL = "Acme/benchmarks/dlrm/implementations/torch"
MANIFEST = (BASE / IMPL / "kernel_manifest.yaml").read_text()
RULES = (REPO / "rules/training/v0.7.yaml").read_text()
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One copy of the base tree; each example rewrites one file in it."""
    root = tmp_path_factory.mktemp("fuzz") / "tree"
    shutil.copytree(BASE, root)
    yield root


def run_cli(*args: str) -> tuple[int, str]:
    """Exit code and combined output; asserts the documented-code and time promises."""
    started = time.monotonic()
    result = CliRunner().invoke(cli, list(args))
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.exit_code in DOCUMENTED, f"exit {result.exit_code}: {output[-2000:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output and "internal error" not in output, output[-2000:]
    assert elapsed < TIME_LIMIT_S, f"{args} took {elapsed:.1f}s"
    return result.exit_code, output


# --------------------------------------------------------------------------- strategies

HOSTILE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**200, max_value=10**300),
    st.floats(allow_nan=True), st.text(max_size=30),
    st.sampled_from(["\ud800", "\x00", "../../../etc/passwd", "/etc/passwd", "a\nb", "https://[::1/x",
                     "0123456789abcdef0123456789abcdef01234567\n", "training/../../x", "", " ", "*",
                     "${HOME}", "\x1b[2J"]),
)
HOSTILE_VALUES = st.recursive(HOSTILE_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
YAML_SNIPPETS = st.sampled_from([
    "&a ", "*a", "<<: *a\n", "!!python/object/apply:os.system ['true']", "!!binary AAAA", "? ", "- ",
    "[", "]", "{", "}", ": ", ",", "'", '"', "|\n", ">\n", "#", "%YAML 1.1\n", "---\n", "...\n", "\t",
    "\n", "  ", '"\\ud800"', "\x00", "\ufeff", "9" * 60, "[" * 200, "~", "null", ".inf",
])


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, prefix + (index,))
    return found


def _replace(data: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


@st.composite
def structural_mutation(draw: st.DrawFn, text: str) -> str:
    """The document with 1-3 nodes replaced by hostile values (or deleted), dumped as YAML."""
    data = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        data = _replace(data, path, draw(HOSTILE_VALUES), bool(path) and draw(st.booleans()))
    return yaml.safe_dump(data, allow_unicode=False)


@st.composite
def textual_mutation(draw: st.DrawFn, text: str) -> str:
    """The text with 1-6 splices: YAML syntax, aliases, tags, escapes, random characters."""
    for _ in range(draw(st.integers(1, 6))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 20)))
        insert = draw(st.one_of(YAML_SNIPPETS, st.text(max_size=10)))
        text = text[:start] + insert + text[end:]
    return text


def mutated(text: str) -> st.SearchStrategy[str]:
    return st.one_of(structural_mutation(text), textual_mutation(text))


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))


# --------------------------------------------------------------------------- properties

@FUZZ
@given(text=mutated(MANIFEST))
def test_mutated_manifests(tree: Path, text: str) -> None:
    _write(tree / IMPL / "kernel_manifest.yaml", text)
    code, output = run_cli("check", str(tree))
    run_cli("inventory", str(tree), "--format", "json")
    run_cli("check", str(tree), "--rules", "training/v0.7", "--format", "sarif")
    if parse_manifest(text, tree / IMPL / "kernel_manifest.yaml").problems and code != EXIT_INPUT:
        assert code == EXIT_FINDINGS, output  # an invalid manifest never passes


@FUZZ
@given(text=mutated(RULES))
def test_mutated_rule_files(tree: Path, tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    rules = tmp_path_factory.getbasetemp() / "fuzz-rules.yaml"
    _write(rules, text)
    run_cli("rules", "validate", str(rules))
    run_cli("rules", "show", str(rules))
    run_cli("check", str(tree), "--rules", str(rules))


SETUP_TOKENS = st.sampled_from([
    "CUDAExtension(", "CppExtension(", "'k.cu'", "[", "]", "(", ")", ",", "sources=", "name=", "-", "+",
    ".b", "a", "lambda:", "\n", " ", "not ", "**", "{", "}", "'''", "\\", "1", "if", "else", "\x00", "\ud800",
])


@st.composite
def setup_text(draw: st.DrawFn) -> str:
    head = "from torch.utils.cpp_extension import CUDAExtension\n"
    tokens = "".join(draw(st.lists(SETUP_TOKENS, max_size=40)))
    deep = draw(st.sampled_from(["(", "-", ".b", "[", "not ", "~", "a if b else "])) * draw(st.integers(0, 30_000))
    return head + draw(st.sampled_from([tokens + deep, deep + tokens, "x = a" + deep + tokens]))


@FUZZ
@given(text=setup_text())
def test_mutated_setup_py(tree: Path, text: str) -> None:
    _write(tree / IMPL / "setup.py", text)
    try:
        run_cli("inventory", str(tree))
        run_cli("check", str(tree))
    finally:
        (tree / IMPL / "setup.py").unlink()
