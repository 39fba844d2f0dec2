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
``apply_update`` launches ``sparse_update.cu`` (the fused optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from . import _launch, _nvrtc
from ._launch import BLOCK, _dtype_code, _index_type, _launch_on, _ptr, vector_width
from ._nvrtc import F32, I64, PTR
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


def segment_gradient(grad_out: Tensor, flat: Tensor, bag_of: Optional[Tensor], bag_size: int, num_rows: int,
                     per_sample_weights: Optional[Tensor], bag_scale: Optional[Tensor], padding_idx: int,
                     scale: float = 1.0) -> Segments:
    """``flat``: the table row of each lookup position; the rest as ``_launch.bag_backward``."""
    n, dim = flat.numel(), grad_out.shape[1]
    key_dtype = torch.int32 if num_rows < 2**31 - 1 else torch.int64
    keys = flat.to(key_dtype)
    drop = None if padding_idx < 0 else flat == padding_idx
    if bag_of is not None:
        drop = bag_of < 0 if drop is None else drop | (bag_of < 0)
    if drop is not None:
        keys = torch.where(drop, num_rows, keys)
    sorted_rows, positions = torch.sort(keys, stable=True)
    starts = sorted_rows[1:] != sorted_rows[:-1]
    rank = torch.zeros(n, dtype=key_dtype, device=flat.device)
    torch.cumsum(starts, 0, dtype=key_dtype, out=rank[1:])
    rows = torch.empty(n, dtype=key_dtype, device=flat.device)
    rows.scatter_(0, rank.to(torch.int64), sorted_rows)  # equal values per rank: deterministic
    count = (rank[-1:] + 1).to(torch.int32)
    grad = torch.empty((n, dim), dtype=torch.float32, device=flat.device)
    if n and dim:
        _launch.backward_passes(grad_out, rank, positions, bag_of, bag_size, per_sample_weights, bag_scale,
                                -1, scale, grad)
    return Segments(rows, count, grad, num_rows)


def empty_segments(num_rows: int, dim: int, device: torch.device) -> Segments:
    return Segments(torch.empty(0, dtype=torch.int64, device=device), torch.zeros(1, dtype=torch.int32, device=device),
                    torch.empty((0, dim), dtype=torch.float32, device=device), num_rows)


def sparse_coo(seg: Segments, dim: int, dtype: torch.dtype) -> Tensor:
    """torch's sparse COO gradient ([num_rows, dim], coalesced: one entry per touched row)."""
    count = int(seg.count[0]) if seg.rows.numel() else 0
    if count and int(seg.rows[count - 1]) == seg.num_rows:
        count -= 1  # the sentinel
    rows = seg.rows[:count].to(torch.int64).unsqueeze(0)
    return torch.sparse_coo_tensor(rows, seg.grad[:count].to(dtype), (seg.num_rows, dim), is_coalesced=True,
                                   check_invariants=False)


def apply_update(seg: Segments, spec: OptimizerSpec, weight: Tensor, state1: Tensor, state2: Tensor,
                 step: int, seed: int) -> None:
    """One warp per distinct row: the optimizer step on that row and its state, in place."""
    n, dim = seg.rows.numel(), weight.shape[1]
    if n == 0 or dim == 0:
        return
    vec = min(vector_width(dim, weight.element_size(), weight.data_ptr()), 4)
    defines = {"WEIGHT_DTYPE": _dtype_code(weight.dtype), "OPTIMIZER": spec.code, "VEC": vec,
               "ITERS": -(-dim // (32 * vec)), "ROW_T": _index_type(seg.rows.dtype),
               "STOCHASTIC": int(spec.stochastic_rounding and weight.dtype != torch.float32), "BLOCK": BLOCK}
    fn = _nvrtc.get_function("sparse_update.cu", "sparse_update", defines, weight.device.index)
    lr = spec.lr if not isinstance(spec, Adam) else 0.0
    eps = getattr(spec, "eps", 0.0)
    b1, b2 = spec.betas if isinstance(spec, Adam) else (0.0, 0.0)
    step_size = spec.step_size(step) if isinstance(spec, Adam) else 0.0
    seed64 = (seed * 0x9E3779B97F4A7C15 + step) & (2**63 - 1)
    _launch_on(weight, fn, -(-n * 32 // BLOCK), [
        (seg.rows.data_ptr(), PTR), (seg.count.data_ptr(), PTR), (seg.num_rows, I64), (seg.grad.data_ptr(), PTR),
        (weight.data_ptr(), PTR), (dim, I64), (_ptr(state1), PTR), (_ptr(state2), PTR), (lr, F32), (eps, F32),
        (b1, F32), (b2, F32), (getattr(spec, "weight_decay", 0.0), F32), (step_size, F32), (seed64, I64)])
