"""A synthetic round with what real results trees hold (the closing note's largest fixture round).

Six organizations: vendored NCCL copies with few kernel markers in three of
them, TransformerEngine with CUTLASS nested inside, Megatron-LM, a HugeCTR
fork, licence files at an organization root and an implementation root over
real custom kernels, committed build directories with ninja logs, the same
gather kernel in two submitters (one with CRLF line endings), NeMo's own
``submodules/`` package, and enough undeclared kernels for 2,000+ findings.
Signature files only: nothing here is copied from the projects; a test makes the copies' files
upstream content by registering them in the blob catalogue (``register_upstream``).

    PYTHONPATH=$PWD python3 -m tests.compliance.round_fixture ROUND_DIR [--wide]   # then: compliance check ROUND_DIR

``--wide`` adds 28 organizations (34 in all) with 30 kernels shared across organizations and
vendored copies of four more projects: the largest fixture round, too long for the grouped listing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.compliance.test_inventory import make
from tests.compliance.test_vendored_trees import signature_files
from tests.compliance.treeutil import fake_binary

if TYPE_CHECKING:
    from tests.conftest import UpstreamBlobs

KERNEL = "__global__ void {name}(float* x) {{ x[threadIdx.x] = {n}.f; }}\n"
SETUP = ("from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n"
         "setup(name='fused', ext_modules=[CUDAExtension('fused_ext', ['csrc/fused.cu'])])\n")
GATHER = "// gather rows\n__global__ void gather_rows(const float* t, const long* i, float* o) { o[0] = t[i[0]]; }\n"


def _org(name: str) -> dict[str, str | bytes]:
    return {f"{name}/systems/sys1.json": "{}\n", f"{name}/results/sys1/dlrm/result_0.txt": ":::MLLOG {}\n"}


def _kernels(base: str, count: int, tag: str) -> dict[str, str | bytes]:
    return {f"{base}/k{i:03d}.cu": KERNEL.format(name=f"{tag}_{i}", n=i) for i in range(count)}


# Twelve .cu files at paths upstream NCCL has had, registered as its versions (``register_upstream``),
# so every NCCL copy of the round is proven with nothing reported file by file.
_NCCL_UPSTREAM_CU = (*(f"src/collectives/device/{name}.cu" for name in (
    "all_gather", "all_reduce", "broadcast", "functions", "onerank_reduce", "reduce", "reduce_scatter", "sendrecv")),
    "src/device/common.cu", "src/device/onerank.cu", "src/collectives/all_reduce.cu", "src/collectives/reduce.cu")


def _nccl(top: str) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {**signature_files("nccl", top), f"{top}/LICENSE.txt": "BSD\n"}
    files.update({f"{top}/src/misc/m{i}.cc": f"int m{i}() {{ return {i}; }}\n" for i in range(40)})
    files.update({f"{top}/{path}": KERNEL.format(name=f"nccl_{i}", n=i) for i, path in enumerate(_NCCL_UPSTREAM_CU)})
    return files


def round_files() -> dict[str, str | bytes]:
    """Root-relative path -> content of the whole round."""
    files: dict[str, str | bytes] = {}
    for org in ("NVIDIA", "Google", "Intel", "Dell", "Lenovo", "HPE"):
        files.update(_org(org))
    nv = "NVIDIA/benchmarks"
    files["NVIDIA/LICENSE.md"] = "Apache-2.0\n"
    files.update(_kernels(f"{nv}/gnmt/implementations/pytorch/seq2seq/csrc", 30, "gnmt"))
    files.update(_kernels(f"{nv}/maskrcnn/implementations/pytorch/maskrcnn_benchmark/csrc/cuda", 40, "mrcnn"))
    files.update(signature_files("maskrcnn-benchmark", f"{nv}/maskrcnn/implementations/pytorch"))
    te = f"{nv}/gpt3/implementations/pytorch/TransformerEngine"
    files.update({**signature_files("transformer-engine", te), **signature_files("cutlass", f"{te}/3rdparty/cutlass")})
    files.update(_kernels(f"{te}/transformer_engine/common", 60, "te"))
    files.update(_kernels(f"{te}/3rdparty/cutlass/include/cutlass/gemm", 25, "cutlass"))
    files.update(signature_files("megatron-lm", f"{nv}/gpt3/implementations/pytorch/megatron-lm"))
    files.update(_nccl(f"{nv}/gpt3/implementations/pytorch/nccl"))
    files[f"{nv}/dlrm/implementations/hugectr/gather/gather_gpu.cu"] = GATHER
    files.update(signature_files("hugectr", f"{nv}/dlrm/implementations/hugectr"))
    files.update(_kernels(f"{nv}/dlrm/implementations/hugectr/HugeCTR/src", 20, "hugectr"))
    files["Google/benchmarks/dlrm/implementations/tf/LICENSE"] = "Apache-2.0\n"
    files.update(_kernels("Google/benchmarks/dlrm/implementations/tf/kernels", 55, "tpu_emb"))
    files["Google/benchmarks/dlrm/implementations/tf/kernels/gather_gpu.cu"] = GATHER.replace("\n", "\r\n").encode()
    for org in ("Dell", "Lenovo", "HPE"):
        impl = f"{org}/benchmarks/gpt3/implementations/pytorch"
        files.update(_nccl(f"{impl}/nccl"))
        files[f"{impl}/build/temp.linux-x86_64-3.8/.ninja_deps"] = b"\x00\x01 torch/extension.h pybind11/pybind11.h"
        files[f"{impl}/build/temp.linux-x86_64-3.8/csrc/fused.o"] = fake_binary("elf-o")
        files[f"{impl}/build/lib.linux-x86_64-3.8/fused_ext.so"] = fake_binary("elf-so")
        files[f"{impl}/csrc/fused.cu"] = KERNEL.format(name="fused_bias_gelu", n=1)
        files[f"{impl}/setup.py"] = SETUP
        for bench in ("bert", "resnet", "ssd", "rnnt", "unet3d"):
            files.update(_kernels(f"{org}/benchmarks/{bench}/implementations/pytorch/csrc", 110, f"{org}_{bench}"))
    nemo = "Intel/benchmarks/rnnt/implementations/pytorch/nemo_copy/nemo/collections/asr/parts/submodules"
    files[f"{nemo}/__init__.py"] = ""
    files[f"{nemo}/rnnt_loss.py"] = "import triton\n\n@triton.jit\ndef rnnt_loss(x):\n    pass\n"
    files.update(_kernels("Intel/benchmarks/bert/implementations/pytorch/csrc", 40, "intel_bert"))
    return files


WIDE_ORGS = 28
"""Organizations the wide round adds to the six of ``round_files`` (34 in all, as in Training v4.0)."""
SHARED_GROUPS = 30
"""Kernels each copied by two of the added organizations: 30 groups across organizations."""
WIDE_VENDORED = ("apex", "cutlass-1", "megatron-lm", "fairseq")
"""Projects the added organizations copy, one each in turn (besides the six's NCCL, TE, CUTLASS)."""


def wide_round_files() -> dict[str, str | bytes]:
    """``round_files`` plus 28 organizations: 30 kernels shared across organizations, vendored
    apex/CUTLASS 1.x/Megatron-LM/fairseq copies, benchmarks under the ``implementation/``
    variant (one layout note per organization), so the grouped listing cannot fit one report."""
    files = round_files()
    names = [f"Wide{i:02d}" for i in range(WIDE_ORGS)]
    for i, org in enumerate(names):
        files.update(_org(org))
        for bench in ("bert", "resnet", "ssd"):
            files.update(_kernels(f"{org}/benchmarks/{bench}/implementation/pytorch/csrc", 4, f"{org}_{bench}"))
        project = WIDE_VENDORED[i % len(WIDE_VENDORED)]
        files.update(signature_files(project, f"{org}/benchmarks/bert/implementation/pytorch/third_party/{project}"))
    for g in range(SHARED_GROUPS):
        kernel = KERNEL.format(name=f"shared_op_{g}", n=g)
        for org in (names[g % WIDE_ORGS], names[(g + 1) % WIDE_ORGS]):
            files[f"{org}/benchmarks/ssd/implementation/pytorch/ops/shared_op_{g}.cu"] = kernel
    return files


def register_upstream(upstream: UpstreamBlobs, wide: bool = False) -> None:
    """Make the round's copies upstream content: every signature file, NCCL's twelve kernels,
    TransformerEngine's and its nested CUTLASS's kernels (the maskrcnn-benchmark copy's kernels
    stay at paths upstream never had: the submitter's)."""
    for project in ("nccl", "maskrcnn-benchmark", "transformer-engine", "cutlass", "megatron-lm", "hugectr",
                    *(WIDE_VENDORED if wide else ())):
        signature_files(project, "-", upstream)
    upstream.add("nccl", {path: KERNEL.format(name=f"nccl_{i}", n=i) for i, path in enumerate(_NCCL_UPSTREAM_CU)})
    upstream.add("transformer-engine", {f"transformer_engine/common/k{i:03d}.cu": KERNEL.format(name=f"te_{i}", n=i)
                                        for i in range(60)})
    upstream.add("cutlass", {f"include/cutlass/gemm/k{i:03d}.cu": KERNEL.format(name=f"cutlass_{i}", n=i)
                             for i in range(25)})


def build_round(root: Path, wide: bool = False) -> Path:
    """Write the round under ``root`` (``wide``: the 34-organization round)."""
    return make(root, wide_round_files() if wide else round_files())


if __name__ == "__main__":
    build_round(Path(sys.argv[1]), wide="--wide" in sys.argv[2:])
