"""Shared pytest configuration: the ``cuda`` marker skips cleanly without a GPU."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile

import pytest


@functools.cache
def cuda_available() -> bool:
    """True when torch imports and sees a CUDA device (never raises)."""
    try:
        import torch
    except Exception:  # torch missing or broken: no GPU tests
        return False
    return bool(torch.cuda.is_available())


# The compiled host path (reference_kernels/host.py): built before the first GPU call returns, so
# every GPU test takes it where it serves the call; never built by a run without a GPU.
os.environ.setdefault("REFERENCE_KERNELS_HOST_PATH", "wait" if cuda_available() else "off")


# `compliance check` keeps a scan cache in the user's cache directory: the tests' many temporary
# trees get one of their own, removed at the end.
if "COMPLIANCE_SCAN_CACHE" not in os.environ:
    os.environ["COMPLIANCE_SCAN_CACHE"] = tempfile.mkdtemp(prefix="compliance-scan-cache-")
    atexit.register(shutil.rmtree, os.environ["COMPLIANCE_SCAN_CACHE"], True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_cuda = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords and not cuda_available():
            item.add_marker(skip_cuda)
