"""User-facing functions with the arguments and results of ``torch.nn.functional``.

Validation happens here, on the host, before any kernel runs (argument shapes and
dtypes first, then the CUDA requirement, so both are testable on a CPU); the custom ops in
``ops.py`` receive contiguous tensors with one index dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from . import index_check, launch, ops
from .errors import CheckMode
from .index_check import resolve_mode

if TYPE_CHECKING:
    from .sparse_update import FusedState

MODES = ("sum", "mean", "max")
_IGNORE = CheckMode.IGNORE  # a module global: no enum attribute lookup per call
WEIGHT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)
_WEIGHT_DTYPES, _INDEX_DTYPES = frozenset(WEIGHT_DTYPES), frozenset(INDEX_DTYPES)  # a hash, not == down a tuple


def surface_errors(weight: Tensor) -> None:
    """At the start of each call: an earlier deferred or warn-mode index check on this device
    that failed raises (or warns) now. One read of a pinned host word; skipped while tracing."""
    if torch.compiler.is_compiling():
        return
    _surface_eager(weight.get_device())


def _surface_eager(device: int) -> None:
    """``surface_errors`` in eager mode, on ``device`` (``get_device()``: -1 off CUDA)."""
    if device >= 0 and index_check.FLAGS[device]:
        index_check.surface(device)


def _needs_grad(weight: Tensor, psw: Tensor | None = None) -> bool:
    """A backward may run (sparse gradients and fused optimizers take their own autograd path)."""
    return torch.is_grad_enabled() and (weight.requires_grad or (psw is not None and psw.requires_grad))


def _on_one_cuda_device(weight: Tensor, *others: Tensor | None) -> bool:
    """All given tensors on ``weight``'s device, a CUDA device (the cheap test of every call:
    ``is_cuda`` and ``get_device()`` return plain values, where ``.device`` makes a device object;
    ``_require_cuda`` says what is wrong when it fails)."""
    if not weight.is_cuda:
        return False
    device = weight.get_device()
    for t in others:
        if t is not None and t.get_device() != device:
            return False
    return True


def _require_cuda(fn: str, **tensors: Tensor | None) -> None:
    present = {name: t for name, t in tensors.items() if t is not None}
    for name, t in present.items():
        if t.device.type != "cuda":
            raise RuntimeError(
                f"reference_kernels.{fn} runs CUDA kernels only and needs CUDA tensors, but {name} is on "
                f"'{t.device}'. Move the inputs and the table to a GPU (e.g. .cuda()), or call "
                f"torch.nn.functional.{fn} on the CPU.")
    devices = {t.device for t in present.values()}
    if len(devices) > 1:
        raise RuntimeError(f"reference_kernels.{fn}: all tensors must be on one device, "
                           f"got {sorted(map(str, devices))}")


def _check_weight(fn: str, weight: Tensor) -> None:
    if weight.dim() == 2 and weight.dtype in _WEIGHT_DTYPES:
        return
    if weight.dim() != 2:
        raise ValueError(f"reference_kernels.{fn}: weight must be 2-D [num_embeddings, embedding_dim], "
                         f"got shape {tuple(weight.shape)}")
    if weight.dtype not in WEIGHT_DTYPES:
        raise TypeError(f"reference_kernels.{fn}: weight dtype must be float32, float16 or bfloat16, "
                        f"got {weight.dtype}")


def _check_index_dtype(fn: str, name: str, t: Tensor) -> None:
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"reference_kernels.{fn}: {name} must be int32 or int64, got {t.dtype}")


def _normalise_padding_idx(fn: str, padding_idx: int | None, num_embeddings: int) -> int:
    if padding_idx is None:
        return -1
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"reference_kernels.{fn}: padding_idx must be within [-{num_embeddings}, "
                         f"{num_embeddings}), got {padding_idx}")
    return padding_idx % num_embeddings


def _reject_unsupported(fn: str, scale_grad_by_freq: bool) -> None:
    if scale_grad_by_freq:
        raise NotImplementedError(f"reference_kernels.{fn}: scale_grad_by_freq=True is not supported")


def _renorm(weight: Tensor, indices: Tensor, max_norm: float | None, norm_type: float) -> None:
    """max_norm: rescale the looked-up rows in place first, exactly as torch does (torch's kernel).
    No index, no row to rescale: torch's CUDA kernel fails to launch on none ("invalid argument")."""
    if max_norm is not None and indices.numel():
        with torch.no_grad():
            torch.embedding_renorm_(weight, indices.reshape(-1), max_norm, norm_type)


def _bag_layout(input: Tensor, offsets: Tensor | None, include_last_offset: bool) -> tuple[Tensor, Tensor | None]:
    """Validate the fixed ([B, L], no offsets) or CSR (1-D + offsets) layout; one index dtype."""
    if (offsets is not None and input.dim() == 1 and offsets.dim() == 1 and input.dtype == offsets.dtype
            and input.dtype in _INDEX_DTYPES and (offsets.numel() or not include_last_offset)):
        return input.contiguous(), offsets.contiguous()  # the usual CSR call: every check below passes
    _check_index_dtype("embedding_bag", "input", input)
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("reference_kernels.embedding_bag: if input is 2-D [B, L], offsets must be None")
        if input.shape[1] == 0:
            raise ValueError(f"reference_kernels.embedding_bag: input is 2-D {list(input.shape)}, bags of length 0; "
                             "torch.nn.functional.embedding_bag refuses it too (its offsets would step by 0: "
                             "'step must be nonzero'). Pass empty bags as a 1-D input with offsets.")
        return input.contiguous(), None
    if input.dim() != 1:
        raise ValueError(f"reference_kernels.embedding_bag: input must be 1-D (with offsets) or 2-D, "
                         f"got {input.dim()}-D")
    if offsets is None:
        raise ValueError("reference_kernels.embedding_bag: offsets must be given when input is 1-D")
    _check_index_dtype("embedding_bag", "offsets", offsets)
    if offsets.dim() != 1:
        raise ValueError(f"reference_kernels.embedding_bag: offsets must be 1-D, got {offsets.dim()}-D")
    if include_last_offset and offsets.numel() == 0:
        raise ValueError("reference_kernels.embedding_bag: include_last_offset=True needs at least one offset")
    if offsets.dtype != input.dtype:
        input, offsets = input.to(torch.int64), offsets.to(torch.int64)
    return input.contiguous(), offsets.contiguous()


def _check_per_sample_weights(psw: Tensor | None, mode: str, input: Tensor, weight: Tensor) -> Tensor | None:
    if psw is None:
        return None
    if mode != "sum":
        raise NotImplementedError(
            f"reference_kernels.embedding_bag: per_sample_weights is only supported for mode='sum' "
            f"(got mode='{mode}'), as in torch")
    if psw.shape != input.shape:
        raise ValueError(f"reference_kernels.embedding_bag: per_sample_weights must have the shape of input "
                         f"{tuple(input.shape)}, got {tuple(psw.shape)}")
    if psw.dtype != weight.dtype:
        raise TypeError(f"reference_kernels.embedding_bag: per_sample_weights dtype {psw.dtype} must match "
                        f"weight dtype {weight.dtype}")
    return psw.contiguous()


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2.0,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None, *, check_indices: CheckMode | str | bool | None = None) -> Tensor:
    """Drop-in for ``torch.nn.functional.embedding_bag`` on CUDA tensors (see docs/kernels.md)."""
    return embedding_bag_with(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                              per_sample_weights, include_last_offset, padding_idx, check_indices, None)


def embedding_bag_with(input: Tensor, weight: Tensor, offsets: Tensor | None, max_norm: float | None,
                       norm_type: float, scale_grad_by_freq: bool, mode: str, sparse: bool,
                       per_sample_weights: Tensor | None, include_last_offset: bool, padding_idx: int | None,
                       check_indices: bool | str | None, fused: FusedState | None) -> Tensor:
    """``embedding_bag``, optionally with a fused optimizer (``fused``: the module's state).
    Positional parameters: a call passes them faster than keywords. Every call runs this body,
    so the checks that pass on a usual call are tested inline and their functions called only
    to raise (each Python call costs host time: docs/perf/comment-figures.md)."""
    if not (weight.dim() == 2 and weight.dtype in _WEIGHT_DTYPES):
        _check_weight("embedding_bag", weight)
    if mode not in MODES:
        raise ValueError(f"reference_kernels.embedding_bag: mode must be one of {MODES}, got {mode!r}")
    if scale_grad_by_freq:
        _reject_unsupported("embedding_bag", scale_grad_by_freq)
    if mode == "max" and (sparse or fused is not None):
        raise ValueError("reference_kernels.embedding_bag: max mode does not support sparse weights "
                         "(sparse=True or a fused optimizer), as in torch")
    indices, offsets = _bag_layout(input, offsets, include_last_offset)
    psw = None if per_sample_weights is None else _check_per_sample_weights(per_sample_weights, mode, input, weight)
    pad = -1 if padding_idx is None else _normalise_padding_idx("embedding_bag", padding_idx, weight.shape[0])
    check = _IGNORE if check_indices is False else resolve_mode(check_indices)  # once per call
    device = weight.get_device()
    if not (weight.is_cuda and input.get_device() == device and (offsets is None or offsets.get_device() == device)
            and (psw is None or psw.get_device() == device)):
        _require_cuda("embedding_bag", input=input, weight=weight, offsets=offsets,
                      per_sample_weights=per_sample_weights)
    compiling = torch.compiler.is_compiling()
    if not compiling and device >= 0 and index_check.FLAGS[device]:  # an earlier deferred check failed
        index_check.surface(device)
    grad = torch.is_grad_enabled() and (weight.requires_grad or (psw is not None and psw.requires_grad))
    last = include_last_offset and offsets is not None
    # a forward alone checks its indices in the lookup where the kernel can (bag_forward runs the
    # pass where not); the backward and max_norm read the pass's copies
    check_inside = check != "ignore" and not (grad or compiling) and max_norm is None and weight.shape[0] > 0
    if check != "ignore" and not check_inside:
        indices, offsets = ops.checked(indices, offsets, weight.shape[0], check, "embedding_bag")
    if max_norm is not None:
        _renorm(weight, indices, max_norm, norm_type)
    weight = weight.contiguous()
    if (sparse or fused is not None) and grad:
        from .sparse_update import SparseBag

        bag: Tensor = SparseBag.apply(  # type: ignore[no-untyped-call]
            weight, indices, offsets, psw, mode, pad, last, fused)
        return bag
    if compiling:  # the registered op: dynamo traces it, with its fake implementation and autograd
        out: Tensor
        out, _ = ops.embedding_bag_op(weight, indices, offsets, psw, mode, pad, last,
                                       mode == "max" and grad and weight.requires_grad)
        return out
    if grad:  # the autograd Function: the op's saved state and backward without its Python dispatch
        return ops.EmbeddingBagFunction.run(weight, indices, offsets, psw, mode, pad, last,
                                             mode == "max" and weight.requires_grad)
    num_bags = indices.shape[0] if offsets is None else offsets.shape[0] - last  # ops.num_bags_of, inline
    looked_up, _ = launch.bag_forward(weight, indices, offsets, num_bags=num_bags, per_sample_weights=psw,
                                       mode=mode, padding_idx=pad, need_argmax=False,
                                       check=check if check_inside else None)
    return looked_up


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False, *,
              check_indices: CheckMode | str | bool | None = None) -> Tensor:
    """Drop-in for ``torch.nn.functional.embedding`` on CUDA tensors (see docs/kernels.md)."""
    return embedding_with(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, check_indices,
                          None)


def embedding_with(input: Tensor, weight: Tensor, padding_idx: int | None, max_norm: float | None,
                   norm_type: float, scale_grad_by_freq: bool, sparse: bool, check_indices: bool | str | None,
                   fused: FusedState | None) -> Tensor:
    """``embedding``, optionally with a fused optimizer (``fused``: the module's state)."""
    _check_weight("embedding", weight)
    _check_index_dtype("embedding", "input", input)
    _reject_unsupported("embedding", scale_grad_by_freq)
    pad = -1 if padding_idx is None else _normalise_padding_idx("embedding", padding_idx, weight.shape[0])
    check = _IGNORE if check_indices is False else resolve_mode(check_indices)  # once per call
    if not _on_one_cuda_device(weight, input):
        _require_cuda("embedding", input=input, weight=weight)
    compiling = torch.compiler.is_compiling()
    if not compiling:
        _surface_eager(weight.get_device())
    indices = input.contiguous()
    if check != "ignore":
        indices, _ = ops.checked(indices, None, weight.shape[0], check, "embedding")
    _renorm(weight, indices, max_norm, norm_type)
    if (sparse or fused is not None) and _needs_grad(weight):
        from .sparse_update import SparseEmbedding

        rows: Tensor = SparseEmbedding.apply(  # type: ignore[no-untyped-call]
            weight.contiguous(), indices, pad, fused)
        return rows
    weight = weight.contiguous()
    if compiling:
        looked_up: Tensor = ops.embedding_op(weight, indices, pad)
        return looked_up
    if _needs_grad(weight):
        return ops.EmbeddingFunction.run(weight, indices, pad)
    return ops.embedding_impl(weight, indices, pad)
