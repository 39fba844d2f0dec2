"""`compliance manifest draft`: fails validation until filled; once filled, nothing is undeclared."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from compliance.draft import draft_manifest, entry_symbols
from compliance.engine import run_check
from compliance.manifest import MANIFEST_NAME, parse_manifest
from compliance.ruleset import load_ruleset
from tests.compliance.test_cli import invoke
from tests.compliance.test_inventory import make
from tests.compliance.test_vendored_trees import signature_files
from tests.compliance.treeutil import BASE, tree_digest
from tests.conftest import UpstreamBlobs

IMPL = "Acme/benchmarks/dlrm/implementations/fast"
COMMIT = "0123456789abcdef0123456789abcdef01234567"

FILES: dict[str, str | bytes] = {
    f"{IMPL}/setup.py": (
        "from setuptools import setup\n"
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
        "setup(name='fastemb', ext_modules=[CUDAExtension('fastemb._C', ['csrc/emb_bag.cu', 'csrc/binding.cpp'])],\n"
        "      cmdclass={'build_ext': BuildExtension})\n"),
    f"{IMPL}/csrc/emb_bag.cu": (
        "#include \"common.cuh\"\n"
        "template <typename T>\n__global__ void __launch_bounds__(256) emb_bag_sum_kernel(const T* w, T* out) "
        "{ out[threadIdx.x] = w[0]; }\n"
        "static __global__ void emb_bag_max_kernel(float* out) { out[0] = 1.f; }\n"
        "void emb_bag_forward(float* w, float* o) { emb_bag_sum_kernel<float><<<1, 32>>>(w, o); }\n"),
    f"{IMPL}/csrc/binding.cpp": (
        "#include <torch/extension.h>\n"
        "void emb_bag_forward(float* w, float* o);\n"
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"emb_bag_forward\", &emb_bag_forward); "
        "m.def(\"forward\", &emb_bag_forward); }\n"),
    f"{IMPL}/csrc/common.cuh": "#pragma once\n__global__ void fill_kernel(float* x) { x[0] = 0.f; }\n",
    f"{IMPL}/ops/inline_gather.py": (
        "from torch.utils.cpp_extension import load_inline\n"
        "SRC = 'extern \"C\" __global__ void gather_rows(const float* t, float* o) { o[0] = t[0]; }'\n"
        "mod = load_inline(name='gather_ext', cpp_sources='', cuda_sources=SRC)\n"),
    f"{IMPL}/ops/jit_loaded.py": (
        "import os\nfrom torch.utils import cpp_extension\n"
        "here = os.path.dirname(__file__)\n"
        "ext = cpp_extension.load(name='scatter_ext', sources=[os.path.join(here, 'scatter.cu')])\n"),
    f"{IMPL}/ops/scatter.cu": "__global__ void scatter_add(float* o) { o[0] += 1.f; }\n",
    f"{IMPL}/triton_ops/pool.py": "import triton\n\n@triton.jit\ndef pool_kernel(x):\n    pass\n",
    f"{IMPL}/standalone/index_check.cu": "extern \"C\" __global__ void index_check(const long* i) {}\n",
    f"{IMPL}/train.py": "print('train')\n",
    **signature_files("cutlass", f"{IMPL}/third_party/cutlass"),
    f"{IMPL}/third_party/cutlass/include/cutlass/gemm.cu": "__global__ void gemm() {}\n",
}


def fixture_round(tmp_path: Path) -> Path:
    tree = tmp_path / "round"
    shutil.copytree(BASE, tree)
    return make(tree, FILES)


def fill(draft_text: str) -> str:
    """What a submitter does: replace every placeholder with the real value."""
    data = yaml.safe_load(draft_text)
    for kernel in data["kernels"]:
        kernel["category"] = "dlrm-embedding"
        kernel["upstream"] = {"repository": "https://github.com/acme/kernels", "commit": COMMIT,
                              "paths": [f"src/{s}" for s in kernel["sources"]]}
        kernel["semantics"] = {"op": "embedding_bag", "modes": ["sum"], "layouts": ["fixed"]}
        del kernel["build"]
    for tree in data["vendored"]:
        tree["commit"] = COMMIT
    return yaml.safe_dump(data, sort_keys=False)


def test_entry_symbols_found_as_the_check_reads_them() -> None:
    symbols, function = entry_symbols([str(FILES[f"{IMPL}/csrc/{name}"]).encode()
                                       for name in ("emb_bag.cu", "binding.cpp")])
    assert symbols == ("emb_bag_sum_kernel", "emb_bag_max_kernel", "emb_bag_forward")
    assert function == "emb_bag_forward"
    ops, _ = entry_symbols([b'TORCH_LIBRARY(acme, m) { m.def("emb_lookup(Tensor w) -> Tensor"); }'])
    assert ops == ("emb_lookup",)


def upstream_cutlass(upstream_blobs: UpstreamBlobs) -> None:
    """The fixture's CUTLASS copy is upstream content (registered in the blob catalogue)."""
    signature_files("cutlass", "-", upstream_blobs)
    upstream_blobs.add("cutlass", {"include/cutlass/gemm.cu": "__global__ void gemm() {}\n"})


def test_draft_declares_one_kernel_per_module(tmp_path: Path, upstream_blobs: UpstreamBlobs) -> None:
    upstream_cutlass(upstream_blobs)
    tree = fixture_round(tmp_path)
    draft = draft_manifest(tree / IMPL, load_ruleset("training/v0.7"))
    kernels = {k.id: (k.sources, k.language) for k in draft.kernels}
    assert kernels == {
        "fastemb._C": (("csrc/emb_bag.cu", "csrc/binding.cpp", "csrc/common.cuh"), "cuda"),
        "gather_ext": (("ops/inline_gather.py",), "cuda"),
        "scatter_ext": (("ops/scatter.cu", "ops/jit_loaded.py"), "cuda"),
        "pool": (("triton_ops/pool.py",), "triton"),
        "index_check": (("standalone/index_check.cu",), "cuda"),
    }
    assert next(k for k in draft.kernels if k.id == "fastemb._C").category == "dlrm-embedding"
    assert [(v.path, v.repository, v.commit) for v in draft.vendored] == [
        ("third_party/cutlass", "https://github.com/NVIDIA/cutlass", None)]


def test_draft_fails_validation_until_filled_then_nothing_is_undeclared(tmp_path: Path,
                                                                       upstream_blobs: UpstreamBlobs) -> None:
    upstream_cutlass(upstream_blobs)
    tree = fixture_round(tmp_path)
    before = tree_digest(tree)
    code, draft_text, _ = invoke("manifest", "draft", str(tree / IMPL))
    assert code == 0 and tree_digest(tree) == before
    problems = parse_manifest(draft_text, tree / IMPL / MANIFEST_NAME).problems
    assert problems and all(p.line for p in problems)
    assert sum("placeholder left unfilled" in p.message for p in problems) >= 5 * 3

    (tree / IMPL / MANIFEST_NAME).write_text(draft_text)
    unfilled = run_check(tree)
    assert "manifest-invalid" in {f.rule_id for f in unfilled.findings} and not unfilled.passed

    (tree / IMPL / MANIFEST_NAME).write_text(fill(draft_text))
    assert not parse_manifest(fill(draft_text), tree / IMPL / MANIFEST_NAME).problems
    filled = run_check(tree)
    in_impl = [f for f in filled.findings if f.path.startswith(IMPL + "/")]
    # what the draft got right: every native file declared, every source and entry symbol found;
    # what is left is policy (v0.7 admits only CUDA for dlrm-embedding, so the triton kernel is refused)
    # (the declared CUTLASS copy is upstream content, proven by the blob catalogue)
    assert {(f.rule_id, f.kernel) for f in in_impl} == {("kernel-language-not-allowed", "pool")}
    assert "undeclared-kernel" not in {f.rule_id for f in filled.findings}


def test_draft_output_never_inside_the_implementation(tmp_path: Path) -> None:
    tree = fixture_round(tmp_path)
    before = tree_digest(tree)
    code, _, err = invoke("manifest", "draft", str(tree / IMPL), "--output", str(tree / IMPL / MANIFEST_NAME))
    assert code == 2 and "inside the checked tree" in err and tree_digest(tree) == before
    code, _, _ = invoke("manifest", "draft", str(tree / IMPL), "--output", str(tmp_path / "draft.yaml"))
    assert code == 0 and "FILL-IN" in (tmp_path / "draft.yaml").read_text()
