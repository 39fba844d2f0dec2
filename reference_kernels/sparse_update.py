"""Sparse gradients (``sparse=True``) and the fused backward + optimizer, as autograd Functions.

Both share one backward: the per-row segments of ``_segments.segment_gradient``. With a
sparse gradient those become torch's sparse COO gradient (coalesced); with a fused
optimizer (``FusedState``) the rows and their state are updated in place during
``backward()`` and the weight's gradient is ``None``. Not registered as ``torch.library``
ops: sparse layouts and in-place updates of a parameter during backward are outside what
the custom-op machinery (and torch.compile) traces; the dense-gradient path keeps those.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import _optim_state, _segments, ops
from .optim import Adam, OptimizerSpec, check_spec, new_state


@dataclass
class FusedState:
    """A fused optimizer's spec, its float32 state (see ``optim.new_state``) and step count;
    ``seed`` drives stochastic rounding (the same seed and inputs give the same bits)."""

    spec: OptimizerSpec
    state1: Tensor
    state2: Tensor
    step: int = 0
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(2**62))

    @staticmethod
    def for_weight(spec: Any, weight: Tensor, seed: int | None = None) -> FusedState:
        spec = check_spec(spec)
        s1, s2 = new_state(spec, weight.shape[0], weight.shape[1], weight.device)
        state = FusedState(spec, s1, s2)
        if seed is not None:
            state.seed = seed
        return state


@dataclass(frozen=True)
class Lookups:
    """Where each lookup position's gradient goes: its table row (``rows``), its output row
    (``bag_of``; None: position // bag_size), and the per-contribution factors.
    ``keys_ready``: ``rows`` already is the backward's sort keys (int32 where the rows fit, the
    sentinel ``num_rows`` at every position that must not contribute), as
    ``launch.prepare_table_lookups`` writes them: no torch operations make them again.
    ``sort``: the backward's radix sort of those keys, begun (``launch.radix_start``)."""

    rows: Tensor
    bag_of: Tensor | None
    bag_size: int
    per_sample_weights: Tensor | None
    bag_scale: Tensor | None
    scale: float
    padding_idx: int
    keys_ready: bool = False
    sort: Any = None


def bag_lookups(indices: Tensor, offsets: Tensor | None, include_last_offset: bool, mode: str,
                padding_idx: int, psw: Tensor | None, num_bags: int) -> Lookups:
    """The lookups of one embedding_bag call (as the dense backward in ``ops`` sees them)."""
    bag_of = None if offsets is None else ops.bag_of_positions(indices, offsets, include_last_offset)
    bag_size = indices.shape[1] if offsets is None else 0
    bag_scale, scale = None, 1.0
    if mode == "mean" and bag_of is None and padding_idx < 0:
        scale = 1.0 / max(1, bag_size)
    elif mode == "mean":
        bag_scale = ops._bag_scale(indices, bag_of, num_bags, padding_idx)
    return Lookups(indices.reshape(-1), bag_of, bag_size, psw, bag_scale, scale, padding_idx)


def sparse_or_fused_backward(grad_out: Tensor, lookups: Lookups, weight: Tensor,
                             fused: FusedState | None) -> Tensor | None:
    """The sparse COO gradient of ``weight``, or (``fused``) None after updating it in place."""
    num_rows, dim = weight.shape
    bag_size = max(1, lookups.bag_size)
    if fused is None:
        seg = _segments.segment_gradient(grad_out, lookups.rows, bag_of=lookups.bag_of, bag_size=bag_size,
                                         num_rows=num_rows, per_sample_weights=lookups.per_sample_weights,
                                         bag_scale=lookups.bag_scale, padding_idx=lookups.padding_idx,
                                         scale=lookups.scale, keys_ready=lookups.keys_ready, sort=lookups.sort)
        return _segments.sparse_coo(seg, dim, weight.dtype)
    if (isinstance(fused.spec, Adam) or _segments._stochastic(fused.spec, weight)) \
            and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(_STEP_IN_GRAPH)
    fused.step += 1
    _segments.fused_update(grad_out, lookups.rows, bag_of=lookups.bag_of, bag_size=bag_size,
                           per_sample_weights=lookups.per_sample_weights, bag_scale=lookups.bag_scale,
                           padding_idx=lookups.padding_idx, scale=lookups.scale, spec=fused.spec, weight=weight,
                           state1=fused.state1, state2=fused.state2, step=fused.step, seed=fused.seed,
                           keys_ready=lookups.keys_ready, sort=lookups.sort)
    return None


# A CUDA graph replays the parameters its kernels were captured with, and the step count is one
# of them: Adam's bias correction and stochastic rounding would repeat the captured step forever.
_STEP_IN_GRAPH = ("reference_kernels: a fused Adam update, or one with stochastic rounding, cannot be captured "
                  "in a CUDA graph (both depend on the step count, which a replay cannot advance); capture SGD or "
                  "RowWiseAdagrad without stochastic rounding, or run those steps eagerly")


class SparseBag(torch.autograd.Function):
    """embedding_bag with a sparse gradient or a fused optimizer (max mode excluded, as torch)."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, indices: Tensor, offsets: Tensor | None, psw: Tensor | None,
                mode: str, padding_idx: int, include_last_offset: bool,
                fused: FusedState | None) -> Tensor:
        out, _ = ops.embedding_bag_impl(weight, indices, offsets, psw, mode, padding_idx, include_last_offset,
                                         False)
        ctx.mode, ctx.padding_idx, ctx.include_last_offset, ctx.fused = mode, padding_idx, include_last_offset, fused
        ctx.psw_needs_grad = psw is not None and psw.requires_grad
        ctx.save_for_backward(weight, indices, offsets, psw)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        weight, indices, offsets, psw = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        lookups = bag_lookups(indices, offsets, ctx.include_last_offset, ctx.mode, ctx.padding_idx, psw,
                              grad_out.shape[0])
        grad_psw = None
        if ctx.psw_needs_grad:  # before a fused update changes the rows
            bag_of = lookups.bag_of
            if bag_of is None:
                bag_of = torch.arange(indices.numel(), device=indices.device) // max(1, lookups.bag_size)
            grad_psw = ops._per_sample_weights_grad(grad_out, weight, indices, bag_of, ctx.padding_idx)
            grad_psw = grad_psw.reshape(psw.shape)
        grad_weight = sparse_or_fused_backward(grad_out, lookups, weight, ctx.fused)
        return grad_weight, None, None, grad_psw, None, None, None, None


class SparseEmbedding(torch.autograd.Function):
    """embedding (unpooled) with a sparse gradient or a fused optimizer."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, indices: Tensor, padding_idx: int,
                fused: FusedState | None) -> Tensor:
        ctx.padding_idx, ctx.fused = padding_idx, fused
        ctx.save_for_backward(weight, indices)
        return ops.embedding_impl(weight, indices, padding_idx)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        weight, indices = ctx.saved_tensors
        grad = grad_out.reshape(-1, grad_out.shape[-1]).contiguous()
        lookups = Lookups(indices.reshape(-1), None, 1, None, None, 1.0, ctx.padding_idx)
        return sparse_or_fused_backward(grad, lookups, weight, ctx.fused), None, None, None


class FusedOptimizerMixin:
    """For modules with one ``weight``: ``optimizer`` (a spec from ``reference_kernels.optim``,
    or None) fuses that optimizer into the backward; ``optimizer_state`` holds its state,
    created on the first forward on the weight's device (``optimizer_seed``: the stochastic
    rounding seed, random unless set). The state, step count and seed are part of the module's
    ``state_dict()`` and restored exactly by ``load_state_dict`` (``_optim_state.py``)."""

    optimizer: OptimizerSpec | None = None
    optimizer_state: FusedState | None = None
    optimizer_seed: int | None = None

    def fused_state(self, weight: Tensor) -> FusedState | None:
        if self.optimizer is None:
            return None
        if not weight.is_contiguous():  # the update writes through the weight's own storage
            raise ValueError("a fused optimizer needs a contiguous weight")
        state = self.optimizer_state
        if state is None or state.spec is not self.optimizer or state.state1.device != weight.device:
            state = self.optimizer_state = FusedState.for_weight(self.optimizer, weight, self.optimizer_seed)
        return state

    # The optimizer's state, step count and seed in state_dict() / load_state_dict (_optim_state.py).
    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)  # type: ignore[misc]
        _optim_state.save(self, destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any],
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        super()._load_from_state_dict(  # type: ignore[misc]
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        _optim_state.load(self, state_dict, prefix, strict, missing_keys, unexpected_keys, error_msgs)
