"""Shared fixtures of the verification tests: one build directory per session, outside the tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
CPU_TREE = FIXTURES / "cpu"
CUDA_TREE = FIXTURES / "cuda"
RULES = "training/proposal-custom-kernels"


@pytest.fixture(scope="session")
def build_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$COMPLIANCE_TEST_BUILD_DIR`` (to reuse builds between runs) or a fresh directory."""
    reuse = os.environ.get("COMPLIANCE_TEST_BUILD_DIR")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("verify-builds")
CPU_BATCHED_TREE = FIXTURES / "cpu_batched"
CUDA_BATCHED_TREE = FIXTURES / "cuda_batched"
CPU_SHAPES_TREE = FIXTURES / "cpu_shapes"
