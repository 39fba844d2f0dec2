"""The launcher's tuning knobs: one frozen value, also the key of every plan cache.

Normal use never touches this: the defaults are the measured choices (docs/perf/ says why
each is what it is). Experiments (``benchmarks/``) and tests change knobs for a block of
code with ``tuned(...)``, which replaces the current value and restores it afterwards;
because the knobs are part of every plan's key, a changed knob never meets a stale plan.

``REFERENCE_KERNELS_TUNE="UNROLL=8,MIN_BLOCKS=1"`` (read once at import) overrides the
forward kernels' compile-time defines; ``tuned(overrides=...)`` does the same in code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Tuning", "current", "overrides_from_spec", "tuned"]


def overrides_from_spec(spec: str) -> tuple[tuple[str, int], ...]:
    """``"UNROLL=8,MIN_BLOCKS=1"`` -> ``(("UNROLL", 8), ("MIN_BLOCKS", 1))``."""
    pairs = (item.split("=") for item in spec.split(",") if item)
    return tuple((name.strip(), int(value)) for name, value in pairs)


@dataclass(frozen=True)
class Tuning:
    """Every knob of kernel selection. Each rule that reads a knob is stated where it is
    used (``plan.py``); the measurements behind the defaults are in docs/perf/."""

    # rows wider than 32 lanes x 4 vectors: column tiles of equal vectors per lane (plan.RowTiling.for_row)
    balanced_col_tiles: bool = True
    # forward, general kernel
    unroll_rows: int = 16  # rows in flight per lane (UNROLL * CHUNKS), halved with argmax
    lean_long_bag_rows: int = 8  # lean sum/mean variants, bags too long to stride: rows in flight (0: off)
    small_f32_lean: bool = True  # d64 float32 sum/mean: one team per bag (lean rows) instead of striding
    min_blocks: int = 2  # occupancy floor (__launch_bounds__) of the long-bag variants
    forward_resident_waves: int = 1  # waves of resident blocks for striding teams; 0: one team per bag
    rows_at_once_cap: int = 32  # rows a team reads at once, at most (1: a team one row wide per bag)
    narrow_one_row_max_avg: int = 64  # rows of <= 16 lanes, sum/mean bags up to this long: one row at once
    narrow_min_warps_per_sm: int = 12  # ... where one-row teams give the call this many warps per SM
    short_lean: bool = True  # d64/d128 sum/mean bags short enough to stride: one team per bag, lean rows
    lean_tail: bool = True  # lean rows, teams narrower than a warp: half a step for a bag's last rows
    psw16_more_blocks: bool = True  # 16-bit one-vector rows, per-sample weights, long bags: 4 rows at 4 blocks
    persistent_max_group_rows: int = 24  # teams stride over bags of at most this many rows per lane group
    stride_f32_half_unroll: bool = True  # d128 float32 striding: half the rows in flight, more blocks
    wide_f32_fewer_rows: bool = True  # d192 float32: 2 rows in flight, more blocks, one team per bag
    wide_one_row: bool = True  # rows of 2-4 16-byte vectors a lane (16-bit: 2): 1-2 rows in flight, more blocks
    wide_16bit_fewer_rows: bool = True  # d192 16-bit sum/mean: 2 rows in flight at 3 blocks, one team per bag
    small_f32_more_blocks: bool = True  # d64 / d32-with-weights float32: more blocks per SM
    pos32_limit: int = 2**31 - 2**16  # 32-bit positions below this many indices, rows, threads
    # the index check's grid-stride cap in blocks per SM: one resident wave (48 registers a thread:
    # five blocks of 256 fit an SM; eight made a second wave, change 61)
    check_blocks_per_sm: int = 4
    fused_index_check: bool = True  # one-table calls of the general kernel check their indices inside it
    # forward, short bags of one fixed size
    short_step_vectors: int = 4  # vectors per lane per step (0 turns the short kernel off)
    short_grid_per_sm: int = 8
    # forward, CSR and table-batched short bags (the segmented kernel)
    segment_rows: int = 32  # rows' worth of bags per segment (16-bit rows)
    segment_rows_f32: int = 64  # the same for float32 rows
    segment_vectors: int = 4
    segment_max_avg: int = 8  # longest average bag the segmented kernel takes (0 turns it off)
    segment_walk_max_avg: int = 32  # in it, tables of longer bags walk one bag per segment
    segment_max_bags: int = 16
    segment_grid_per_sm: int = 8
    segment_min_warps_per_sm: int = 16
    # the bulk-copy engine (sm_90+)
    bulk_min_arch: int = 90
    bulk_one_row_csr: bool = True  # CSR bags as many as their indices take the bulk bag kernel
    bulk_bags_min_steps_per_sm: int = 1
    bulk_gather_min_row_bytes: int = 256  # the bulk gather (and [B, 1] bags) from rows of this size
    bulk_stage_bytes: int = 4096
    bulk_max_steps_per_warp: int = 8  # one resident wave up to this many steps per warp
    max_grid: int = 2**31 - 1  # gridDim.x limit (the gather's kernels stride past a capped grid)
    # backward
    backward_chunks: tuple[int, ...] = (128, 64, 32)  # sorted positions per team, longest first
    backward_min_warps_per_sm: int = 40  # the chunk: the longest that gives this many warps of teams
    backward_rows_in_flight: int = 4
    backward_min_blocks: int = 2
    backward_streaming_rows: int = 1  # evict-first stores of the gradient rows
    # a run from one chunk into the next that ends within a team's width of it is summed whole by
    # its first chunk's team (EXTEND_RUNS): uniform traffic leaves the combine pass nothing to add
    backward_extend_runs: bool = True
    # the fused chunk pass (plan.fused_chunk_defines): a segment's row loaded when it opens, for
    # rows up to backward_preload_max_floats floats a lane, with preload_rows positions in flight
    # and preload_min_blocks blocks per SM (rows of up to 4 floats a lane)
    backward_preload: bool = True
    backward_preload_max_floats: int = 12
    backward_preload_rows: int = 2
    backward_preload_min_blocks: int = 3
    # the chunk pass's gradient rows copied into shared memory (cp.async, plan.async_chunk_defines):
    # up to backward_async_ahead positions in flight a team where the registers would keep at
    # most backward_async_max_unroll (rows of 16-byte vectors), in blocks of backward_async_block
    backward_async_ahead: int = 3
    backward_async_max_unroll: int = 1
    backward_async_block: int = 128
    backward_async_regs_base: int = 48  # registers a thread needs: base + per float of the lane's row
    backward_async_regs_per_float: int = 4
    prepare_grid_by_tiles: bool = True  # the preparation: a block per tile of positions (change 61)
    own_sort: bool = True  # the backward's int32 keys: radix_sort.cu over the rows' bits (False: torch.sort)
    overlap_zero_fill: bool = True  # zero untouched rows on a side stream (few lookups per row)
    overlap_max_lookups_per_row: float = 0.1
    fill_blocks_per_sm: int = 16
    # fused optimizers: the update inside the backward's passes where a row fits one column tile
    # (False: the compact gradient, then sparse_update.cu; REFERENCE_KERNELS_FUSED_TWO_STEPS=1)
    fuse_into_passes: bool = True
    # compile-time defines forced onto the forward kernels (experiments only)
    overrides: tuple[tuple[str, int], ...] = ()


_CURRENT = Tuning(overrides=overrides_from_spec(os.environ.get("REFERENCE_KERNELS_TUNE", "")),
                  fuse_into_passes=os.environ.get("REFERENCE_KERNELS_FUSED_TWO_STEPS", "0") != "1")


def current() -> Tuning:
    """The knobs every launch uses now."""
    return _CURRENT


@contextmanager
def tuned(tuning: Tuning | None = None, **changes: Any) -> Iterator[Tuning]:
    """Launch with ``tuning`` (or the current knobs with ``changes``) inside the block."""
    global _CURRENT
    saved = _CURRENT
    _CURRENT = replace(tuning if tuning is not None else saved, **changes)
    try:
        yield _CURRENT
    finally:
        _CURRENT = saved
