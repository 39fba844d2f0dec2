"""Shared fixtures of the verification tests: one build directory per session, outside the tree."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

from compliance.engine import build_context
from compliance.findings import Finding
from compliance.verify import run_verification_checks
from compliance.verify.options import VerifyOptions

FIXTURES = Path(__file__).parent / "fixtures"
CPU_TREE = FIXTURES / "cpu"
CUDA_TREE = FIXTURES / "cuda"
RULES = "training/proposal-custom-kernels"


@pytest.fixture(scope="session")
def build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$COMPLIANCE_TEST_BUILD_DIR`` (where the runs' own build directories go) or a fresh directory."""
    reuse = os.environ.get("COMPLIANCE_TEST_BUILD_DIR")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("verify-builds")
CPU_BATCHED_TREE = FIXTURES / "cpu_batched"
CUDA_BATCHED_TREE = FIXTURES / "cuda_batched"
CPU_SHAPES_TREE = FIXTURES / "cpu_shapes"
CUDA_SHAPES_TREE = FIXTURES / "cuda_shapes"


def findings_by_kernel(tree: Path, build_root: Path, seed: int) -> dict[str, list[Finding]]:
    """Verify every kernel of ``tree`` on the CPU (no large table, no progress): findings per kernel id."""
    ctx, _ = build_context(tree, RULES)
    options = VerifyOptions(seed=seed, build_dir=build_root, large=False, progress=None)
    by_kernel: dict[str, list[Finding]] = defaultdict(list)
    for f in run_verification_checks(ctx, options):
        by_kernel[f.kernel or "-"].append(f)
    return by_kernel
CPU_QUANTIZED_TREE = FIXTURES / "cpu_quantized"
CUDA_QUANTIZED_TREE = FIXTURES / "cuda_quantized"
