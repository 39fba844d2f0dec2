"""Shared pytest configuration: the ``cuda`` marker skips cleanly without a GPU."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from compliance.catalogue.blobs import ProjectBlobs


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


class UpstreamBlobs:
    """Test contents registered as upstream versions of catalogued projects (the blob catalogue)."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, bytes]] = {}
        self.built: dict[str, ProjectBlobs] | None = None

    def add(self, project_id: str, files: Mapping[str, str | bytes]) -> None:
        """Make ``files`` (copy-relative path -> content) versions of catalogue entry ``project_id``."""
        from compliance.vendored_trees import load_catalogue

        repository = next(e.repository for e in load_catalogue() if e.id == project_id)
        self.built = None
        self.files.setdefault(repository, {}).update(
            {path: data.encode() if isinstance(data, str) else data for path, data in files.items()})

    def catalogue(self) -> dict[str, ProjectBlobs]:
        """The shipped catalogue with every registered project replaced by what was registered."""
        from compliance.catalogue.blobs import ID_BYTES, ProjectBlobs, load_blob_catalogue
        from compliance.upstream.blobs import normalized_blob_hash

        if self.built is not None:
            return self.built
        merged = dict(load_blob_catalogue())
        for repository, files in self.files.items():
            paths = tuple(sorted(files))
            blobs: dict[bytes, tuple[tuple[int, ...], int, int]] = {}
            for index, path in enumerate(paths):
                short = bytes.fromhex(normalized_blob_hash(files[path])[:2 * ID_BYTES])
                blobs[short] = (tuple(sorted({*blobs.get(short, ((), 0, 0))[0], index})), 0, 0)
            merged[repository] = ProjectBlobs(repository, ("v1.0",), paths, blobs)
        self.built = merged
        return merged


@pytest.fixture
def upstream_blobs(monkeypatch: pytest.MonkeyPatch) -> UpstreamBlobs:
    """Register test contents as upstream blobs (the shipped ones are real projects' code, which
    fixtures never copy)."""
    from compliance import vendored_trees

    fake = UpstreamBlobs()
    monkeypatch.setattr(vendored_trees, "load_blob_catalogue", fake.catalogue)
    return fake
