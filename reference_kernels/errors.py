"""The index range check's public names: its modes and what it raises and warns. The lowest module of
the package (it imports nothing), so the check and the ops import them without importing the package
``__init__``, which imports them (no circle); ``reference_kernels`` re-exports all three."""

from __future__ import annotations

# check_indices= values besides True ("sync"), False ("ignore") and None (the environment's);
# semantics in docs/kernels.md, "Index range check"
INDEX_CHECK_MODES: tuple[str, ...] = ("deferred", "warn", "sync", "ignore")


class EmbeddingIndexError(IndexError):
    """An index is outside [0, num_embeddings), or the offsets are not a valid CSR layout."""


class EmbeddingIndexWarning(UserWarning):
    """check_indices="warn": out-of-range indices were read as row 0 of their table (counted)."""
