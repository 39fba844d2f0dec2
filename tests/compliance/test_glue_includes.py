"""Glue follows #include (issue 50 item 4): headers a build dependency or verification shim reaches are glue.

The fixture cases (``glue-shim-includes-computing-header``, ``glue-build-dependency-include-dir-nested-header``,
``verification-shim-includes-declarations``) show one level, a nested header through ``include_dirs`` and a
cycle; these tests take the include graph to its bounds: the compiler's own depth, cycles, and headers the
compiler could not reach."""

from __future__ import annotations

import shutil
from pathlib import Path

from compliance import preprocessor
from compliance.checks.declarations import MAX_INCLUDE_DEPTH
from compliance.engine import run_check
from compliance.model import CheckOptions
from tests.compliance.treeutil import BASE

IMPL = Path("Acme/benchmarks/dlrm/implementations/torch")
SHIM_BUILD = """    build:
      kind: torch_extension
      function: emb_sum
      arguments: [weight, indices, out]
      verification_shims: [verify/binding.cpp]
"""
SHIM = ('#include <torch/extension.h>\n#include "h0.h"\n'
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("emb_sum", &f); }\n')
COMPUTES = "inline void f(float* x, int n) {\n  for (int i = 0; i < n; ++i) x[i] = 0.f;\n}\n"


def _tree(tmp_path: Path, headers: dict[str, str]) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(BASE, tree)
    manifest = tree / IMPL / "kernel_manifest.yaml"
    manifest.write_text(manifest.read_text() + SHIM_BUILD)  # the base tree's kernel, bound through the shim
    (tree / IMPL / "verify").mkdir()
    (tree / IMPL / "verify" / "binding.cpp").write_text(SHIM)
    for name, text in headers.items():
        (tree / IMPL / "verify" / name).write_text(text)
    return tree


def _glue(tree: Path) -> list[tuple[str, int | None, str]]:
    report = run_check(tree, CheckOptions())
    return [(Path(f.path).name, f.line, f.message) for f in report.findings if f.rule_id == "glue-computes"]


def test_a_computing_header_at_the_compilers_depth_is_found_and_the_chain_named(tmp_path: Path) -> None:
    deepest = MAX_INCLUDE_DEPTH - 1  # the shim includes h0.h: h{deepest}.h sits MAX_INCLUDE_DEPTH levels down
    headers = {f"h{i}.h": f'#pragma once\n#include "h{i + 1}.h"\n' for i in range(deepest)}
    headers[f"h{deepest}.h"] = COMPUTES
    found = _glue(_tree(tmp_path, headers))
    assert [(name, line) for name, line, _ in found] == [(f"h{deepest}.h", 1)]
    assert "by Acme/benchmarks/dlrm/implementations/torch/verify/binding.cpp" in found[0][2]
    assert "through Acme/benchmarks/dlrm/implementations/torch/verify/h0.h ->" in found[0][2]


def test_a_header_past_the_compilers_depth_is_not_compiled_so_not_followed(tmp_path: Path) -> None:
    headers = {f"h{i}.h": f'#include "h{i + 1}.h"\n' for i in range(MAX_INCLUDE_DEPTH)}
    headers[f"h{MAX_INCLUDE_DEPTH}.h"] = COMPUTES
    assert _glue(_tree(tmp_path, headers)) == []


def test_cycles_end_and_each_header_is_reported_once(tmp_path: Path) -> None:
    headers = {"h0.h": '#include "h1.h"\n#include "h0.h"\n', "h1.h": '#include "h0.h"\n#include "h1.h"\n' + COMPUTES}
    assert [(name, line) for name, line, _ in _glue(_tree(tmp_path, headers))] == [("h1.h", 3)]


def test_headers_the_compiler_cannot_reach_are_not_glue(tmp_path: Path) -> None:
    """An angle-bracket name is searched in include_dirs only (none declared here), a name in a comment or
    under a string is no include, and nothing outside the tree is read."""
    headers = {"h0.h": ('#include <h1.h>\n// #include "h2.h"\nconst char* s = "#include \\"h2.h\\"";\n'
                        '#include "../../../../../../../../etc/h3.h"\n'),
               "h1.h": COMPUTES, "h2.h": COMPUTES}
    assert _glue(_tree(tmp_path, headers)) == []


def test_includes_are_read_as_the_compiler_reads_them() -> None:
    text = b'#include "a.h"\n/* #include "b.h" */\n  %:  include <c/d.h>\n#inc\\\nlude "e.h"\n'
    assert preprocessor.includes(text) == [(b"a.h", True), (b"c/d.h", False), (b"e.h", True)]
