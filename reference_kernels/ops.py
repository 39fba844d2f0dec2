"""``torch.library`` custom ops (CUDA implementation, fake implementation, autograd).

Imported lazily by ``api.py`` on first use, so that ``import reference_kernels``
stays cheap. Ops (namespace ``reference_kernels``):

* ``index_check(indices, offsets, table_sizes, num_rows, bags_per_table, mode, op)
  -> (indices, offsets)``: the check pass (``index_check.py``); returns the copies the lookup
  reads (bad indices as row 0), so that autograd saves those for the backward
* ``embedding_bag(weight, indices, offsets, per_sample_weights, mode, padding_idx,
  include_last_offset, need_argmax) -> (out, argmax)``
* ``embedding(weight, indices, padding_idx) -> out``
* ``embedding_bag_backward(...) -> grad_weight`` (deterministic, see the kernel)

``*_impl`` are the ops' implementations. In eager mode ``api.py`` calls the forward directly
when no gradient may flow (``launch.bag_forward``, without the argmax placeholder the op's
schema needs; ``embedding_impl``), and ``EmbeddingBagFunction`` / ``EmbeddingFunction``
(plain autograd Functions with the ops' own saved state and backward) when one may: both save
the custom op's dispatch (docs/kernels.md, host overhead). torch.compile traces the registered
ops.
Arguments arrive validated and normalised by ``api.py`` (contiguous, one index
dtype, ``padding_idx`` in [0, num_embeddings) or -1).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import index_check, launch
from .errors import CheckMode, EmbeddingIndexError


def num_bags_of(indices: Tensor, offsets: Tensor | None, include_last_offset: bool) -> int:
    if offsets is None:
        return indices.shape[0]
    return offsets.shape[0] - int(include_last_offset)


def index_check_impl(indices: Tensor, offsets: Tensor | None, table_sizes: Tensor | None, num_rows: int,
                     bags_per_table: int, mode: str, op: str) -> tuple[Tensor, Tensor]:
    """Check ``indices`` (and ``offsets``) in ``mode`` ("deferred", "warn" or "sync"); the
    checked copies (offsets: empty when None)."""
    clean, clean_offsets = index_check.run_check(indices, offsets, num_rows=num_rows, table_sizes=table_sizes,
                                                 bags_per_table=bags_per_table, mode=mode, op=op)
    return clean, clean_offsets if clean_offsets is not None else clean.new_empty((0,))


index_check_op = torch.library.custom_op("reference_kernels::index_check", index_check_impl,
                                         mutates_args=(), device_types="cuda")


@index_check_op.register_fake
def _(indices: Tensor, offsets: Tensor | None, table_sizes: Tensor | None, num_rows: int,
      bags_per_table: int, mode: str, op: str) -> tuple[Tensor, Tensor]:
    dtype = index_check.clean_dtype(indices.numel(), num_rows, indices.dtype)
    return (indices.new_empty(indices.shape, dtype=dtype),
            indices.new_empty(offsets.shape if offsets is not None else (0,), dtype=dtype))


def checked(indices: Tensor, offsets: Tensor | None, num_rows: int, mode: CheckMode, op: str,
            table_sizes: Tensor | None = None, bags_per_table: int = 1) -> tuple[Tensor, Tensor | None]:
    """The indices and offsets a lookup reads under check mode ``mode`` (a custom op under
    torch.compile; a direct call otherwise: the check has no gradient, and this saves the
    dispatcher's host overhead)."""
    if mode == "ignore":
        return indices, offsets
    if num_rows == 0 and indices.numel() and table_sizes is None:
        raise EmbeddingIndexError(f"reference_kernels.{op}: the table has no rows, so none of the "
                                  f"{indices.numel()} indices is in range")
    if torch.compiler.is_compiling():
        # the op's schema takes a plain str (the mode's value)
        clean, clean_offsets = index_check_op(indices, offsets, table_sizes, num_rows, bags_per_table, mode.value, op)
        return clean, clean_offsets if offsets is not None else None
    return index_check.run_check(indices, offsets, num_rows=num_rows, table_sizes=table_sizes,
                                 bags_per_table=bags_per_table, mode=mode, op=op)


def embedding_bag_impl(weight: Tensor, indices: Tensor, offsets: Tensor | None,
                       per_sample_weights: Tensor | None, mode: str, padding_idx: int,
                       include_last_offset: bool, need_argmax: bool) -> tuple[Tensor, Tensor]:
    num_bags = num_bags_of(indices, offsets, include_last_offset)
    out, argmax = launch.bag_forward(weight, indices, offsets, num_bags=num_bags,
                                      per_sample_weights=per_sample_weights, mode=mode, padding_idx=padding_idx,
                                      need_argmax=need_argmax)
    return out, argmax if argmax is not None else indices.new_empty((0,), dtype=torch.int64)


embedding_bag_op = torch.library.custom_op("reference_kernels::embedding_bag", embedding_bag_impl,
                                           mutates_args=(), device_types="cuda")


@embedding_bag_op.register_fake
def _(weight: Tensor, indices: Tensor, offsets: Tensor | None, per_sample_weights: Tensor | None,
      mode: str, padding_idx: int, include_last_offset: bool, need_argmax: bool) -> tuple[Tensor, Tensor]:
    num_bags = num_bags_of(indices, offsets, include_last_offset)
    out = weight.new_empty((num_bags, weight.shape[1]))
    argmax = weight.new_empty((num_bags, weight.shape[1]) if need_argmax else (0,), dtype=torch.int64)
    return out, argmax


@torch.library.custom_op("reference_kernels::embedding_bag_backward", mutates_args=(), device_types="cuda")
def embedding_bag_backward_op(grad_out: Tensor, indices: Tensor, bag_of: Tensor | None, bag_size: int,
                              num_weights: int, per_sample_weights: Tensor | None,
                              bag_scale: Tensor | None, padding_idx: int, scale: float = 1.0) -> Tensor:
    return launch.bag_backward(grad_out.contiguous(), indices, bag_of, bag_size=bag_size, num_weights=num_weights,
                                per_sample_weights=per_sample_weights, bag_scale=bag_scale, padding_idx=padding_idx,
                                scale=scale)


@embedding_bag_backward_op.register_fake
def _(grad_out: Tensor, indices: Tensor, bag_of: Tensor | None, bag_size: int, num_weights: int,
      per_sample_weights: Tensor | None, bag_scale: Tensor | None, padding_idx: int,
      scale: float = 1.0) -> Tensor:
    return grad_out.new_empty((num_weights, grad_out.shape[1]))


def bag_of_positions(indices: Tensor, offsets: Tensor, include_last_offset: bool) -> Tensor:
    """Bag of every flat index position for the CSR layout; -1 where a position is in no bag
    (before the first offset, or after the last one with include_last_offset)."""
    n = indices.numel()
    num_bags = num_bags_of(indices, offsets, include_last_offset)
    starts = offsets[:num_bags].to(torch.int64)
    ends = offsets[1:num_bags + 1].to(torch.int64)
    if not include_last_offset:
        ends = torch.cat([ends, ends.new_full((1,), n)])
    pos = torch.arange(n, device=indices.device)
    bag = torch.searchsorted(starts, pos, right=True) - 1
    inside = (bag >= 0) & (pos < ends[bag.clamp(min=0)])
    return torch.where(inside, bag, -1)


def _bag_scale(indices: Tensor, bag_of: Tensor | None, num_bags: int, padding_idx: int) -> Tensor:
    """1 / (rows pooled per bag) for mean; 0 for empty bags. Integer counts: deterministic.
    (No boolean-mask indexing, so no data-dependent shapes under torch.compile.)"""
    valid = (indices.reshape(-1) != padding_idx).to(torch.int64)
    if bag_of is None:
        counts = valid.reshape(num_bags, -1).sum(1)
    else:  # positions in no bag (-1) are counted in slot 0, which is dropped
        slots = valid.new_zeros(num_bags + 1).index_add_(0, bag_of + 1, valid)
        counts = slots[1:]
    return torch.where(counts > 0, 1.0 / counts.clamp(min=1).to(torch.float32), 0.0)


def _per_sample_weights_grad(grad_out: Tensor, weight: Tensor, indices: Tensor, bag_of: Tensor,
                             padding_idx: int) -> Tensor:
    """d out[bag] / d psw[p] = <grad_out[bag], weight[indices[p]]> (zero for padding / no bag)."""
    flat = indices.reshape(-1)
    rows = weight.index_select(0, flat).float()
    grads = grad_out.float().index_select(0, bag_of.clamp(min=0))
    dot = (rows * grads).sum(1)
    keep = (bag_of >= 0) & (flat != padding_idx)
    return torch.where(keep, dot, 0.0).to(weight.dtype)


def _max_backward(grad_out: Tensor, argmax: Tensor, num_weights: int) -> Tensor:
    """Max mode: each output element's gradient goes to the winning row (index_add: atomics,
    so the result is not bit-reproducible when rows win in several bags). Empty bags (-1)
    add zero to element 0."""
    dim = grad_out.shape[1]
    cols = torch.arange(dim, device=argmax.device)
    flat = (argmax * dim + cols).reshape(-1)
    keep = flat >= 0
    values = torch.where(keep, grad_out.reshape(-1), 0.0)
    grad = grad_out.new_zeros((num_weights * dim,))
    grad.index_add_(0, torch.where(keep, flat, 0), values)
    return grad.reshape(num_weights, dim)


def _setup_bag(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    weight, indices, offsets, psw, mode, padding_idx, include_last_offset, _ = inputs
    _save_bag(ctx, weight, indices, offsets, psw, mode, padding_idx, include_last_offset, output[1])


def _save_bag(ctx: Any, weight: Tensor, indices: Tensor, offsets: Tensor | None, psw: Tensor | None, mode: str,
              padding_idx: int, include_last_offset: bool, argmax: Tensor | None) -> None:
    """What ``_backward_bag`` reads (the op's setup and the eager Function's)."""
    ctx.mode, ctx.padding_idx, ctx.include_last_offset = mode, padding_idx, include_last_offset
    ctx.num_weights = weight.shape[0]
    ctx.psw_needs_grad = psw is not None and psw.requires_grad
    ctx.save_for_backward(weight if ctx.psw_needs_grad else None, indices, offsets, psw, argmax)


def _backward_bag(ctx: Any, grad_out: Tensor, _grad_argmax: Tensor | None) -> tuple[Tensor | None, ...]:
    weight, indices, offsets, psw, argmax = ctx.saved_tensors
    grad_out = grad_out.contiguous()
    num_bags = grad_out.shape[0]
    if ctx.mode == "max":
        return _max_backward(grad_out, argmax, ctx.num_weights), None, None, None, None, None, None, None
    bag_of = None if offsets is None else bag_of_positions(indices, offsets, ctx.include_last_offset)
    bag_size = indices.shape[1] if offsets is None else 0
    bag_scale, scale = None, 1.0
    if ctx.mode == "mean" and bag_of is None and ctx.padding_idx < 0:
        scale = 1.0 / max(1, bag_size)  # every bag pools bag_size rows: no per-bag counts to compute
    elif ctx.mode == "mean":
        bag_scale = _bag_scale(indices, bag_of, num_bags, ctx.padding_idx)
    grad_weight = embedding_bag_backward_op(grad_out, indices, bag_of, bag_size, ctx.num_weights,
                                            psw, bag_scale, ctx.padding_idx, scale)
    grad_psw = None
    if ctx.psw_needs_grad:
        if bag_of is None:
            bag_of = torch.arange(indices.numel(), device=indices.device) // max(1, bag_size)
        grad_psw = _per_sample_weights_grad(grad_out, weight, indices, bag_of, ctx.padding_idx)
        grad_psw = grad_psw.reshape(psw.shape)
    return grad_weight, None, None, grad_psw, None, None, None, None


embedding_bag_op.register_autograd(_backward_bag, setup_context=_setup_bag)


# torch.autograd.Function.apply's Python wrapper costs host time per call: outside functorch
# transforms it unwraps dead functorch wrappers among the (top-level) arguments and calls the C
# entry point; our Functions do the same themselves (no setup_context, so the wrapper binds no
# default arguments). With transforms active, or in a build without these entry points: apply.
_TRANSFORMS_ACTIVE: Any = getattr(torch._C, "_are_functorch_transforms_active", None)
_UNWRAP: Any = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)


def _c_apply(function: type[torch.autograd.Function]) -> Any:
    """``function``'s C apply (None: take ``function.apply``)."""
    c_apply = getattr(super(torch.autograd.Function, function), "apply", None)
    return c_apply if _TRANSFORMS_ACTIVE is not None and _UNWRAP is not None else None


class EmbeddingBagFunction(torch.autograd.Function):
    """Eager autograd of ``embedding_bag``: the registered op's own saved state (``_save_bag``)
    and ``_backward_bag`` around ``launch.bag_forward``, without the custom op's Python dispatch
    (``api`` takes it outside torch.compile, which traces the op). ``apply(weight,
    per_sample_weights, rest)``: only the two tensors that may need a gradient are inputs of
    the node, the op's other arguments travel in ``rest`` (each input of apply costs host time);
    one output, ``out``: max mode's argmax is saved for the backward, not returned (each output
    costs host time too, and an empty placeholder another allocation)."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, per_sample_weights: Tensor | None, rest: tuple[Any, ...]) -> Tensor:
        indices, offsets, mode, padding_idx, include_last_offset, need_argmax = rest
        num_bags = num_bags_of(indices, offsets, include_last_offset)
        out, argmax = launch.bag_forward(weight, indices, offsets, num_bags=num_bags,
                                          per_sample_weights=per_sample_weights, mode=mode,
                                          padding_idx=padding_idx, need_argmax=need_argmax)
        _save_bag(ctx, weight, indices, offsets, per_sample_weights, mode, padding_idx, include_last_offset, argmax)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        grads = _backward_bag(ctx, grad_out, None)
        return grads[0], grads[3], None

    @staticmethod
    def run(weight: Tensor, indices: Tensor, offsets: Tensor | None, per_sample_weights: Tensor | None,
            *options: Any) -> Tensor:
        """``apply`` with the op's arguments, in the op's order; returns ``out``."""
        out: Tensor
        rest = (indices, offsets, *options)
        if _BAG_APPLY is None or _TRANSFORMS_ACTIVE():
            out = EmbeddingBagFunction.apply(weight, per_sample_weights, rest)  # type: ignore[no-untyped-call]
        else:
            psw = None if per_sample_weights is None else _UNWRAP(per_sample_weights)
            out = _BAG_APPLY(_UNWRAP(weight), psw, rest)
        return out


_BAG_APPLY = _c_apply(EmbeddingBagFunction)


class _SavedBag:
    """What ``_backward_bag`` reads off its ctx, for the compiled host path's autograd node."""

    __slots__ = ("mode", "padding_idx", "include_last_offset", "num_weights", "psw_needs_grad", "saved_tensors")
    mode: str
    padding_idx: int
    include_last_offset: bool
    num_weights: int
    psw_needs_grad: bool
    saved_tensors: tuple[Tensor | None, ...]


def host_path_backward(grad_out: Tensor, weight: Tensor | None, indices: Tensor, offsets: Tensor | None,
                       per_sample_weights: Tensor | None, argmax: Tensor | None, mode: str, padding_idx: int,
                       include_last_offset: bool, num_weights: int,
                       psw_needs_grad: bool) -> tuple[Tensor | None, Tensor | None]:
    """The backward of a call the compiled host path served (csrc/host_path.cpp, BagBackward):
    ``_backward_bag`` on what ``_save_bag`` would have saved; (weight's gradient, the per-sample
    weights')."""
    ctx = _SavedBag()
    ctx.mode, ctx.padding_idx, ctx.include_last_offset = mode, padding_idx, include_last_offset
    ctx.num_weights, ctx.psw_needs_grad = num_weights, psw_needs_grad
    ctx.saved_tensors = (weight, indices, offsets, per_sample_weights, argmax)
    grads = _backward_bag(ctx, grad_out, None)
    return grads[0], grads[3]


def embedding_impl(weight: Tensor, indices: Tensor, padding_idx: int) -> Tensor:
    """Unpooled lookup; padding_idx only zeroes that row's gradient, as in torch."""
    flat = indices.reshape(-1)
    return launch.gather(weight, flat).reshape(*indices.shape, weight.shape[1])


embedding_op = torch.library.custom_op("reference_kernels::embedding", embedding_impl,
                                       mutates_args=(), device_types="cuda")


@embedding_op.register_fake
def _(weight: Tensor, indices: Tensor, padding_idx: int) -> Tensor:
    return weight.new_empty((*indices.shape, weight.shape[1]))


def _setup_embedding(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    weight, indices, padding_idx = inputs
    ctx.num_weights, ctx.padding_idx = weight.shape[0], padding_idx
    ctx.save_for_backward(indices)


def _backward_embedding(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, None, None]:
    (indices,) = ctx.saved_tensors
    grad = grad_out.reshape(-1, grad_out.shape[-1]).contiguous()
    flat = indices.reshape(-1, 1)
    grad_weight = embedding_bag_backward_op(grad, flat, None, 1, ctx.num_weights, None, None, ctx.padding_idx)
    return grad_weight, None, None


embedding_op.register_autograd(_backward_embedding, setup_context=_setup_embedding)


class EmbeddingFunction(torch.autograd.Function):
    """Eager autograd of ``embedding``: ``_setup_embedding`` and ``_backward_embedding`` around
    ``embedding_impl`` (as ``EmbeddingBagFunction``)."""

    @staticmethod
    def forward(ctx: Any, *inputs: Any) -> Tensor:
        output = embedding_impl(*inputs)
        _setup_embedding(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_embedding)

    @staticmethod
    def run(weight: Tensor, indices: Tensor, padding_idx: int) -> Tensor:
        """``apply`` with the op's arguments."""
        output: Tensor
        if _EMBEDDING_APPLY is None or _TRANSFORMS_ACTIVE():
            output = EmbeddingFunction.apply(weight, indices, padding_idx)  # type: ignore[no-untyped-call]
        else:
            output = _EMBEDDING_APPLY(_UNWRAP(weight), _UNWRAP(indices), padding_idx)
        return output


_EMBEDDING_APPLY = _c_apply(EmbeddingFunction)
