"""Reference DLRM embedding kernels: CUDA C++ sources compiled at run time with NVRTC.

``import reference_kernels`` is cheap: torch and the CUDA bindings are imported on
first use. Public API (see docs/kernels.md):

* ``embedding_bag(...)``: same arguments and result as ``torch.nn.functional.embedding_bag``
* ``embedding(...)``: same as ``torch.nn.functional.embedding``
* ``EmbeddingBag`` / ``Embedding``: drop-ins for the ``torch.nn`` modules
* ``CheckMode``: the index range check's modes (``check_indices=`` takes them, their names, a bool or None);
  ``EmbeddingIndexError``: raised by the index range check; ``EmbeddingIndexWarning``: its
  warn mode's warning; ``check_index_errors()``: surface a deferred check's error now
* ``KERNEL_SOURCES``: the ``.cu`` files, for compile checks and the manifest
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import host as _host
from . import host_binding as _host_binding
from .errors import INDEX_CHECK_MODES, CheckMode, EmbeddingIndexError, EmbeddingIndexWarning
from .host import LOADED as _HOST_PATH  # imports neither torch nor the CUDA bindings

# The compiled host path, once loaded, is bound by the layers above it (host_binding.py imports
# them on first use): the top of the package wires it, so host.py imports nothing above it.
_host.use_binding(_host_binding.BINDING)

if TYPE_CHECKING:
    from torch import Tensor

KERNEL_DIR = Path(__file__).resolve().parent
KERNEL_SOURCES: tuple[str, ...] = (
    "embedding_bag_forward.cu",
    "embedding_bag_backward.cu",
    "embedding_gather.cu",
    "index_check.cu",
    "sparse_update.cu",
    "lookup_prepare.cu",
    "radix_sort.cu",
    "quantized_forward.cu",
)

__all__ = ["INDEX_CHECK_MODES", "CheckMode", "EmbeddingBag", "Embedding", "EmbeddingIndexError",
           "EmbeddingIndexWarning", "KERNEL_SOURCES", "check_index_errors", "embedding", "embedding_bag"]

def check_index_errors(device: Any = None) -> None:
    """Synchronise ``device`` (default: the current CUDA device) and raise the first error its
    deferred index checks recorded since the last report (``EmbeddingIndexError``; warn mode's
    findings as one ``EmbeddingIndexWarning``). Returns None when every check passed."""
    from . import index_check

    index_check.check_index_errors(device)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm: float | None = None,
                  norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None, *, check_indices: CheckMode | str | bool | None = None) -> Tensor:
    """Pooled lookup; arguments and result of ``torch.nn.functional.embedding_bag``, plus
    keyword ``check_indices``: one of INDEX_CHECK_MODES, True ("sync"), False ("ignore") or None
    (REFERENCE_KERNELS_INDEX_CHECK, else "deferred")."""
    # straight to the implementation, arguments by position (a call layer and *args / **kwargs
    # cost host time per call)
    api = _IMPLEMENTATION[0] if _IMPLEMENTATION else _implementation()
    if _HOST_PATH and not (host_path := _HOST_PATH[0]).is_compiling():  # the compiled host path (host.py)
        # the mode resolved here: the library takes a CheckMode, and reads no environment
        served: Tensor | None = host_path.bag(input, weight, offsets, max_norm, scale_grad_by_freq, mode, sparse,
                                              per_sample_weights, include_last_offset, padding_idx,
                                              api.resolve_mode(check_indices))
        if served is not None:
            return served
    pooled: Tensor = api.embedding_bag_with(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode,
                                            sparse, per_sample_weights, include_last_offset, padding_idx,
                                            check_indices, None)
    return pooled


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False, *,
              check_indices: CheckMode | str | bool | None = None) -> Tensor:
    """Unpooled lookup; arguments and result of ``torch.nn.functional.embedding``, plus
    keyword ``check_indices``."""
    api = _IMPLEMENTATION[0] if _IMPLEMENTATION else _implementation()
    rows: Tensor = api.embedding_with(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                                      check_indices, None)
    return rows


_IMPLEMENTATION: list[Any] = []  # the api module once imported (not functools.cache: dynamo warns on it)


def _implementation() -> Any:
    """The implementation module, imported on first use (an import statement per call costs
    about a microsecond of host time)."""
    if not _IMPLEMENTATION:
        from . import api

        _IMPLEMENTATION.append(api)
    return _IMPLEMENTATION[0]


def __getattr__(name: str) -> Any:
    if name == "optim":  # the fused optimizers' specs (imports no torch)
        import importlib

        return importlib.import_module(f"{__name__}.optim")
    if name in ("EmbeddingBag", "Embedding"):
        from . import modules

        return getattr(modules, name)
    raise AttributeError(f"module 'reference_kernels' has no attribute {name!r}")
