"""Shared pytest configuration: the ``cuda`` marker skips cleanly without a GPU."""

from __future__ import annotations

import functools
import os

import pytest

# pytester runs pytest in a subprocess on a generated project (the pytest plugin's tests).
pytest_plugins = ["pytester"]


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_cuda = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords and not cuda_available():
            item.add_marker(skip_cuda)
