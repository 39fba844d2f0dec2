"""Row segments of one backward: each distinct looked-up row's summed gradient, compact.

``segment_gradient`` sorts the lookup positions by row (stable), numbers the distinct rows
in order (a dense rank), and runs the deterministic chunk + combine kernels of
``embedding_bag_backward.cu`` with the rank as the row and float32 output rows
(GRAD_F32): ``grad[k]`` is the sum of every contribution to the k-th smallest touched row.
No host synchronisation: the buffers are sized for the worst case (every position a row of
its own) and the number of distinct rows stays on the device. Positions that must not
contribute (the padding row, positions in no bag) get the sentinel row ``num_rows``, which
sorts last and is skipped by every consumer.

``sparse_coo`` turns that into torch's sparse gradient (one synchronisation, for its size);
``apply_update`` launches ``sparse_update.cu`` (the fused optimizer step). ``fused_update``
skips the compact buffer where it can: the same sort, then the chunk and combine kernels
update each row where its sum is complete (FUSED_OPT), one pass over the touched rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import launch, nvrtc, tuning
from .launch import BLOCK, RowTiling, _dtype_code, _index_type, _launch_on, _ptr, vector_width
from .nvrtc import F32, I64, PTR
from .optim import Adam, OptimizerSpec


@dataclass(frozen=True)
class Segments:
    """``rows[k]`` (k < ``count[0]``) is the k-th distinct touched row (``num_rows``: the
    sentinel, last), ``grad[k]`` its summed gradient in float32; entries past the count are
    unused."""

    rows: Tensor
    count: Tensor  # int32 [1], on the device
    grad: Tensor
    num_rows: int


def _sort_keys(flat: Tensor, bag_of: Tensor | None, num_rows: int, padding_idx: int) -> Tensor:
    """Each position's row as the sort key (int32 below 2^31 - 1 rows); the sentinel
    ``num_rows`` for the padding row and positions in no bag."""
    keys = flat.to(torch.int32 if num_rows < 2**31 - 1 else torch.int64)
    drop = None if padding_idx < 0 else flat == padding_idx
    if bag_of is not None:
        drop = bag_of < 0 if drop is None else drop | (bag_of < 0)
    return keys if drop is None else torch.where(drop, num_rows, keys)


def segment_gradient(grad_out: Tensor, flat: Tensor, *, bag_of: Tensor | None, bag_size: int, num_rows: int,
                     per_sample_weights: Tensor | None, bag_scale: Tensor | None, padding_idx: int,
                     scale: float = 1.0, keys_ready: bool = False, sort: Any = None) -> Segments:
    """``flat``: the table row of each lookup position; the rest as ``launch.bag_backward``.
    ``keys_ready``: ``flat`` already is the sort keys (``_sort_keys``' dtype and sentinel:
    ``launch.prepare_table_lookups``); ``sort``: their radix sort, begun (``launch.radix_start``;
    only with ``keys_ready``: the preparation counted the keys' digits)."""
    n, dim = flat.numel(), grad_out.shape[1]
    keys = flat if keys_ready else _sort_keys(flat, bag_of, num_rows, padding_idx)
    key_dtype = keys.dtype
    sorted_rows, positions = launch.sort_rows(keys, num_rows, sort)
    starts = sorted_rows[1:] != sorted_rows[:-1]
    rank = torch.zeros(n, dtype=key_dtype, device=flat.device)
    torch.cumsum(starts, 0, dtype=key_dtype, out=rank[1:])
    rows = torch.empty(n, dtype=key_dtype, device=flat.device)
    rows.scatter_(0, rank.to(torch.int64), sorted_rows)  # equal values per rank: deterministic
    count = (rank[-1:] + 1).to(torch.int32)
    grad = torch.empty((n, dim), dtype=torch.float32, device=flat.device)
    if n and dim:
        launch.backward_passes(grad_out, rank, positions, bag_of=bag_of, bag_size=bag_size,
                                per_sample_weights=per_sample_weights, bag_scale=bag_scale, padding_idx=-1,
                                scale=scale, grad_weight=grad)
    return Segments(rows, count, grad, num_rows)


def sparse_coo(seg: Segments, dim: int, dtype: torch.dtype) -> Tensor:
    """torch's sparse COO gradient ([num_rows, dim], coalesced: one entry per touched row)."""
    count = int(seg.count[0]) if seg.rows.numel() else 0
    if count and int(seg.rows[count - 1]) == seg.num_rows:
        count -= 1  # the sentinel
    rows = seg.rows[:count].to(torch.int64).unsqueeze(0)
    return torch.sparse_coo_tensor(rows, seg.grad[:count].to(dtype), (seg.num_rows, dim), is_coalesced=True,
                                   check_invariants=False)


def _optimizer_values(spec: OptimizerSpec, step: int, seed: int) -> tuple[object, ...]:
    """lr, eps, beta1, beta2, weight_decay, step_size, seed: the kernels' optimizer parameters
    (six F32, one I64)."""
    bits = (seed * 0x9E3779B97F4A7C15 + step) & (2**63 - 1)
    decay = getattr(spec, "weight_decay", 0.0)
    if isinstance(spec, Adam):
        b1, b2 = spec.betas
        return (0.0, spec.eps, b1, b2, decay, spec.step_size(step), bits)
    return (spec.lr, getattr(spec, "eps", 0.0), 0.0, 0.0, decay, 0.0, bits)


def _optimizer_args(spec: OptimizerSpec, step: int, seed: int) -> list[tuple[object, str]]:
    """``_optimizer_values`` with their parameter kinds."""
    return list(zip(_optimizer_values(spec, step, seed), (F32,) * 6 + (I64,), strict=True))


def _stochastic(spec: OptimizerSpec, weight: Tensor) -> int:
    return int(spec.stochastic_rounding and weight.dtype != torch.float32)


def apply_update(seg: Segments, spec: OptimizerSpec, weight: Tensor, state1: Tensor, state2: Tensor,
                 step: int, seed: int) -> None:
    """One warp per distinct row: the optimizer step on that row and its state, in place."""
    n, dim = seg.rows.numel(), weight.shape[1]
    if n == 0 or dim == 0:
        return
    vec = min(vector_width(dim, weight.element_size(), weight.data_ptr()), 4)
    defines = {"WEIGHT_DTYPE": _dtype_code(weight.dtype), "OPTIMIZER": spec.code, "VEC": vec,
               "ITERS": -(-dim // (32 * vec)), "ROW_T": _index_type(seg.rows.dtype),
               "STOCHASTIC": _stochastic(spec, weight), "BLOCK": BLOCK}
    fn = nvrtc.get_function("sparse_update.cu", "sparse_update", defines, weight.device.index)
    _launch_on(weight, fn, -(-n * 32 // BLOCK), [
        (seg.rows.data_ptr(), PTR), (seg.count.data_ptr(), PTR), (seg.num_rows, I64), (seg.grad.data_ptr(), PTR),
        (weight.data_ptr(), PTR), (dim, I64), (_ptr(state1), PTR), (_ptr(state2), PTR),
        *_optimizer_args(spec, step, seed)])




def fits_passes(grad_out: Tensor, weight: Tensor) -> bool:
    """Apply the update inside the backward's chunk and combine kernels (FUSED_OPT) where a row
    fits one column tile and the weight is aligned like the output gradient: no compact gradient
    is written and read back. The knob off: always the two steps (segment_gradient,
    apply_update). Memoised per (row, element size, both alignments, knob)."""
    fuse = tuning.current().fuse_into_passes
    key = (weight.shape[1], weight.element_size(), grad_out.data_ptr() % 16, weight.data_ptr() % 16, fuse)
    found = _FITS.get(key)
    if found is None:
        dim, size = key[0], key[1]
        vec = vector_width(dim, size, grad_out.data_ptr())
        found = _FITS[key] = (fuse and vec == vector_width(dim, size, grad_out.data_ptr(), weight.data_ptr())
                              and RowTiling.for_row(dim, vec).col_tiles == 1)
    return found


_FITS: dict[tuple[int, int, int, int, bool], bool] = {}


def fused_update(grad_out: Tensor, flat: Tensor, *, bag_of: Tensor | None, bag_size: int,
                 per_sample_weights: Tensor | None, bag_scale: Tensor | None, padding_idx: int, scale: float,
                 spec: OptimizerSpec, weight: Tensor, state1: Tensor, state2: Tensor, step: int, seed: int,
                 keys_ready: bool = False, sort: Any = None) -> None:
    """The fused backward + optimizer step on the looked-up rows of ``weight`` (in place).
    ``keys_ready``, ``sort``: as ``segment_gradient``."""
    num_rows = weight.shape[0]
    if flat.numel() == 0 or weight.shape[1] == 0:
        return
    if not fits_passes(grad_out, weight):
        seg = segment_gradient(grad_out, flat, bag_of=bag_of, bag_size=bag_size, num_rows=num_rows,
                               per_sample_weights=per_sample_weights, bag_scale=bag_scale, padding_idx=padding_idx,
                               scale=scale, keys_ready=keys_ready, sort=sort)
        apply_update(seg, spec, weight, state1, state2, step, seed)
        return
    keys = flat if keys_ready else _sort_keys(flat, bag_of, num_rows, padding_idx)
    sorted_rows, positions = launch.sort_rows(keys, num_rows, sort)
    fused_defines = (("FUSED_OPT", 1), ("OPTIMIZER", spec.code), ("STOCHASTIC", _stochastic(spec, weight)))
    fused_values = (weight.data_ptr(), 0 if state1 is None else state1.data_ptr(),
                    0 if state2 is None else state2.data_ptr(), *_optimizer_values(spec, step, seed))
    # the sentinel row (padding, positions in no bag) goes in as the padding row: skipped
    launch.backward_passes(grad_out, sorted_rows, positions, bag_of=bag_of, bag_size=bag_size,
                            per_sample_weights=per_sample_weights, bag_scale=bag_scale, padding_idx=num_rows,
                            scale=scale, grad_weight=None, fused_defines=fused_defines, fused_values=fused_values)
