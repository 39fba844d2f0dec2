"""Launch configuration for each kernel: which compile-time variant, and the grid.

Everything here takes and returns torch tensors; validation of user arguments
lives in ``_api.py``, the custom-op wiring in ``_ops.py``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import EmbeddingIndexError, _nvrtc
from ._nvrtc import F32, I32, I64, PTR

if TYPE_CHECKING:
    import torch

BLOCK = 256
MAX_GRID = 2**31 - 1  # gridDim.x limit
MAX_CHUNKS = 4  # vectors per lane per row before the row is split into column tiles
MODES = {"sum": 0, "mean": 1, "max": 2}
INT64_MAX = 2**63 - 1
# Debug aid used by the tests: fill every output with NaN before the kernel runs, so
# that an element the kernel fails to write cannot pass a comparison.
POISON_OUTPUTS = os.environ.get("REFERENCE_KERNELS_POISON_OUTPUTS", "0") == "1"
# Rows each lane keeps in flight in the forward kernel: UNROLL_ROWS // CHUNKS (a power of
# two); 16 measured best on the H200 (docs/perf-log.md); half that when the max-mode
# argmax is also written (more live registers).
UNROLL_ROWS = 16
# Occupancy floor for the forward kernel: caps registers at 65536 / (2 * BLOCK) = 128, below
# which f32 mean/max variants fell to one block per SM (docs/perf-log.md). Short bags need
# fewer rows in flight per lane, hence fewer registers: those variants ask for 3 or 4 blocks
# per SM (more warps to hide the offsets -> indices -> rows chain; docs/perf-log.md, run 17).
MIN_BLOCKS = 2
# The general forward kernel's grid for bags of at most PERSISTENT_MAX_GROUP_ROWS rows per lane
# group (a bag's rows / the rows a team reads at once): FORWARD_RESIDENT_WAVES waves of resident
# blocks (as many as fit on the SMs at once), teams striding over the bags and loading the next
# bag's bounds and indices while this bag's rows are in flight (PERSISTENT); 0 turns it off.
# Otherwise one team per bag, the block scheduler refilling the SMs. Measured side by side (runs
# 80 and 82, scripts/persistent_bags.py, median of 100): at up to 20 rows per group one wave
# gained up to 14 % and lost nowhere (suite 3's 2 x 10M x 192 L32 TBE float32 568.0 -> 518.9 us,
# float16 369.8 -> 327.5; CSR L16 78.1 -> 74.8; L20 52.8 -> 49.7; fixed-layout L16 alike), also
# with only 2-3 bags per team (B4224 and B6912), and two waves less; at 32 and more rows per
# group it lost 1-3 % (d128 f32 L32 130.4 -> 132.3, L64 247.4 -> 251.4, 12 tables L150 411.2 ->
# 424.5), where a bag's own index batches already overlap its rows. The 3-4 blocks-per-SM
# variants of short bags keep one team per bag: the stride's registers spill them.
# docs/perf-log.md, change 39.
FORWARD_RESIDENT_WAVES = 1
PERSISTENT_MAX_GROUP_ROWS = 24
# Those striding variants for float32 rows of one warp-wide row (d128 float32: a 16-byte vector
# per lane) keep 8 rows in flight per lane at 3 blocks per SM instead of 16 at 2: the same bytes
# in flight per SM, more warps to cover each bag's wait for its last row (scripts/unroll_blocks.py,
# runs 87-88, side by side: d128 L12-L24 3-6 % faster on uniform indices, e.g. L20 mean 51.5 ->
# 48.6 us, and 19-23 % on Zipf-skewed ones, L20 a1.15 33.7 -> 26.0). Not for per-sample weights
# (L20 53.3 -> 55.0 us), d32 rows (4 rows per warp: 1-4 % slower on three of four cases) or
# 16-bit rows (16 rows per group: 16 % slower), nor for calls of fewer bags than 2 blocks per SM
# hold teams (B1024 L16: 3-6 % slower in run 90; one wave, where fewer rows in flight only make
# each bag's chain longer). docs/perf-log.md, change 40. With 32-bit positions (POS32, change 43)
# the variant fits 64 registers and runs 4 blocks per SM (run 103, side by side: L20 mean 47.9 ->
# 45.2 us, B6912 L24 mean 27.8 -> 25.8, B131072 L16 Zipf 1.15 144.2 -> 135.2).
STRIDE_F32_HALF_UNROLL = True
# Float32 rows of three vectors per lane (192 columns: 16 lanes x 3) keep 2 rows in flight per
# lane at 3 blocks per SM, one team per bag, instead of 4 rows at 2 blocks striding: suite 3's
# shape (10M x 192, B65536, L32) sum 260.6 -> 233.7 us, Zipf-1.15 mean 198.4 -> 169.2 (run 93,
# scripts/unroll_blocks.py --wide); striding at 3 blocks spills. 16-bit rows spill at 3 blocks
# (28-80 bytes) and keep theirs; per-sample weights are left as they were (not measured).
# docs/perf-log.md, change 41. With POS32 at 4 blocks per SM (64 registers, no spill): suite 3's
# shape 235.2 -> 206.3 us (run 103, change 43).
WIDE_F32_FEWER_ROWS = True
# Float32 rows of 64 and 32 columns (two or four rows per warp) whose bags give a lane 9+ rows
# had 16 rows in flight at 2 blocks per SM, as d128 had before change 40. With 32-bit positions,
# in calls of many bags: 64 columns keep 8 rows in flight at 4 blocks per SM for sum (64
# registers; mean and max spill 4-8 bytes there) and at 3 for the rest; 32 columns with
# per-sample weights, striding over bags of up to 96 rows, keep 16 rows at 3 blocks (79
# registers, no spill). Side by side (scripts/unroll_blocks.py, runs 112-113): d64 L20 28.1 ->
# 25.6 us, B131072 L16 CSR 193.0 -> 131.8, Zipf 1.15 L16 39.4 -> 23.9, L64 max Zipf 1.05 90.3 ->
# 67.4, with per-sample weights L32 Zipf 1.15 47.4 -> 39.0; d32 with per-sample weights L64
# 249.6 -> 228.1 (B131072), 68.3 -> 61.9 (B32768), Zipf 1.15 L40 79.6 -> 68.8; one case slower,
# d32 B4224 L64 with per-sample weights 14.2 -> 14.7 (4224 bags over 3168 resident teams).
# docs/perf-log.md, change 44.
SMALL_F32_MORE_BLOCKS = True


# Experiment hook for the benchmark: REFERENCE_KERNELS_TUNE="UNROLL=8,MIN_BLOCKS=1" overrides
# the forward kernel's compile-time choices (unset in normal use; read once at import).
TUNE = os.environ.get("REFERENCE_KERNELS_TUNE", "")


def tuning_overrides(spec: str) -> dict[str, int]:
    return {k.strip(): int(v) for k, v in (item.split("=") for item in spec.split(",") if item)}


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


def sm_count(device: "torch.device") -> int:
    return _sm_count(device.index if device.index is not None else 0)


def _dtype_code(dtype: "torch.dtype") -> int:
    import torch

    codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    return codes[dtype]


def _index_type(dtype: "torch.dtype") -> str:
    import torch

    return {torch.int64: "i64", torch.int32: "int"}[dtype]


def _ptr(t: "torch.Tensor | None") -> int:
    return 0 if t is None else t.data_ptr()


def grid_stride_blocks(threads: int, device: "torch.device", per_sm: int) -> int:
    """Blocks for a grid-stride kernel: enough for ``threads``, at most ``per_sm`` per SM."""
    return max(1, min(-(-threads // BLOCK), sm_count(device) * per_sm))


def _launch_on(t: "torch.Tensor", fn: object, grid: int, args: list[tuple[object, str]], block: int = BLOCK) -> None:
    """Launch on the current stream of ``t``'s device; under a device guard only when that is
    not the current device (the guard costs more than the check)."""
    import torch

    index = t.device.index
    if index == torch.cuda.current_device():
        _nvrtc.launch(fn, grid, block, int(torch.cuda.current_stream(index).cuda_stream), args)
        return
    with torch.cuda.device(index):
        _nvrtc.launch(fn, grid, block, int(torch.cuda.current_stream(index).cuda_stream), args)


def new_output(shape: tuple[int, ...], like: "torch.Tensor") -> "torch.Tensor":
    import torch

    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=like.dtype, device=like.device)
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _floor_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _ceil_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def vector_width(row_elems: int, elem_bytes: int, *pointers: int) -> int:
    """Largest element count per load (at most 16 bytes) that divides the row and keeps every
    row of every tensor aligned."""
    vec = 16 // elem_bytes
    while vec > 1 and (row_elems % vec or any(p % (vec * elem_bytes) for p in pointers)):
        vec //= 2
    return vec


@dataclass(frozen=True)
class RowTiling:
    """How a row of ``dim`` elements is spread over lanes: VEC elements per vector,
    ROW_LANES lanes per row, CHUNKS vectors per lane, ``col_tiles`` tiles per row."""

    vec: int
    row_lanes: int
    chunks: int
    col_tiles: int

    @staticmethod
    def for_row(dim: int, vec: int) -> "RowTiling":
        """The (lanes per row, vectors per lane) pair with the fewest idle lanes, fewer chunks
        on ties (e.g. 48 vectors: 16 lanes x 3; 24 vectors: 8 lanes x 3, not 32 lanes with 8
        idle). Rows beyond 32 x MAX_CHUNKS vectors are cut into column tiles."""
        vectors = dim // vec
        if vectors > 32 * MAX_CHUNKS:
            return RowTiling(vec, 32, MAX_CHUNKS, -(-vectors // (32 * MAX_CHUNKS)))
        options = []
        for lanes in (32, 16, 8, 4, 2, 1):
            chunks = -(-vectors // lanes)
            if chunks <= MAX_CHUNKS and (lanes == 1 or lanes < 2 * vectors):
                options.append((lanes * chunks - vectors, chunks, lanes))
        _, chunks, lanes = min(options)
        return RowTiling(vec, lanes, chunks, 1)


def index_check(indices: "torch.Tensor", num_embeddings: int, offsets: "torch.Tensor | None") -> None:
    """Validate indices (and offsets) in one separate pass; raise EmbeddingIndexError if bad."""
    import torch

    status = torch.full((2,), INT64_MAX, dtype=torch.int64, device=indices.device)
    n = indices.numel()
    n_off = 0 if offsets is None else offsets.numel()
    fn = _nvrtc.get_function("index_check.cu", "index_check", {"INDEX_T": _index_type(indices.dtype)},
                             indices.device.index)
    grid = grid_stride_blocks(max(n, n_off), indices.device, 8)
    _launch_on(indices, fn, grid, [
        (_ptr(indices), PTR), (n, I64), (num_embeddings, I64),
        (_ptr(offsets), PTR), (n_off, I64), (status.data_ptr(), PTR)])
    bad_index, bad_bag = status.tolist()  # the one host synchronisation of the check
    if bad_index != INT64_MAX:
        value = int(indices.reshape(-1)[bad_index])
        raise EmbeddingIndexError(
            f"index {value} at position {bad_index} is out of range for an embedding table of "
            f"{num_embeddings} rows (valid: 0..{num_embeddings - 1})")
    if bad_bag != INT64_MAX:
        raise EmbeddingIndexError(
            f"offsets are invalid at bag {bad_bag}: offsets must be non-decreasing and lie in "
            f"[0, {n}] (the number of indices)")


def forward_defines(weight_code: int, index_type: str, mode: str, has_psw: bool, need_argmax: bool,
                    tiling: RowTiling, avg_len: int, many_bags: bool = True, pos32: bool = True) -> dict[str, object]:
    """Compile-time variant of embedding_bag_forward.cu for one call (pure: testable on CPU).
    A team reads as many rows at once as fit in a warp, but no more than a bag holds.
    ``many_bags``: the call has more bags than 2 blocks per SM hold teams (fills the GPU).
    ``pos32``: the call's positions, rows and threads fit 31 bits (fits_pos32)."""
    rows_at_once = min(32 // tiling.row_lanes, _floor_pow2(avg_len))
    group_rows = -(-max(1, avg_len) // rows_at_once)
    unroll, min_blocks = _rows_in_flight(tiling, has_psw, need_argmax, group_rows)
    persistent = FORWARD_RESIDENT_WAVES > 0 and min_blocks <= MIN_BLOCKS and group_rows <= PERSISTENT_MAX_GROUP_ROWS
    plain_f32 = weight_code == 0 and not (has_psw or need_argmax)  # where changes 40-41 were measured
    # float32 rows of one vector per lane, 16 of them in flight, in a call that fills the GPU (changes 40, 44)
    full_f32_vectors = (weight_code == 0 and many_bags and tiling.vec == 4 and tiling.chunks == 1
                        and unroll == UNROLL_ROWS)
    # with 32-bit positions (6-11 registers fewer) these two fit 64 registers: 4 blocks per SM (change 43)
    blocks = 4 if pos32 else 3
    if STRIDE_F32_HALF_UNROLL and persistent and plain_f32 and full_f32_vectors and rows_at_once == 1:
        unroll, min_blocks = UNROLL_ROWS // 2, blocks  # d128: half the rows in flight, more blocks
    if WIDE_F32_FEWER_ROWS and plain_f32 and tiling.chunks == 3 and unroll == 4:
        unroll, min_blocks, persistent = 2, blocks, False  # 192 columns: 2 rows, more blocks, one team per bag
    if SMALL_F32_MORE_BLOCKS and pos32 and full_f32_vectors and not need_argmax:
        if rows_at_once == 2:  # 64 columns: half the rows in flight, more blocks
            unroll, min_blocks = UNROLL_ROWS // 2, 4 if mode == "sum" and not has_psw else 3
        elif rows_at_once == 4 and has_psw and persistent:  # 32 columns, per-sample weights: a third block
            min_blocks = 3
    return _bag_defines(weight_code, index_type, mode, has_psw, need_argmax, tiling, min_blocks,
                        TEAM=tiling.row_lanes * rows_at_once, UNROLL=unroll, PERSISTENT=int(persistent),
                        POS32=int(pos32))


# The general kernel keeps positions, bag numbers and rows in 32-bit registers (POS32) when the
# call's indices, table rows and threads all stay below POS32_LIMIT (change 43: never slower in
# run 103, 1-4 % faster with per-sample weights or skewed indices, and the two float32 picks
# above gain a fourth block per SM). Larger calls keep 64-bit arithmetic. The margin below 2^31
# leaves room for a team's last step past its bag's end and a stride past the last bag.
POS32_LIMIT = 2**31 - 2**16


def fits_pos32(num_indices: int, num_rows: int, num_bags: int, dim: int) -> bool:
    """The general kernel's POS32 variant serves a call of this size (threads bounded by one
    32-lane team per bag and column)."""
    return max(num_indices, num_rows, num_bags * max(1, dim) * 32) < POS32_LIMIT


def _bag_defines(weight_code: int, index_type: str, mode: str, has_psw: bool, need_argmax: bool,
                 tiling: RowTiling, min_blocks: int, **kernel_specific: int) -> dict[str, object]:
    """The defines both forward entries take, then the entry's own, then the TUNE overrides."""
    defines: dict[str, object] = {
        "WEIGHT_DTYPE": weight_code, "INDEX_T": index_type, "MODE": MODES[mode], "HAS_PSW": int(has_psw),
        "WRITE_ARGMAX": int(need_argmax), "VEC": tiling.vec, "ROW_LANES": tiling.row_lanes,
        "CHUNKS": tiling.chunks, "BLOCK": BLOCK, "MIN_BLOCKS": min_blocks, **kernel_specific,
    }
    defines.update(tuning_overrides(TUNE))
    return defines


def _rows_in_flight(tiling: RowTiling, has_psw: bool, need_argmax: bool, rows_per_lane: int) -> tuple[int, int]:
    """(UNROLL, MIN_BLOCKS): rows each lane loads before adding any, and the occupancy floor.
    No more rows in flight than a bag gives a lane; the registers that frees buy more warps
    per SM (register counts from nvcc -Xptxas -v, sm_90: 102 at 16 vectors in flight, 70-80
    at 8, 54-60 at 4; tests/kernels checks that no variant the launcher picks spills)."""
    most = _floor_pow2((UNROLL_ROWS // 2 if need_argmax else UNROLL_ROWS) // tiling.chunks)
    unroll = min(most, _ceil_pow2(rows_per_lane))
    vectors = unroll * tiling.chunks
    if need_argmax or tiling.chunks > 2 or vectors > 8:
        return unroll, MIN_BLOCKS
    if vectors <= 4:
        return unroll, 4
    # 8 vectors: 70-80 registers fit 3 blocks, except 16-bit weights with per-sample weights
    # (8 converted floats per vector), which spill there
    return unroll, 2 if has_psw and tiling.vec > 4 else 3


# Short bags of one fixed size ([B, L] indices, one table): embedding_bag_forward_short pools
# several bags per team step: SHORT_STEP_VECTORS // (L * CHUNKS) bags, at least two, up to
# twice that many vectors in flight per lane (halved when argmax is written). 4 measured best
# for L 1-2 against 8 and 16 (d32/d128, f32/bf16, B 32768/131072), and two bags of L 4 beat
# the general kernel (run 25, scripts/short_bags.py). 0 turns the short kernel off. Its grid:
# SHORT_GRID_PER_SM blocks per SM (8 and 16 alike, 4 slower), teams striding over the steps.
SHORT_STEP_VECTORS = 4
SHORT_GRID_PER_SM = 8


def short_bag_defines(weight_code: int, index_type: str, mode: str, has_psw: bool, need_argmax: bool,
                      tiling: RowTiling, bag_len: int) -> "dict[str, object] | None":
    """Compile-time variant of embedding_bag_forward_short for [B, ``bag_len``] indices, or None
    when two bags do not fit a step (pure: testable on CPU)."""
    budget = SHORT_STEP_VECTORS // 2 if need_argmax else SHORT_STEP_VECTORS
    vectors_per_bag = bag_len * tiling.chunks
    if bag_len < 1 or budget < 1 or vectors_per_bag > budget:
        return None
    bags = max(2, budget // vectors_per_bag)
    _, min_blocks = _rows_in_flight(tiling, has_psw, need_argmax, bags * bag_len)
    return _bag_defines(weight_code, index_type, mode, has_psw, need_argmax, tiling, min_blocks,
                        TEAM=tiling.row_lanes, BAGS_PER_STEP=bags, BAG_LEN=bag_len)


# Short bags of varying size (CSR offsets, table-batched lookups):
# embedding_bag_forward_segmented walks segments of consecutive bags of one table as one stream
# of rows, SEGMENT_VECTORS vectors in flight per lane whatever the bag boundaries. A table's
# segments hold segment_rows() // (its average bag length) bags (2 to segment_capacity), or one
# bag where that average exceeds SEGMENT_MAX_AVG. Used when the call's average bag holds at
# most SEGMENT_MAX_AVG rows (0 turns the kernel off). Grid: SEGMENT_GRID_PER_SM blocks per SM.
# At most SEGMENT_MAX_BAGS bags per segment: 31 left B32768 L1 with 8 warps per SM (15.5 us
# against 13.7 at 16). Measured choices (runs 29-33, scripts/segments.py): 32 rows per segment
# against 16 and 64 (64 won on float32 DCNv2, 209 against 222 us, and lost on bfloat16, 143
# against 128), 4 vectors against 8 (alike, mean slower at 8), 8 blocks per SM against 16
# (DCNv2 float32 222 against 229 us in two runs, alike elsewhere). Float32 rows take
# SEGMENT_ROWS_F32 = 64 (change 42, run 100, scripts/dcnv2_split.py --f32, side by side):
# DCNv2 in one launch sum 223.0 -> 213.9 us, max 231.8 -> 223.0, mean 229.2 -> 224.4, per-sample
# weights 228.2 -> 219.1; one table's CSR bags (d128, B131072) of 4 and 8 rows 1-2 % faster,
# of 2 rows alike; 8 vectors was no better at 64 rows and 8-13 % slower for mean and weights.
SEGMENT_ROWS = 32
SEGMENT_ROWS_F32 = 64
SEGMENT_VECTORS = 4
SEGMENT_MAX_AVG = 8
SEGMENT_MAX_BAGS = 16
SEGMENT_GRID_PER_SM = 8
# Segments never leave fewer than SEGMENT_MIN_WARPS_PER_SM warps' worth of teams per SM: a team
# walks its bags' rows a few at a time, so a small batch in long segments is a chain of DRAM
# round trips (B1024 L1: 8.5-10.2 us against 5.8-5.9 for the general kernel, run 32; DCNv2's
# 16-bit tables one launch each, B6912 at 9 warps/SM: 8-11 % slower, run 33). Below two bags
# per segment the general kernel runs instead.
SEGMENT_MIN_WARPS_PER_SM = 16


def segment_capacity(row_lanes: int) -> int:
    """The most bags a segment may hold: one offset per lane, SEGMENT_MAX_BAGS at most."""
    return min(SEGMENT_MAX_BAGS, row_lanes - 1)


def segment_rows(weight_code: int) -> int:
    """Rows' worth of bags per segment: SEGMENT_ROWS_F32 for float32 rows, else SEGMENT_ROWS."""
    return SEGMENT_ROWS_F32 if weight_code == 0 else SEGMENT_ROWS


def segment_bags(avg_len: int, row_lanes: int, rows: int = SEGMENT_ROWS) -> int:
    """Bags per segment for a table of ``avg_len`` rows per bag and segments of ``rows`` rows'
    worth of bags (the kernel's table_segment_bags)."""
    if avg_len > SEGMENT_MAX_AVG:
        return 1
    return min(segment_capacity(row_lanes), max(2, rows // max(1, avg_len)))


def segment_cap(row_lanes: int, num_bags: int, sms: int) -> int:
    """The most bags per segment for a call of ``num_bags`` bags: room in a team, and enough
    warps (teams of ``row_lanes`` lanes)."""
    return min(segment_capacity(row_lanes), num_bags * row_lanes // max(1, 32 * sms * SEGMENT_MIN_WARPS_PER_SM))


def segmented_defines(weight_code: int, index_type: str, mode: str, has_psw: bool, need_argmax: bool,
                      tiling: RowTiling, avg_len: int) -> "dict[str, object] | None":
    """Compile-time variant of embedding_bag_forward_segmented for CSR bags of ``avg_len`` rows
    on average, or None when the general kernel serves better: long bags, a team too narrow
    to hold two bags' offsets (pure: testable on CPU)."""
    vectors = SEGMENT_VECTORS // 2 if need_argmax else SEGMENT_VECTORS
    if avg_len > SEGMENT_MAX_AVG or tiling.row_lanes < 4 or vectors < tiling.chunks:
        return None
    unroll = min(tiling.row_lanes, _floor_pow2(vectors // tiling.chunks))
    # the walk's bag cursor and table bookkeeping cost registers: 4 blocks per SM (64) spill,
    # 3 (80) fit every mode (tests/kernels compiles each pick with nvcc and fails on a spill).
    # Mean and per-sample weights keep 2 for float32 rows: 3 was 1 % slower on DCNv2 (229.6
    # against 231.8 us for mean, 226.2 against 227.7 with weights; run 74), where 16-bit rows
    # gained 21-22 % (change 37).
    min_blocks = min(3, _rows_in_flight(tiling, has_psw, need_argmax, unroll)[1])
    if (has_psw or mode == "mean") and tiling.vec <= 4:
        min_blocks = 2
    return _bag_defines(weight_code, index_type, mode, has_psw, need_argmax, tiling, min_blocks,
                        TEAM=tiling.row_lanes, UNROLL=unroll, SEGMENT_BAGS=segment_capacity(tiling.row_lanes),
                        SEGMENT_ROWS=segment_rows(weight_code), SEGMENT_MAX_AVG=SEGMENT_MAX_AVG)


@dataclass(frozen=True)
class StepPlan:
    """A forward call whose teams stride over steps of several bags (the short-bag and the
    segmented kernel): the kernel, its team width, bags per team step (the segmented kernel:
    the most a segment may hold) and column tiles."""

    fn: object
    row_lanes: int
    bags_per_step: int
    col_tiles: int


_SHORT_PLANS: dict[tuple[object, ...], "StepPlan | None"] = {}
_SEGMENT_PLANS: dict[tuple[object, ...], "StepPlan | None"] = {}


# entry -> (its plan cache, its defines, the define that holds its bags per step)
_STEP_ENTRIES = {
    "embedding_bag_forward_short": (_SHORT_PLANS, short_bag_defines, "BAGS_PER_STEP"),
    "embedding_bag_forward_segmented": (_SEGMENT_PLANS, segmented_defines, "SEGMENT_BAGS"),
}


def _step_plan(entry: str, weight: "torch.Tensor", indices: "torch.Tensor", mode: str, has_psw: bool,
               need_argmax: bool, length: int) -> "StepPlan | None":
    """The short-bag (``length``: the bag size) or the segmented entry (``length``: the average
    bag), or None where it does not serve; memoised per call shape and tuning knobs."""
    plans, make_defines, steps_define = _STEP_ENTRIES[entry]
    length_class = length <= SEGMENT_MAX_AVG if plans is _SEGMENT_PLANS else length  # what changes the plan
    dim = weight.shape[1]
    key = (indices.dtype, mode, has_psw, need_argmax, length_class, weight.dtype, dim, weight.data_ptr() % 16,
           weight.device.index, TUNE, SHORT_STEP_VECTORS, SEGMENT_ROWS, SEGMENT_ROWS_F32, SEGMENT_VECTORS, SEGMENT_MAX_AVG,
           SEGMENT_MAX_BAGS)
    if key not in plans:
        tiling = RowTiling.for_row(dim, vector_width(dim, weight.element_size(), weight.data_ptr()))
        defines = make_defines(_dtype_code(weight.dtype), _index_type(indices.dtype), mode, has_psw, need_argmax,
                               tiling, length)
        plans[key] = None if defines is None else StepPlan(
            _nvrtc.get_function("embedding_bag_forward.cu", entry, defines, weight.device.index),
            tiling.row_lanes, int(defines[steps_define]), tiling.col_tiles)  # type: ignore[call-overload]
    return plans[key]


@dataclass(frozen=True)
class ForwardPlan:
    """What a forward call needs besides its tensors: the kernel and its grid shape."""

    fn: object
    team: int
    col_tiles: int
    resident_blocks: int  # per SM with PERSISTENT; 0: one team per unit of work
    pos32: bool = False  # compiled with 32-bit positions (POS32)

    def grid(self, num_bags: int, device: "torch.device") -> int:
        """One team per unit of work, or FORWARD_RESIDENT_WAVES waves of resident blocks at most."""
        threads = num_bags * self.col_tiles * self.team
        if self.resident_blocks:
            return grid_stride_blocks(threads, device, self.resident_blocks * FORWARD_RESIDENT_WAVES)
        return -(-threads // BLOCK)


_PLANS: dict[tuple[object, ...], ForwardPlan] = {}


def _forward_plan(weight: "torch.Tensor", indices: "torch.Tensor", mode: str, has_psw: bool,
                  need_argmax: bool, avg_len: int, num_bags: int = 2**62) -> ForwardPlan:
    """Memoised per (dtypes, width, alignment, mode, bag length class, batch class, device):
    the host work per call is then one dictionary lookup."""
    dim = weight.shape[1]
    many_bags = num_bags >= sm_count(weight.device) * MIN_BLOCKS * (BLOCK // 32)
    pos32 = fits_pos32(indices.numel(), weight.shape[0], num_bags, dim)
    key = (weight.dtype, dim, weight.data_ptr() % 16, indices.dtype, mode, has_psw, need_argmax,
           min(avg_len, 32 * UNROLL_ROWS), many_bags, pos32, weight.device.index, TUNE, FORWARD_RESIDENT_WAVES > 0,
           PERSISTENT_MAX_GROUP_ROWS, STRIDE_F32_HALF_UNROLL, WIDE_F32_FEWER_ROWS, SMALL_F32_MORE_BLOCKS)
    plan = _PLANS.get(key)
    if plan is None:
        tiling = RowTiling.for_row(dim, vector_width(dim, weight.element_size(), weight.data_ptr()))
        defines = forward_defines(_dtype_code(weight.dtype), _index_type(indices.dtype), mode, has_psw,
                                  need_argmax, tiling, avg_len, many_bags, pos32)
        fn = _nvrtc.get_function("embedding_bag_forward.cu", "embedding_bag_forward", defines,
                                 weight.device.index)
        resident = _nvrtc.resident_blocks(fn, BLOCK) if defines["PERSISTENT"] else 0
        plan = _PLANS[key] = ForwardPlan(fn, int(defines["TEAM"]), tiling.col_tiles, resident, pos32)
    return plan


def bag_forward(weight: "torch.Tensor", indices: "torch.Tensor", offsets: "torch.Tensor | None",
                num_bags: int, per_sample_weights: "torch.Tensor | None", mode: str,
                padding_idx: int, need_argmax: bool,
                table_rows: "torch.Tensor | None" = None) -> "tuple[torch.Tensor, torch.Tensor | None]":
    """Pooled lookup. ``indices`` is [B, L] (offsets None) or 1-D with CSR ``offsets``
    (``num_bags`` = B; offsets has B or B + 1 entries). Inputs are contiguous.
    With ``table_rows`` (int64 [T], first row of each table in ``weight``) the bags are
    T tables' bags, table-major, and the result is [num_bags / T, T * dim].
    Returns (out, argmax); argmax is None unless ``need_argmax`` (max mode, for backward)."""
    import torch

    dim = weight.shape[1]
    tables = 1 if table_rows is None else table_rows.numel()
    shape = (num_bags // tables, tables * dim)
    out = new_output(shape, weight)
    argmax = torch.empty(shape, dtype=torch.int64, device=weight.device) if need_argmax else None
    if num_bags == 0 or dim == 0:
        return out, argmax
    if _one_row_bags_as_gather(weight, indices, offsets, per_sample_weights, padding_idx, need_argmax, table_rows,
                               out):
        return out, argmax
    if _one_row_csr_bags(weight, indices, offsets, num_bags, per_sample_weights, mode, padding_idx, need_argmax,
                         table_rows, out):
        return out, argmax
    n = indices.numel()
    bag_size = indices.shape[1] if offsets is None else 0
    short = None
    if offsets is None and table_rows is None:
        short = _step_plan("embedding_bag_forward_short", weight, indices, mode, per_sample_weights is not None,
                           need_argmax, bag_size)
    if short is not None:
        steps = -(-num_bags // short.bags_per_step) * short.col_tiles
        grid = grid_stride_blocks(steps * short.row_lanes, weight.device, SHORT_GRID_PER_SM)
        _launch_on(weight, short.fn, grid, [
            (weight.data_ptr(), PTR), (dim, I64), (_ptr(indices), PTR), (num_bags, I64), (short.col_tiles, I32),
            (_ptr(per_sample_weights), PTR), (padding_idx, I64), (out.data_ptr(), PTR), (_ptr(argmax), PTR)])
        return out, argmax
    avg_len = bag_size if offsets is None else max(1, n // max(1, num_bags))
    if offsets is not None and _segmented_forward(weight, indices, offsets, num_bags, per_sample_weights, mode,
                                                  padding_idx, table_rows, avg_len, out, argmax):
        return out, argmax
    plan = _forward_plan(weight, indices, mode, per_sample_weights is not None, need_argmax, avg_len, num_bags)
    _launch_on(weight, plan.fn, plan.grid(num_bags, weight.device), [
        (weight.data_ptr(), PTR), (dim, I64), (_ptr(indices), PTR), (n, I64),
        (_ptr(offsets), PTR), (0 if offsets is None else offsets.numel(), I64), (bag_size, I64),
        (num_bags, I64), (plan.col_tiles, I32), (_ptr(per_sample_weights), PTR), (padding_idx, I64),
        (_ptr(table_rows), PTR), (num_bags // tables, I64), (tables * dim, I64), (out.data_ptr(), PTR),
        (_ptr(argmax), PTR)])
    return out, argmax


def _segmented_forward(weight: "torch.Tensor", indices: "torch.Tensor", offsets: "torch.Tensor", num_bags: int,
                       per_sample_weights: "torch.Tensor | None", mode: str, padding_idx: int,
                       table_rows: "torch.Tensor | None", avg_len: int, out: "torch.Tensor",
                       argmax: "torch.Tensor | None") -> bool:
    """Launch embedding_bag_forward_segmented for CSR bags if it serves this call; False if not."""
    n = indices.numel()
    if n >= 2**31:  # the kernel's positions are 32-bit
        return False
    segment = _step_plan("embedding_bag_forward_segmented", weight, indices, mode, per_sample_weights is not None,
                         argmax is not None, avg_len)
    if segment is None:
        return False
    tables = 1 if table_rows is None else table_rows.numel()
    cap = segment_cap(segment.row_lanes, num_bags, sm_count(weight.device))
    if cap < 2:
        return False
    # one table: its segment size is known here (2 or more: avg_len <= SEGMENT_MAX_AVG);
    # several: each team works out each table's, at most cap
    rows = segment_rows(_dtype_code(weight.dtype))
    bags = min(cap, segment_bags(avg_len, segment.row_lanes, rows)) if tables == 1 else 0
    dim = weight.shape[1]
    units = (-(-num_bags // bags) if bags else num_bags) * segment.col_tiles
    grid = grid_stride_blocks(units * segment.row_lanes, weight.device, SEGMENT_GRID_PER_SM)
    _launch_on(weight, segment.fn, grid, [
        (weight.data_ptr(), PTR), (dim, I64), (_ptr(indices), PTR), (n, I64), (_ptr(offsets), PTR),
        (offsets.numel(), I64), (num_bags, I64), (segment.col_tiles, I32), (bags, I32), (cap, I32),
        (_ptr(per_sample_weights), PTR), (padding_idx, I64), (_ptr(table_rows), PTR), (num_bags // tables, I64),
        (tables * dim, I64), (out.data_ptr(), PTR), (_ptr(argmax), PTR)])
    return True


# The bulk-copy gather (embedding_gather_bulk, sm_90+): two BULK_STAGE_BYTES stages per warp,
# BULK_BLOCK threads per block, for rows of BULK_ROW_BYTES (a multiple of 16). Against the
# register gather, side by side (runs 56-59, scripts/gather_bulk.py, median of 100): 262144
# uniform rows of 5M x 128 bf16 36.3 -> 34.3 us (86.6 -> 91.7 % of copy), f32 68.5 -> 67.7-67.9,
# 1M rows alike or 0.7 % faster; f32 rows of 1 KB 37.9 -> 34.1 us (N65536) and of 2 KB 84.4 ->
# 66.9 us; 128-byte rows alike or 3 % faster. Grid: one resident wave while a warp has at most
# BULK_MAX_STEPS_PER_WARP steps (bf16 N262144: 5 steps, 34.3 against 35.2 us with one step per
# warp), else one step per warp (bf16 N1M: 21 steps, 132.8 against 136.2 us in one wave).
BULK_MIN_ARCH = 90
BULK_ROW_BYTES = (128, 4096)
# The gather (unpooled lookups and [B, 1] bags) takes the bulk path only from rows of this
# size: bulk copies read from the L2 and never hit in the L1, where the register gather finds a
# skewed table's hot rows. For 128-byte rows (d32 f32 B131072, 1M rows, run 72) the bulk gather
# was 2 % faster on uniform indices (12.2 against 12.5 us) and 10-18 % slower on Zipf 1.15 ones
# (12.0 against 10.8 us in the short-bag kernel, 9.8 us in the register gather); from 256 bytes
# up it keeps the one-hot targets (change 31). CSR one-row bags keep BULK_ROW_BYTES: the
# segmented kernel they would go back to was slower on both (change 34).
BULK_GATHER_MIN_ROW_BYTES = 256
BULK_STAGE_BYTES = 4096
BULK_BLOCK = 128
BULK_MAX_STEPS_PER_WARP = 8
SMEM_PER_SM = 228 << 10  # Hopper: shared memory per SM, of which each block reserves 1 KB
SMEM_RESERVED_PER_BLOCK = 1 << 10
THREADS_PER_SM = 2048


@dataclass(frozen=True)
class BulkPlan:
    """A launch of embedding_gather_bulk."""

    rows: int  # rows per warp step (BULK_ROWS)
    grid: int  # blocks of BULK_BLOCK threads


def bulk_gather_plan(row_bytes: int, num_indices: int, aligned: bool, arch: int, sms: int,
                     min_row_bytes: int = 0) -> "BulkPlan | None":
    """The bulk-copy gather's launch for rows of ``row_bytes`` (None where it does not apply:
    older GPUs, rows outside BULK_ROW_BYTES, below ``min_row_bytes`` or not a multiple of 16,
    pointers not 16-byte aligned). Pure: testable on CPU."""
    low, high = max(BULK_ROW_BYTES[0], min_row_bytes), BULK_ROW_BYTES[1]
    if arch < BULK_MIN_ARCH or not aligned or row_bytes % 16 or not low <= row_bytes <= high:
        return None
    rows = min(32, BULK_STAGE_BYTES // row_bytes)
    warps = BULK_BLOCK // 32
    smem = warps * (2 * rows * row_bytes + 16)  # two stages and two barriers per warp
    per_sm = min(THREADS_PER_SM // BULK_BLOCK, SMEM_PER_SM // (smem + SMEM_RESERVED_PER_BLOCK))
    steps = -(-num_indices // rows)
    blocks = -(-steps // warps)
    wave = per_sm * sms
    grid = min(blocks, wave) if steps <= BULK_MAX_STEPS_PER_WARP * wave * warps else blocks
    return BulkPlan(rows, max(1, min(grid, MAX_GRID)))


def _bulk_plan(weight: "torch.Tensor", out: "torch.Tensor", items: int, min_row_bytes: int = 0) -> "BulkPlan | None":
    """bulk_gather_plan for ``items`` output rows of ``weight``'s width written to ``out``."""
    row_bytes = weight.shape[1] * weight.element_size()
    arch = int(_nvrtc.device_arch(weight.device.index)[3:])
    aligned = weight.data_ptr() % 16 == 0 and out.data_ptr() % 16 == 0
    return bulk_gather_plan(row_bytes, items, aligned, arch, sm_count(weight.device), min_row_bytes)


def _bulk_defines(weight: "torch.Tensor", indices: "torch.Tensor", bulk: BulkPlan) -> dict[str, object]:
    return {"INDEX_T": _index_type(indices.dtype), "BULK_ROWS": bulk.rows,
            "ROW_BYTES": weight.shape[1] * weight.element_size(), "BLOCK": BULK_BLOCK}


def _bulk_gather(weight: "torch.Tensor", indices: "torch.Tensor", out: "torch.Tensor") -> bool:
    """Launch embedding_gather_bulk into ``out`` if it serves this call; False if not."""
    bulk = _bulk_plan(weight, out, indices.numel(), BULK_GATHER_MIN_ROW_BYTES)
    if bulk is None:
        return False
    fn = _nvrtc.get_function("embedding_gather.cu", "embedding_gather_bulk", _bulk_defines(weight, indices, bulk),
                             weight.device.index)
    _launch_on(weight, fn, bulk.grid, [(weight.data_ptr(), PTR), (_ptr(indices), PTR), (indices.numel(), I64),
                                       (out.data_ptr(), PTR)], block=BULK_BLOCK)
    return True


# CSR bags as many as their indices go to embedding_bag_forward_bulk (False: to the segmented
# or general kernel, as before change 34; scripts/csr_one_row.py times both), when the call
# has at least BULK_BAGS_MIN_STEPS_PER_SM warp steps per SM: below that each warp is a chain of
# dependent loads with nothing beside it (d32 f32 B1024: 6.3 us against 5.6 for the general
# kernel and torch's 6.0; 32 steps), while from B32768 up it wins (run 68).
BULK_ONE_ROW_CSR = True
BULK_BAGS_MIN_STEPS_PER_SM = 1


def _one_row_csr_bags(weight: "torch.Tensor", indices: "torch.Tensor", offsets: "torch.Tensor | None",
                      num_bags: int, per_sample_weights: "torch.Tensor | None", mode: str, padding_idx: int,
                      need_argmax: bool, table_rows: "torch.Tensor | None", out: "torch.Tensor") -> bool:
    """CSR bags as many as their indices (one table, no per-sample weights, no argmax): most
    likely one row each, which only the device can tell. embedding_bag_forward_bulk copies a
    bag of one valid row with the bulk-copy engine and pools any other bag in the warp (d128 f32
    B131072 L1 CSR: 40.0 us, 76.7 % of copy, in the segmented kernel, run 62). False if the call
    is not such or the bulk path does not serve it."""
    if offsets is None or table_rows is not None or per_sample_weights is not None or need_argmax:
        return False
    if not BULK_ONE_ROW_CSR or indices.numel() != num_bags:
        return False
    bulk = _bulk_plan(weight, out, num_bags)
    if bulk is None or -(-num_bags // bulk.rows) < BULK_BAGS_MIN_STEPS_PER_SM * sm_count(weight.device):
        return False
    defines = {**_bulk_defines(weight, indices, bulk), "BULK_BAGS": 1, "MODE": MODES[mode],
               "WEIGHT_DTYPE": _dtype_code(weight.dtype)}
    fn = _nvrtc.get_function("embedding_gather.cu", "embedding_bag_forward_bulk", defines, weight.device.index)
    _launch_on(weight, fn, bulk.grid, [
        (weight.data_ptr(), PTR), (_ptr(indices), PTR), (indices.numel(), I64), (_ptr(offsets), PTR),
        (offsets.numel(), I64), (num_bags, I64), (padding_idx, I64), (out.data_ptr(), PTR)], block=BULK_BLOCK)
    return True


def _one_row_bags_as_gather(weight: "torch.Tensor", indices: "torch.Tensor", offsets: "torch.Tensor | None",
                            per_sample_weights: "torch.Tensor | None", padding_idx: int, need_argmax: bool,
                            table_rows: "torch.Tensor | None", out: "torch.Tensor") -> bool:
    """Bags of exactly one row ([B, 1], one table, no per-sample weights, no padding row, no
    argmax) are that row in every mode (a mean over one row divides by 1; 16-bit values are
    pooled in float32 and rounded back unchanged): the bulk-copy gather moves them where it
    applies (d128 f32 B131072: 36.4 us, 84.0 % of copy, in the short-bag kernel, run 60; 33.8
    us, 90.0 %, run 62). False if the call is not such or the bulk gather does not serve it."""
    one_row_bags = offsets is None and indices.shape[1] == 1 and table_rows is None
    plain = per_sample_weights is None and padding_idx < 0 and not need_argmax
    return one_row_bags and plain and _bulk_gather(weight, indices.view(-1), out)


def gather(weight: "torch.Tensor", indices: "torch.Tensor") -> "torch.Tensor":
    """Unpooled lookup: out[i] = weight[indices[i]] for flat contiguous ``indices``."""
    dim = weight.shape[1]
    out = new_output((indices.numel(), dim), weight)
    if out.numel() == 0 or _bulk_gather(weight, indices, out):
        return out
    row_bytes = dim * weight.element_size()
    device = weight.device.index
    word = vector_width(row_bytes, 1, weight.data_ptr())  # bytes per copied word: 2..16
    tiling = RowTiling.for_row(row_bytes // word, 1)
    unroll = min(4, tiling.row_lanes)
    defines = {"INDEX_T": _index_type(indices.dtype), "CHUNK_BYTES": word, "ROW_LANES": tiling.row_lanes,
               "CHUNKS": tiling.chunks, "UNROLL": unroll, "BLOCK": BLOCK}
    fn = _nvrtc.get_function("embedding_gather.cu", "embedding_gather", defines, device)
    items = -(-indices.numel() // unroll) * tiling.col_tiles
    # one step per team: the block scheduler refills each SM as blocks end, where 16 blocks
    # per SM striding left SMs idle in the last wave (N262144 f32 70.6 -> 68.3 us, N1M 279.6
    # -> 262.1 us; run 41, perf-log change 28). The kernel still strides past a capped grid.
    grid = max(1, min(-(-items * tiling.row_lanes // BLOCK), MAX_GRID))
    _launch_on(weight, fn, grid, [
        (weight.data_ptr(), PTR), (row_bytes // word, I64), (_ptr(indices), PTR), (indices.numel(), I64),
        (out.data_ptr(), PTR)])
    return out


# The trailing parameters of the backward kernels when no optimizer is fused (FUSED_OPT = 0):
# weight, state1, state2, lr, eps, beta1, beta2, weight_decay, step_size, seed.
NO_FUSED_ARGS: list[tuple[object, str]] = [(0, PTR)] * 3 + [(0.0, F32)] * 6 + [(0, I64)]

BACKWARD_CHUNKS = (128, 64, 32)  # sorted positions per team in the backward kernel (CHUNK_POS)


def backward_chunk(num_indices: int, sms: int) -> int:
    """The longest chunk that still gives every SM 64 teams; else the shortest. Short chunks
    mean more teams, each with fewer dependent rounds (suite 1: 307200 positions, passes
    62 us at 128, run 17); long chunks mean fewer partial sums to combine per hot row."""
    for chunk in BACKWARD_CHUNKS:
        if num_indices // chunk >= 64 * sms:
            return chunk
    return BACKWARD_CHUNKS[-1]


# Zero the untouched gradient rows on a second stream, overlapping the sort and the passes
# (False: on the caller's stream, one after the other; the benchmark's probe compares both).
# Only when lookups are few per table row: then the sort and the passes are small and
# latency-bound and hide under the fill (suite 1, 0.06 lookups per row: 624 us instead of
# ~700); with many (suite 3, 0.21 per row) both sides are memory-bound, contend for DRAM,
# and a memset followed by the passes is faster (2.90 ms sequential vs 3.10 overlapped; run 17).
OVERLAP_ZERO_FILL = True
OVERLAP_MAX_LOOKUPS_PER_ROW = 0.1
# Blocks per SM for the zero fill's grid. Fewer do not leave the sort more room: it is slowed
# by the fill's DRAM traffic, not by a lack of SM slots (2, 4, 16 blocks: the backward ended at
# 710, 692, 687 us with evict-first stores; run 17, scripts/bwd_timeline.py).
FILL_BLOCKS_PER_SM = 16


# Positions each lane of the backward's chunk kernel keeps in flight (gradient rows loaded
# before any is added), that kernel's occupancy floor (__launch_bounds__ minimum blocks), and
# evict-first stores for the rows it writes (scripts/bwd_timeline.py compares the choices;
# docs/perf-log.md, changes 19-20).
BACKWARD_ROWS_IN_FLIGHT = 4
BACKWARD_MIN_BLOCKS = 2
BACKWARD_STREAMING_ROWS = 1


def bag_backward(grad_out: "torch.Tensor", indices: "torch.Tensor", bag_of: "torch.Tensor | None",
                 bag_size: int, num_weights: int, per_sample_weights: "torch.Tensor | None",
                 bag_scale: "torch.Tensor | None", padding_idx: int, scale: float = 1.0) -> "torch.Tensor":
    """Deterministic weight gradient (embedding_bag_backward.cu): positions sorted stably by
    row, fixed chunks of sorted positions per team, runs that cross chunks combined in order.
    ``bag_of`` maps each flat position to its bag (None: fixed layout, bag = position // bag_size).
    Every contribution is multiplied by ``scale`` (mean over bags of one known size: 1 / size),
    and by ``bag_scale[bag]`` when given (mean over bags of varying size)."""
    import torch

    dim = grad_out.shape[1]
    n = indices.numel()
    if n == 0 or dim == 0:
        return torch.zeros((num_weights, dim), dtype=grad_out.dtype, device=grad_out.device)
    flat = indices.reshape(-1)
    main = torch.cuda.current_stream(grad_out.device)
    side = main
    if OVERLAP_ZERO_FILL and n <= OVERLAP_MAX_LOOKUPS_PER_ROW * num_weights:
        grad_weight = new_output((num_weights, dim), grad_out)
        # the side stream's first kernel (the bitmap) also writes the int32 sort keys: one
        # launch fewer before the sort, and launches beside the fill are slow (perf-log)
        keys = torch.empty(n, dtype=torch.int32, device=flat.device) if num_weights < 2**31 else None
        side = _side_stream(grad_out.device.index)
        side.wait_stream(main)
        with torch.cuda.stream(side):  # zeros for the rows nobody looked up, meanwhile
            marked = _zero_untouched_rows(grad_weight, flat, padding_idx, keys)
        main.wait_event(marked)
        if keys is None:
            keys = flat.to(torch.int64)
        sorted_rows, positions = torch.sort(keys, stable=True)
    else:  # many lookups per row: a plain memset first, then the passes, one after the other
        grad_weight = torch.zeros((num_weights, dim), dtype=grad_out.dtype, device=grad_out.device)
        sorted_rows, positions = sort_by_row(flat, num_weights)
    backward_passes(grad_out, sorted_rows, positions, bag_of, bag_size, per_sample_weights, bag_scale,
                    padding_idx, scale, grad_weight)
    if side is not main:
        main.wait_stream(side)
        for t in (flat, grad_weight, keys):  # used on both streams: not reused before the side work is done
            t.record_stream(side)
    return grad_weight


def sort_by_row(flat: "torch.Tensor", num_weights: int) -> "tuple[torch.Tensor, torch.Tensor]":
    """(sorted rows, their positions in ``flat``): a stable sort, so each row's positions
    stay in order. int32 keys halve the radix passes (73 vs 119 us for suite 1's 307200
    keys; run 17)."""
    import torch

    keys = flat.to(torch.int32) if num_weights < 2**31 else flat.to(torch.int64)
    return torch.sort(keys, stable=True)


def backward_passes(grad_out: "torch.Tensor", sorted_rows: "torch.Tensor", positions: "torch.Tensor",
                    bag_of: "torch.Tensor | None", bag_size: int, per_sample_weights: "torch.Tensor | None",
                    bag_scale: "torch.Tensor | None", padding_idx: int, scale: float,
                    grad_weight: "torch.Tensor | None", fused_defines: "dict[str, object] | None" = None,
                    fused_args: "list[tuple[object, str]] | None" = None) -> None:
    """The chunk and combine kernels: write every looked-up row of ``grad_weight`` (float32 rows
    when it is float32 and grad_out is not: GRAD_F32), or, with ``fused_defines`` / ``fused_args``
    (FUSED_OPT, _segments.py), update those rows in place instead."""
    import torch

    dim = grad_out.shape[1]
    n = sorted_rows.numel()
    tiling = RowTiling.for_row(dim, vector_width(dim, grad_out.element_size(), grad_out.data_ptr()))
    chunk = backward_chunk(n, sm_count(grad_out.device))
    defines = {"WEIGHT_DTYPE": _dtype_code(grad_out.dtype), "VEC": tiling.vec, "ROW_LANES": tiling.row_lanes,
               "CHUNKS": tiling.chunks, "UNROLL": _floor_pow2(max(1, BACKWARD_ROWS_IN_FLIGHT // tiling.chunks)),
               "HAS_PSW": int(per_sample_weights is not None), "HAS_SCALE": int(bag_scale is not None),
               "CHUNK_POS": chunk, "BLOCK": BLOCK, "ROW_T": _index_type(sorted_rows.dtype),
               "MIN_BLOCKS": BACKWARD_MIN_BLOCKS, "STREAMING_ROWS": BACKWARD_STREAMING_ROWS}
    if grad_weight is not None and grad_weight.dtype != grad_out.dtype:
        defines["GRAD_F32"] = 1
    if fused_defines:
        defines.update(fused_defines)
    tail = fused_args if fused_args is not None else NO_FUSED_ARGS
    device = grad_out.device.index
    chunks = -(-n // chunk)
    partial = torch.empty((chunks * 2, dim), dtype=torch.float32, device=grad_out.device)
    carries = torch.empty((chunks,), dtype=torch.int32, device=grad_out.device)
    grid = -(-chunks * tiling.col_tiles * tiling.row_lanes // BLOCK)
    fn = _nvrtc.get_function("embedding_bag_backward.cu", "embedding_bag_backward",
                             {**defines, "BACKWARD_PASS": 1}, device)
    _launch_on(grad_out, fn, grid, [
        (grad_out.data_ptr(), PTR), (dim, I64), (sorted_rows.data_ptr(), PTR), (positions.data_ptr(), PTR),
        (n, I64), (_ptr(bag_of), PTR), (max(1, bag_size), I64), (_ptr(per_sample_weights), PTR),
        (_ptr(bag_scale), PTR), (scale, F32), (padding_idx, I64), (tiling.col_tiles, I32),
        (_ptr(grad_weight), PTR), (partial.data_ptr(), PTR), (carries.data_ptr(), PTR), *tail])
    combine = _nvrtc.get_function("embedding_bag_backward.cu", "embedding_bag_backward_combine",
                                  {**defines, "BACKWARD_PASS": 2}, device)
    _launch_on(grad_out, combine, grid, [
        (sorted_rows.data_ptr(), PTR), (n, I64), (dim, I64), (tiling.col_tiles, I32), (partial.data_ptr(), PTR),
        (carries.data_ptr(), PTR), (_ptr(grad_weight), PTR), *tail])


@functools.lru_cache(maxsize=None)
def _side_stream(device_index: int) -> "torch.cuda.Stream":
    import torch

    return torch.cuda.Stream(device_index)


def _zero_untouched_rows(grad_weight: "torch.Tensor", rows: "torch.Tensor", padding_idx: int,
                         keys: "torch.Tensor | None") -> "torch.cuda.Event":
    """On the current stream: a bitmap of the looked-up rows (``rows``: int32 or int64; also
    copied to the int32 ``keys`` when given), then zeros in every other row (and the padding
    row). The backward passes write exactly the rows this leaves alone. Returns an event
    recorded after the bitmap (and keys) are written."""
    import torch

    num_weights, dim = grad_weight.shape
    touched = torch.zeros((num_weights + 31) // 32, dtype=torch.int32, device=grad_weight.device)
    device = grad_weight.device.index
    mark = _nvrtc.get_function("embedding_bag_backward.cu", "embedding_bag_backward_mark",
                               {"BACKWARD_PASS": 3, "BLOCK": BLOCK, "INDEX_T": _index_type(rows.dtype)}, device)
    grid = grid_stride_blocks(rows.numel(), grad_weight.device, 8)
    _launch_on(grad_weight, mark, grid, [
        (rows.data_ptr(), PTR), (rows.numel(), I64), (num_weights, I64), (touched.data_ptr(), PTR),
        (_ptr(keys), PTR)])
    marked = torch.cuda.Event()
    marked.record()
    row_bytes = dim * grad_weight.element_size()
    word = vector_width(row_bytes, 1, grad_weight.data_ptr())  # bytes per zeroed word: 2..16
    fill = _nvrtc.get_function("embedding_bag_backward.cu", "embedding_bag_backward_fill",
                               {"BACKWARD_PASS": 3, "BLOCK": BLOCK, "FILL_BYTES": word}, device)
    row_words = row_bytes // word
    row_shift = row_words.bit_length() - 1 if row_words & (row_words - 1) == 0 else -1
    grid = grid_stride_blocks(num_weights * row_words, grad_weight.device, FILL_BLOCKS_PER_SM)
    _launch_on(grad_weight, fill, grid, [
        (touched.data_ptr(), PTR), (num_weights, I64), (row_words, I64), (row_shift, I32), (padding_idx, I64),
        (grad_weight.data_ptr(), PTR)])
    return marked
