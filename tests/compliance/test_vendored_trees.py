"""Vendored trees recognised by the catalogue; roots never hidden; build output never source."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compliance.blob_catalogue import load_blob_catalogue
from compliance.engine import run_check
from compliance.errors import InputError
from compliance.inventory import build_inventory
from compliance.vendored_trees import load_catalogue
from tests.compliance.test_inventory import make
from tests.compliance.treeutil import BASE, fake_binary
from tests.conftest import UpstreamBlobs

IMPL = "Acme/benchmarks/dlrm/implementations/torch"
KERNEL = "__global__ void k(float* x) { x[threadIdx.x] = 0.f; }\n"
UPSTREAM_KERNEL = KERNEL + "// upstream's own kernel, with enough bytes to count as evidence of a copy\n"
CATALOGUE = load_catalogue()
CATALOGUE_BY_ID = {e.id: e for e in CATALOGUE}
REQUIRED = {"nccl", "apex", "megatron-lm", "transformer-engine", "cutlass", "maskrcnn-benchmark", "fairseq",
            "mxnet", "hugectr", "nemo", "deepspeed", "vllm", "loadgen", "googletest"}
WITH_BLOBS = {e.id for e in CATALOGUE if e.repository in load_blob_catalogue()}
"""Projects the shipped blob catalogue holds (vllm's history is too large to fetch here)."""


def signature_files(entry_id: str, top: str, upstream: UpstreamBlobs | None = None) -> dict[str, str]:
    """The catalogue entry's signature paths under ``top`` (directories get a placeholder file);
    with ``upstream``, their contents are registered as the project's upstream blobs too."""
    entry = next(e for e in CATALOGUE if e.id == entry_id)
    files = {}
    for sig in entry.signature:
        rel = f"{sig}README.md" if sig.endswith("/") else sig
        files[rel] = f"signature file {rel} of {entry.name}, long enough to count as evidence of a copy\n" * 2
    if upstream is not None:
        upstream.add(entry_id, files)
    return {f"{top}/{rel}": text for rel, text in files.items()}


def round_tree(tmp_path: Path, extra: dict[str, str | bytes]) -> Path:
    tree = tmp_path / "round"
    shutil.copytree(BASE, tree)
    return make(tree, extra)


def test_catalogue_lists_the_projects_submissions_copy() -> None:
    assert REQUIRED <= {e.id for e in CATALOGUE}
    assert all(e.repository.startswith("https://") and 1 <= e.min_match <= len(e.signature) for e in CATALOGUE)


def test_a_bad_catalogue_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "catalogue.yaml"
    bad.write_text("catalogue_version: 1\nprojects:\n  - id: x\n    name: X\n    repository: ftp://x\n"
                   "    signature: [a]\n")
    with pytest.raises(InputError) as caught:
        load_catalogue(bad)
    assert str(bad) in str(caught.value) and caught.value.line == 5


@pytest.mark.parametrize("entry_id", sorted(e.id for e in CATALOGUE))
def test_each_catalogue_entry_recognised_from_its_signature(entry_id: str, tmp_path: Path,
                                                            upstream_blobs: UpstreamBlobs) -> None:
    top = f"{IMPL}/deps-copy/{entry_id}"
    with_blobs = entry_id in WITH_BLOBS
    if with_blobs:
        upstream_blobs.add(entry_id, {"src/kern.cu": UPSTREAM_KERNEL})
    files: dict[str, str | bytes] = {**signature_files(entry_id, top, upstream_blobs if with_blobs else None),
                                     f"{top}/src/kern.cu": UPSTREAM_KERNEL}
    inv = build_inventory(round_tree(tmp_path, files), "training")
    trees = {t.path: t for t in inv.vendored}
    assert trees[top].project == entry_id and trees[top].native_files == 1
    assert next(n for n in inv.native if n.path == f"{top}/src/kern.cu").vendored_tree == top


@pytest.mark.parametrize("entry_id", sorted(WITH_BLOBS))
def test_signature_files_that_are_no_upstream_blobs_make_no_copy(entry_id: str, tmp_path: Path) -> None:
    """Issue 50 class 6: a directory named like the project, holding its signature paths of real size
    (not upstream content) and a kernel at a path the real project has, is no copy: the kernel is
    the submitter's."""
    top = f"{IMPL}/third_party/{entry_id}"
    upstream_path = next(iter(load_blob_catalogue()[CATALOGUE_BY_ID[entry_id].repository].paths))
    files: dict[str, str | bytes] = {**signature_files(entry_id, top), f"{top}/{upstream_path}": KERNEL}
    report = run_check(round_tree(tmp_path, files))
    assert not any(t.project for t in report.inventory.vendored)
    assert f"{top}/{upstream_path}" in {f.path for f in report.findings if f.rule_id == "undeclared-kernel"}
    assert "vendored-unproven" not in {f.rule_id for f in report.findings}


@pytest.mark.parametrize("entry_id", ["hugectr", "maskrcnn-benchmark"])
def test_an_implementation_that_is_a_fork_is_named_and_its_kernels_listed(entry_id: str, tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {**signature_files(entry_id, IMPL), f"{IMPL}/csrc/fork_kernel.cu": KERNEL}
    report = run_check(round_tree(tmp_path, files))
    assert not report.inventory.vendored
    assert [(f.project, f.path) for f in report.inventory.forks] == [(entry_id, IMPL)]
    undeclared = [f.path for f in report.findings if f.rule_id == "undeclared-kernel"]
    assert undeclared == [f"{IMPL}/csrc/fork_kernel.cu"]
    assert [f.path for f in report.findings if f.rule_id == "implementation-fork"] == [IMPL]


def test_a_forks_files_are_judged_by_content(tmp_path: Path, upstream_blobs: UpstreamBlobs) -> None:
    """Issue 55: an implementation that is a copy of MXNet (Fujitsu's in Training v0.7) is named as a
    fork; its files that are upstream blobs are proven, a changed one is named as a modified upstream
    file, one at a path upstream never had is the submitter's."""
    upstream = {"src/operator/nn/softmax.cu": UPSTREAM_KERNEL,
                "src/operator/nn/pool.cu": UPSTREAM_KERNEL.replace("k(", "p("),
                "third_party/ctc/ctc_kernels.cu": UPSTREAM_KERNEL.replace("k(", "c(")}  # in a marker tree
    upstream_blobs.add("mxnet", upstream)
    files: dict[str, str | bytes] = {**signature_files("mxnet", IMPL, upstream_blobs),
                                     **{f"{IMPL}/{path}": text for path, text in upstream.items()},
                                     f"{IMPL}/src/operator/nn/norm_convolution.cu": KERNEL.replace("k(", "n(")}
    files[f"{IMPL}/src/operator/nn/pool.cu"] = UPSTREAM_KERNEL.replace("k(", "q(")
    report = run_check(round_tree(tmp_path, files))
    assert [(f.project, f.path, f.proven) for f in report.inventory.forks] == [("mxnet", IMPL, 2)]
    undeclared = {f.path: f.message for f in report.findings if f.rule_id == "undeclared-kernel"}
    assert set(undeclared) == {f"{IMPL}/src/operator/nn/pool.cu", f"{IMPL}/src/operator/nn/norm_convolution.cu"}
    assert "modified copy of MXNet's src/operator/nn/pool.cu" in undeclared[f"{IMPL}/src/operator/nn/pool.cu"]
    assert "upstream never had this path" in undeclared[f"{IMPL}/src/operator/nn/norm_convolution.cu"]


def test_licence_at_organization_and_implementation_root_hides_nothing(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {"Acme/LICENSE": "Apache-2.0\n", f"{IMPL}/LICENSE.md": "BSD\n"}
    files.update({f"{IMPL}/csrc/k{i}.cu": KERNEL for i in range(60)})
    files.update({f"{IMPL}/csrc/h{i}.h": "#pragma once\n" for i in range(30)})
    report = run_check(round_tree(tmp_path, files))
    assert not report.inventory.vendored and not report.inventory.forks
    undeclared = {f.path for f in report.findings if f.rule_id == "undeclared-kernel"}
    assert undeclared == {f"{IMPL}/csrc/k{i}.cu" for i in range(60)}
    assert "vendored-unproven" not in {f.rule_id for f in report.findings}


def test_licensed_library_counts_sources_not_only_kernel_markers(tmp_path: Path) -> None:
    lib = f"{IMPL}/collectives"
    files: dict[str, str | bytes] = {f"{lib}/LICENSE.txt": "BSD\n", f"{lib}/src/device/all_reduce.cu": KERNEL}
    files.update({f"{lib}/src/misc/f{i}.cc": "int f() { return 0; }\n" for i in range(60)})
    inv = build_inventory(round_tree(tmp_path, files), "training")
    assert [(t.path, t.native_files, t.source_files) for t in inv.vendored] == [(lib, 1, 61)]


def test_nested_cutlass_inside_transformer_engine(tmp_path: Path, upstream_blobs: UpstreamBlobs) -> None:
    te = f"{IMPL}/TransformerEngine"
    upstream_blobs.add("transformer-engine", {"transformer_engine/common/gemm.cu": UPSTREAM_KERNEL})
    upstream_blobs.add("cutlass", {"include/cutlass/gemm.cu": UPSTREAM_KERNEL.replace("k(", "g(")})
    gemm = UPSTREAM_KERNEL.replace("k(", "g(")
    files: dict[str, str | bytes] = {**signature_files("transformer-engine", te, upstream_blobs),
                                     **signature_files("cutlass", f"{te}/3rdparty/cutlass", upstream_blobs),
                                     f"{te}/3rdparty/cutlass/include/cutlass/gemm.cu": gemm,
                                     f"{te}/transformer_engine/common/gemm.cu": UPSTREAM_KERNEL}
    report = run_check(round_tree(tmp_path, files))
    trees = [(t.path, t.project, t.parent, t.native_files, t.proven) for t in report.inventory.vendored]
    assert trees == [(te, "transformer-engine", None, 2, 1), (f"{te}/3rdparty/cutlass", "cutlass", te, 1, 1)]
    assert not {"undeclared-kernel", "vendored-unproven"} & {f.rule_id for f in report.findings}


def test_own_python_package_named_like_a_marker_is_not_vendored(tmp_path: Path) -> None:
    pkg = f"{IMPL}/nemo_fork/collections/asr/parts/submodules"
    files: dict[str, str | bytes] = {f"{pkg}/__init__.py": "", f"{pkg}/rnnt/fast_loss.py":
                                     "import triton\n\n@triton.jit\ndef loss(x):\n    pass\n"}
    report = run_check(round_tree(tmp_path, files))
    assert not report.inventory.vendored
    assert [f.path for f in report.findings if f.rule_id == "undeclared-kernel"] == [f"{pkg}/rnnt/fast_loss.py"]


def test_build_directory_products_are_judged_like_any_and_logs_are_never_source(tmp_path: Path) -> None:
    """Issue 40 items 3 and 4: an object file of a shipped source is one build-products-committed
    warning for its build directory; a module nothing builds is binary-without-source; ninja's logs
    inside a build directory are products, not code; a log or cache outside one is examined like
    any file (its markers count), and the cache directories are reported."""
    temp = f"{IMPL}/build/temp.linux-x86_64-3.10"
    files: dict[str, str | bytes] = {
        f"{temp}/.ninja_deps": b"\x00\x01 /usr/include/torch/extension.h pybind11/pybind11.h",
        f"{temp}/build.ninja": "command = nvcc -I torch/extension.h -c emb.cu\n",
        f"{temp}/kernels/emb.o": fake_binary("elf-o"),
        f"{IMPL}/build/lib.linux-x86_64-3.10/fastemb.so": fake_binary("elf-so"),
        f"{IMPL}/.ninja_log": "# ninja log v5 __global__\n",
        f"{IMPL}/fastemb.egg-info/SOURCES.txt": "kernels/emb.cu\n",
        f"{IMPL}/__pycache__/setup.cpython-310.pyc": b"\x00PYBIND11_MODULE __global__",
    }
    report = run_check(round_tree(tmp_path, files))
    assert {n.path for n in report.inventory.native} == {
        f"{IMPL}/kernels/emb.cu", f"{IMPL}/.ninja_log", f"{IMPL}/__pycache__/setup.cpython-310.pyc"}
    assert report.inventory.metadata_dirs == (f"{IMPL}/__pycache__", f"{IMPL}/fastemb.egg-info")
    found = {(f.rule_id, f.path) for f in report.findings}
    assert {("build-products-committed", temp),
            ("binary-without-source", f"{IMPL}/build/lib.linux-x86_64-3.10/fastemb.so")} <= found
    assert not any(f.path.startswith(f"{temp}/") for f in report.findings)


def test_implementation_root_is_never_vendored_whatever_its_depth(tmp_path: Path) -> None:
    """Issue 39 item 1: benchmarks/<b>/implementation/<framework>/ and
    implementations/<system>/<framework>/ roots holding a maskrcnn-benchmark signature are forks:
    every kernel is reported, as for the usual depth."""
    tops = ("Acme/benchmarks/dlrm/implementation/pytorch", "Acme/benchmarks/dlrm/implementations/dgx_a100/pytorch")
    files: dict[str, str | bytes] = {}
    for top in tops:
        files.update({**signature_files("maskrcnn-benchmark", top),
                      f"{top}/maskrcnn_benchmark/csrc/cuda/nhwc/conv.cu": KERNEL})
    report = run_check(round_tree(tmp_path, files))
    assert {f.path for f in report.inventory.forks} == set(tops)
    assert not report.inventory.vendored
    undeclared = {f.path for f in report.findings if f.rule_id == "undeclared-kernel"}
    assert {f"{top}/maskrcnn_benchmark/csrc/cuda/nhwc/conv.cu" for top in tops} <= undeclared


def test_require_upstream_makes_an_unproven_copy_an_error(tmp_path: Path) -> None:
    """A copy of a project the blob catalogue lacks (vllm) cannot be proven statically."""
    from compliance.model import CheckOptions

    top = f"{IMPL}/deps/vllm"
    tree = round_tree(tmp_path, {**signature_files("vllm", top), f"{top}/csrc/attention/paged.cu": KERNEL})
    static = run_check(tree)
    gate = run_check(tree, CheckOptions(require_upstream=True))
    levels = [(f.rule_id, f.severity.value) for r in (static, gate) for f in r.findings if f.path == top]
    assert levels == [("vendored-unproven", "warning"), ("vendored-unproven", "error")]
    assert static.exit_code == 0 and gate.exit_code == 1


@pytest.mark.parametrize(("project", "upstream_file", "own_file"), [
    ("apex", "csrc/multi_tensor_adam.cu", "csrc/my_custom_kernel.cu"),
    ("apex", "csrc/megatron/scaled_masked_softmax_cuda.cu", "csrc/megatron/my_fused_rope.cu"),
    ("megatron-lm", "megatron/fused_kernels/scaled_masked_softmax_cuda.cu", "megatron/fused_kernels/my_gelu.cu"),
    ("megatron-lm", "megatron/core/datasets/helpers.cpp", "megatron/core/datasets/my_sampler.cu"),
    ("cutlass-1", "cutlass/gemm/block_task.h", "cutlass/gemm/my_fused_epilogue.h"),
    ("cutlass", "include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp",
     "include/cutlass/gemm/kernel/sm90_gemm_my_fused_moe.hpp"),
    ("cutlass", "include/cutlass/epilogue/thread/linear_combination_gelu.h",
     "include/cutlass/epilogue/thread/linear_combination_my_swiglu.h"),
    ("cutlass", "include/cutlass/gemm/threadblock/mma_multistage.h",
     "include/cutlass/gemm/threadblock/mma_multistage_my_int4.h"),
    ("transformer-engine", "transformer_engine/common/layer_norm/ln_fwd_cuda_kernel.cu",
     "transformer_engine/common/layer_norm/ln_fwd_nhwc_kernel.cu"),
    ("transformer-engine", "transformer_engine/common/util/cast_kernels.cuh",
     "transformer_engine/common/fused_attn/my_fused_attn_fp8.cu"),
    ("deepspeed", "csrc/transformer/softmax_kernels.cu", "csrc/transformer/my_fused_softmax.cu"),
    ("deepspeed", "csrc/transformer/inference/csrc/gelu.cu", "csrc/my_ops/fused_bias_gelu.cu"),
    ("nccl", "src/device/common.cu", "src/device/my_fused_allreduce.cu"),
    ("nccl", "src/collectives/device/all_reduce.cu", "src/collectives/device/my_alltoall.cu"),
    ("nccl", "src/collectives/device/functions.cu", "src/collectives/device/msccl_kernel.cu"),
    ("hugectr", "HugeCTR/src/embeddings/hybrid_embedding/frequent_embedding.cu",
     "HugeCTR/src/embeddings/hybrid_embedding/my_fused_frequent_lookup.cu"),
    ("hugectr", "HugeCTR/src/layers/interaction_layer.cu", "HugeCTR/src/layers/my_fused_interaction_layer.cu"),
    ("googletest", "googletest/src/gtest-port.cc", "googletest/src/gtest-cuda-kernels.cc"),
    ("googletest", "googlemock/include/gmock/gmock-actions.h", "googlemock/include/gmock/my_fused_gemm.h"),
    ("loadgen", "bindings/python_api.cc", "bindings/my_gpu_preprocess.cc"),
    ("loadgen", "tests/basic.cc", "tests/my_harness_kernel.cc"),
    ("nemo", "nemo/collections/nlp/data/language_modeling/megatron/helpers.cpp",
     "nemo/collections/nlp/data/language_modeling/megatron/my_packing_kernel.cu"),
    ("vllm", "csrc/mamba/mamba_ssm/selective_scan_fwd.cu", "csrc/mamba/mamba_ssm/my_selective_scan_bwd.cu"),
    ("vllm", "csrc/prepare_inputs/advance_step.cu", "csrc/prepare_inputs/my_advance_step_fused.cu"),
    ("vllm", "csrc/attention/mla/cutlass_sm100_mla/kernel/sm100_mla_tile_scheduler.hpp",
     "csrc/attention/mla/my_sparse_mla_decode.cu"),
    ("mxnet", "src/operator/nn/cudnn/cudnn_convolution-inl.h", "src/operator/nn/cudnn/cudnn_fused_conv_bn.cu"),
    ("mxnet", "src/operator/random/sample_op.cu", "src/operator/random/my_fused_dropout.cu"),
])
def test_a_file_upstream_never_had_is_the_submitters_kernel(tmp_path: Path, project: str, upstream_file: str,
                                                            own_file: str, upstream_blobs: UpstreamBlobs) -> None:
    """Issue 39 items 1, 7 (catalogue path lists): inside a vendored apex, Megatron-LM, CUTLASS,
    TransformerEngine, DeepSpeed, NCCL, HugeCTR or another listed project's copy, a native file upstream never
    had under the listed directories is reported one by one (an MSCCL fork file is not upstream NCCL);
    upstream's own files stay with the copy."""
    top = f"{IMPL}/third_party/{project}"
    if project in WITH_BLOBS:
        upstream_blobs.add(project, {upstream_file: UPSTREAM_KERNEL})
    tree = round_tree(tmp_path, {**signature_files(project, top, upstream_blobs if project in WITH_BLOBS else None),
                                 f"{top}/{upstream_file}": UPSTREAM_KERNEL,
                                 f"{top}/{own_file}": KERNEL.replace("k(", "own(")})
    report = run_check(tree)
    undeclared = {f.path for f in report.findings if f.rule_id == "undeclared-kernel"}
    assert f"{top}/{own_file}" in undeclared
    assert f"{top}/{upstream_file}" not in undeclared
    assert [t.path for t in report.inventory.vendored if t.project == project] == [top]
