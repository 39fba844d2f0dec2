"""Shared pytest configuration: the ``cuda`` marker skips cleanly without a GPU."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def cuda_available() -> bool:
    """True when torch imports and sees a CUDA device (never raises)."""
    try:
        import torch
    except Exception:  # torch missing or broken: no GPU tests
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_cuda = pytest.mark.skip(reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords and not cuda_available():
            item.add_marker(skip_cuda)
