"""Inventory detection: by content and magic bytes, never by name alone."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compliance.inventory import binary_kind, build_inventory, scan_markers, setup_extensions
from compliance.paths import tree_relative
from tests.compliance.treeutil import fake_binary


def make(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def test_renamed_elf_and_other_binaries_found_by_magic(tmp_path: Path) -> None:
    make(tmp_path, {"a/notes.txt": fake_binary("elf-so"), "a/k.dat": fake_binary("cubin"),
                    "a/x.png": fake_binary("fatbin"), "b/lib.a": fake_binary("ar"),
                    "b/tool.exe": fake_binary("pe"), "b/tool": fake_binary("macho"),
                    "b/real.txt": "just text\n"})
    kinds = {b.path: b.kind for b in build_inventory(tmp_path, "training").binaries}
    assert kinds == {"a/notes.txt": "elf-shared-object", "a/k.dat": "cubin", "a/x.png": "fatbin",
                     "b/lib.a": "ar-archive", "b/tool.exe": "pe", "b/tool": "mach-o"}


def test_native_code_found_by_content(tmp_path: Path) -> None:
    make(tmp_path, {"k.py": "import triton\n\n@triton.jit\ndef f(x): pass\n",
                    "raw.py": "src = r'''extern \"C\" __global__ void k() {}'''\n",
                    "x.cpp": "#include <torch/extension.h>\n", "plain.cpp": "int main() { return 0; }\n",
                    "docs.md": "write `__global__ void k()`\n", "h.cuh": "#pragma once\n"})
    native = {n.path: n.languages for n in build_inventory(tmp_path, "training").native}
    # Every file is examined (issue 40): documentation quoting a kernel definition is reviewed too.
    assert native == {"k.py": ("triton",), "raw.py": ("cuda",), "x.cpp": ("cpp",), "h.cuh": ("cuda",),
                      "docs.md": ("cuda",)}


def test_setup_py_extension_read_from_ast_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    make(tmp_path, {"impl/setup.py": (
        f"open({str(marker)!r}, 'w').close()\n"
        "from torch.utils.cpp_extension import CUDAExtension, CppExtension\n"
        "exts = [CUDAExtension(name='fast._C', sources=['csrc/a.cu', 'csrc/b.cpp']),\n"
        "        CppExtension('cpu', ['../shared/c.cpp'])]\n"),
        "impl/csrc/b.cpp": "int b() { return 1; }\n"})
    inv = build_inventory(tmp_path, "training")
    assert not marker.exists()
    assert [(e.kind, e.name, e.sources, e.line) for e in inv.setup_extensions] == [
        ("CUDAExtension", "fast._C", ("impl/csrc/a.cu", "impl/csrc/b.cpp"), 3),
        ("CppExtension", "cpu", ("shared/c.cpp",), 4)]
    assert "impl/csrc/b.cpp" in {n.path for n in inv.native}


def test_symlinks_recorded_inside_ones_examined_as_their_target(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make(outside, {"secret.cu": "__global__ void k() {}\n"})
    tree = make(tmp_path / "tree", {"a.cu": "__global__ void a() {}\n", ".hg/store/t.txt": "@triton.jit\n"})
    os.symlink(outside, tree / "linkdir")
    os.symlink("a.cu", tree / "alias.cu")
    os.symlink(".hg/store/t.txt", tree / "k.py")
    inv = build_inventory(tree, "training")
    assert {(s.path, s.escapes) for s in inv.symlinks} == {("linkdir", True), ("alias.cu", False),
                                                           ("k.py", False)}
    # alias.cu is a second name of a.cu, k.py of t.txt (each judged once): since issue 50 a data file
    # that Python may exec is searched for run-time compilers, so t.txt is the Triton kernel itself.
    assert [(n.path, n.languages) for n in inv.native] == [(".hg/store/t.txt", ("triton",)), ("a.cu", ("cuda",))]
    assert inv.metadata_dirs == (".hg",)


def test_vendored_framework_copy_grouped(tmp_path: Path) -> None:
    files = {f"impl/third_party/apex/csrc/k{i}.cu": "__global__ void k() {}\n" for i in range(120)}
    files["impl/kernels/mine.cu"] = "__global__ void mine() {}\n"
    files.update({f"impl/fw/src/f{i}.cu": "__global__ void f() {}\n" for i in range(60)})
    files["impl/fw/LICENSE"] = "BSD\n"
    inv = build_inventory(make(tmp_path, files), "training")
    assert {(v.path, v.native_files) for v in inv.vendored} == {("impl/third_party/apex", 120), ("impl/fw", 60)}
    assert [n.path for n in inv.native if n.vendored_tree is None] == ["impl/kernels/mine.cu"]


def test_layout_mapping_training_round(tmp_path: Path) -> None:
    make(tmp_path, {"OrgA/systems/s.json": "{}",
                    "OrgA/benchmarks/dlrm/implementations/pt/k.cu": "__global__ void k(){}",
                    "OrgB/results/s/dlrm/result_0.txt": "x", "OrgB/benchmarks/bert/implementations/tf/x.cu": "//"})
    inv = build_inventory(tmp_path, "training")
    assert [o.name for o in inv.organizations] == ["OrgA", "OrgB"]
    where = {n.path: (n.location.submitter, n.location.benchmark, n.location.implementation) for n in inv.native}
    assert where["OrgA/benchmarks/dlrm/implementations/pt/k.cu"] == ("OrgA", "dlrm", "pt")
    assert where["OrgB/benchmarks/bert/implementations/tf/x.cu"] == ("OrgB", "bert", "tf")


def test_layout_mapping_inference(tmp_path: Path) -> None:
    make(tmp_path, {"closed/OrgA/systems/s.json": "{}", "closed/OrgA/code/dlrm/pt/k.cu": "__global__ void k(){}"})
    inv = build_inventory(tmp_path, "inference", ("closed", "open"))
    (native,) = inv.native
    assert (native.location.division, native.location.submitter, native.location.benchmark,
            native.location.implementation) == ("closed", "OrgA", "dlrm", "pt")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_binary_sniffing_total_on_arbitrary_bytes(data: bytes) -> None:
    kind = binary_kind(data)
    assert kind is None or isinstance(kind, str)
    scan_markers(data)
    setup_extensions(data, "setup.py")


@given(st.lists(st.sampled_from(["a", "..", ".", "b", "", "/"]), max_size=8).map("/".join))
def test_tree_relative_never_escapes(relpath: str) -> None:
    result = tree_relative("x/y", relpath)
    assert result is None or not (result == ".." or result.startswith("../") or result.startswith("/"))
