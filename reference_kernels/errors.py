"""The index range check's public names: its modes and what it raises and warns. The lowest module of
the package (it imports nothing of it), so the check and the ops import them without importing the package
``__init__``, which imports them (no circle); ``reference_kernels`` re-exports them."""

from __future__ import annotations

import enum


class CheckMode(str, enum.Enum):
    """An index check mode, as ``check_indices=`` resolves (``index_check.resolve_mode``: True is
    SYNC, False IGNORE, None the environment's); semantics in docs/kernels.md, "Index range check".
    A str equal to its value, so a mode's name (and the compiled host path's string compare) takes it."""

    DEFERRED = "deferred"
    WARN = "warn"
    SYNC = "sync"
    IGNORE = "ignore"

    # str() and format() give the value on every Python (3.10's mixed-in enums give "CheckMode.SYNC")
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


# check_indices= values besides True ("sync"), False ("ignore") and None (the environment's)
INDEX_CHECK_MODES: tuple[str, ...] = tuple(mode.value for mode in CheckMode)


class EmbeddingIndexError(IndexError):
    """An index is outside [0, num_embeddings), or the offsets are not a valid CSR layout."""


class EmbeddingIndexWarning(UserWarning):
    """check_indices="warn": out-of-range indices were read as row 0 of their table (counted)."""
