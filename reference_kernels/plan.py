"""Kernel selection: pure functions from a call's description and the device's properties to
a Plan (source, entry, compile-time defines, grid, block, and why). No torch, no CUDA: every
pick is testable on the CPU (tests/kernels/golden_picks.py records 32,400 of them).

``launch.py`` describes a call (``BagCall``, ``GatherCall``, ``BackwardCall``), asks for its
plan, compiles the plan's variant and packs the arguments; it chooses nothing itself.
The knobs come from ``tuning.Tuning`` (a frozen value, part of every plan cache key). Each
rule below is stated where it is applied; the measurements behind it are in docs/perf/.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .tuning import Tuning

BLOCK = 256  # threads per block of the pooled, gather and backward kernels
BULK_BLOCK = 128  # threads per block of the bulk-copy kernels
MAX_CHUNKS = 4  # vectors per lane per row before the row is split into column tiles
MODES = {"sum": 0, "mean": 1, "max": 2}
BULK_ROW_BYTES = (128, 4096)  # row sizes the bulk-copy kernels take (a multiple of 16)
FORWARD = "embedding_bag_forward.cu"
GATHER = "embedding_gather.cu"
BACKWARD = "embedding_bag_backward.cu"

Defines = dict[str, object]


@dataclass(frozen=True, kw_only=True)
class DeviceProps:
    """What selection needs to know about a GPU (read from the device, see launch.device_props)."""

    sms: int
    arch: int  # compute capability as major * 10 + minor (90: sm_90)
    max_threads_per_sm: int
    max_blocks_per_sm: int
    regs_per_sm: int
    smem_per_sm: int
    smem_reserved_per_block: int


@dataclass(frozen=True)
class RowTiling:
    """How a row of ``dim`` elements is spread over lanes: VEC elements per vector,
    ROW_LANES lanes per row, CHUNKS vectors per lane, ``col_tiles`` tiles per row."""

    vec: int
    row_lanes: int
    chunks: int
    col_tiles: int

    @staticmethod
    def for_row(dim: int, vec: int, *, balanced: bool = True) -> RowTiling:
        """The (lanes per row, vectors per lane) pair with the fewest idle lanes, fewer chunks
        on ties (e.g. 48 vectors: 16 lanes x 3; 24 vectors: 8 lanes x 3, not 32 lanes with 8
        idle). Rows beyond 32 x MAX_CHUNKS vectors are cut into column tiles of 32 lanes, each
        lane with the fewest vectors that cover the row in that many tiles (``balanced``): 130
        vectors (520 float32 columns) in 2 tiles of 32 x 3, not 32 x 4 and a tile of 2 vectors
        whose team loads 16 bytes a row with 30 lanes idle (False: 32 x MAX_CHUNKS tiles)."""
        vectors = dim // vec
        if vectors > 32 * MAX_CHUNKS:
            tiles = -(-vectors // (32 * MAX_CHUNKS))
            return RowTiling(vec, 32, -(-vectors // (32 * tiles)) if balanced else MAX_CHUNKS, tiles)
        options = []
        for lanes in (32, 16, 8, 4, 2, 1):
            chunks = -(-vectors // lanes)
            if chunks <= MAX_CHUNKS and (lanes == 1 or lanes < 2 * vectors):
                options.append((lanes * chunks - vectors, chunks, lanes))
        _, chunks, lanes = min(options)
        return RowTiling(vec, lanes, chunks, 1)


def vector_width(row_elems: int, elem_bytes: int, *pointers: int) -> int:
    """Largest element count per load (at most 16 bytes) that divides the row and keeps every
    row of every tensor aligned (``pointers``: addresses, or their remainders modulo 16)."""
    vec = 16 // elem_bytes
    while vec > 1 and (row_elems % vec or any(p % (vec * elem_bytes) for p in pointers)):
        vec //= 2
    return vec


@dataclass(frozen=True)
class Plan:
    """One kernel launch: which compiled variant, its grid, the scalars the selection chose
    for its arguments, and why (one line per choice)."""

    source: str
    entry: str
    defines: tuple[tuple[str, object], ...]
    blocks: int  # the grid; with ``resident_waves`` its upper bound
    block: int = BLOCK
    # None: ``blocks`` is the grid. Else teams stride and the grid is at most this many waves of
    # the blocks that fit on the SMs at once (the device's occupancy of the compiled variant).
    resident_waves: int | None = None
    col_tiles: int = 1
    segment_bags: int = 0  # the segmented kernel: bags per segment (0: each team works it out)
    segment_cap: int = 0  # the segmented kernel: the most bags per segment
    row_words: int = 0  # the gather: copied words per row
    chunk_positions: int = 0  # the backward: sorted positions per team
    why: tuple[str, ...] = field(default=(), compare=False)

    def define(self, name: str) -> int:
        value = dict(self.defines)[name]
        assert isinstance(value, int)
        return value

    def grid(self, sms: int, resident_blocks: int) -> int:
        """The grid, given the occupancy the device reports for the compiled variant."""
        if self.resident_waves is None or not resident_blocks:
            return self.blocks
        return max(1, min(self.blocks, sms * resident_blocks * self.resident_waves))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _floor_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _ceil_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def grid_stride_blocks(threads: int, sms: int, per_sm: int, block: int = BLOCK) -> int:
    """Blocks for a grid-stride kernel: enough for ``threads``, at most ``per_sm`` per SM."""
    return max(1, min(_ceil_div(threads, block), sms * per_sm))


def _plan(source: str, entry: str, defines: Defines, blocks: int, *why: str, **launch: int | None) -> Plan:
    return Plan(source, entry, tuple(defines.items()), blocks, why=why, **launch)  # type: ignore[arg-type]


def width_groups(widths: Sequence[int]) -> list[list[int]]:
    """Positions of ``widths`` grouped by value, groups in order of first appearance, positions
    ascending: the launches of tables of mixed widths (one weight and one lookup per width;
    ``tbe.TableBatchedEmbeddingBag``, the sharded module's local shards)."""
    groups: dict[int, list[int]] = {}
    for position, width in enumerate(widths):
        groups.setdefault(width, []).append(position)
    return list(groups.values())


# ---------------------------------------------------------------------------------------------
# the pooled forward


@dataclass(frozen=True, kw_only=True)
class BagCall:
    """A pooled lookup, as selection sees it."""

    weight_dtype: int  # 0 float32, 1 float16, 2 bfloat16
    elem_bytes: int
    dim: int
    num_rows: int  # rows of the weight (all tables)
    weight_align: int  # the weight's address modulo 16
    out_aligned: bool  # the output's address is a multiple of 16
    index_type: str  # "i64" or "int"
    bag_size: int  # [B, L] indices: L; CSR offsets: 0
    num_indices: int
    num_bags: int  # all tables' bags
    tables: int  # tables of a table-batched call; 1 otherwise
    table_batched: bool
    mode: str
    has_psw: bool
    need_argmax: bool
    has_padding: bool
    # Table columns (TABLE_COLS: a width group of a module with tables of mixed widths): the
    # output's row width, each table's columns and offsets' table in ``table_rows``; 0: the
    # tables' rows side by side (tables * dim). ``all_bags``: then the bags of every table of the
    # offsets, whose ``num_indices`` indices this call's bags are some of (their average length).
    out_width: int = 0
    all_bags: int = 0

    @property
    def csr(self) -> bool:
        return self.bag_size == 0

    @property
    def avg_len(self) -> int:
        bags = self.all_bags or self.num_bags
        return self.bag_size if not self.csr else max(1, self.num_indices // max(1, bags))

    def tiling(self, balanced: bool = True) -> RowTiling:
        return RowTiling.for_row(self.dim, vector_width(self.dim, self.elem_bytes, self.weight_align),
                                 balanced=balanced)


@dataclass(frozen=True, kw_only=True)
class Variant:
    """What a pooled forward kernel variant is compiled for."""

    weight_dtype: int
    index_type: str
    mode: str
    has_psw: bool
    need_argmax: bool
    tiling: RowTiling

    @staticmethod
    def of(call: BagCall, tuning: Tuning) -> Variant:
        return Variant(weight_dtype=call.weight_dtype, index_type=call.index_type, mode=call.mode,
                       has_psw=call.has_psw, need_argmax=call.need_argmax,
                       tiling=call.tiling(tuning.balanced_col_tiles))


def plan_bag_forward(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan:
    """The kernel for a pooled lookup: the first of the paths below that serves it."""
    for path in (_one_row_bags_as_gather, _one_row_csr_bags, _short_bags, _segmented_bags):
        plan = path(call, device, tuning)
        if plan is not None:
            return with_table_columns(plan, call)
    return with_table_columns(_general_bags(call, device, tuning), call)


def with_table_columns(plan: Plan, call: BagCall) -> Plan:
    """A table-columns call (``out_width``) takes its plan's kernel compiled with TABLE_COLS:
    the same choice as for its tables side by side (a table-batched call: only the segmented
    and general kernels serve it, both of which take the columns)."""
    if not call.out_width:
        return plan
    assert call.table_batched and plan.entry in ("embedding_bag_forward", "embedding_bag_forward_segmented")
    defines = {**dict(plan.defines), "TABLE_COLS": 1}
    why = [f"table columns in rows of {call.out_width} (TABLE_COLS)"]
    # The columns' lookups keep the bag's table in a register past the rows: at the 32-register
    # cap (7-8 blocks per SM) the per-sample-weights pick then spills (d128 float32: 4 bytes at 7
    # and 8, 35 registers at 6; nvcc -Xptxas -v, sm_90); the nvcc sweep compiles every pick.
    if plan.entry == "embedding_bag_forward" and call.has_psw and plan.define("MIN_BLOCKS") > 6:
        defines["MIN_BLOCKS"] = 6
        why.append("TABLE_COLS with per-sample weights: 6 blocks per SM (the 32-register cap spills)")
    return replace(plan, defines=tuple(defines.items()), why=(*plan.why, *why))


def checked_min_blocks(min_blocks: int) -> int:
    """The occupancy floor of a variant that checks its own indices (CHECK): one block per SM
    fewer than the plain variant's above 2, and at most 6 (7 and 8 leave the same 32 registers).
    The check's code spills several picks that sit at their register cap (8-16 bytes at 40, 32
    and 64 registers; nvcc -Xptxas -v, sm_90), and none lower (tests/kernels compiles every
    CHECK pick and fails on a spill). 64-bit positions (POS32 0) spill with it even so and keep
    the pass."""
    return min(min_blocks - 1, 6) if min_blocks > 2 else min_blocks


def plan_checked_bag_forward(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan | None:
    """``plan_bag_forward``'s kernel checking the call's indices and offsets itself (CHECK, the
    semantics of index_check.cu's pass), or None where it cannot, and the pass runs first: only
    the general kernel checks, for one table, one column tile, 32-bit positions, sum or mean,
    and only where its lower occupancy floor (checked_min_blocks) does not bind: the call's
    blocks fit one wave at that floor, or the floor is the plain variant's (docs/kernels.md,
    "Index range check"; measured in docs/perf/change-50.md)."""
    # max (argmax too): measured slower than the pass and the plain lookup (change 50)
    if not tuning.fused_index_check or call.tables != 1 or call.table_batched or call.mode == "max":
        return None
    plan = plan_bag_forward(call, device, tuning)
    if plan.entry != "embedding_bag_forward" or plan.col_tiles != 1 or plan.define("POS32") != 1:
        return None
    min_blocks = checked_min_blocks(plan.define("MIN_BLOCKS"))
    if min_blocks < plan.define("MIN_BLOCKS") and plan.blocks > device.sms * min_blocks:
        return None  # a call of several waves would lose the block per SM: the pass costs it less (change 50)
    defines = dict(plan.defines)
    defines["CHECK"] = 1
    defines["MIN_BLOCKS"] = min_blocks
    return replace(plan, defines=tuple(defines.items()), why=(*plan.why, "the index check inside the lookup (CHECK)"))


def _one_row_bags_as_gather(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan | None:
    """Bags of exactly one row ([B, 1], one table, no per-sample weights, no padding row, no
    argmax) are that row in every mode (a mean over one row divides by 1; 16-bit values are
    pooled in float32 and rounded back unchanged): the bulk-copy gather moves them where it
    applies."""
    one_row_bags = call.bag_size == 1 and not call.table_batched
    plain = not (call.has_psw or call.has_padding or call.need_argmax)
    if not (one_row_bags and plain):
        return None
    return plan_gather(GatherCall(elem_bytes=call.elem_bytes, dim=call.dim, weight_align=call.weight_align,
                                  out_aligned=call.out_aligned, index_type=call.index_type,
                                  num_indices=call.num_indices), device, tuning, bulk_only=True)


def _one_row_csr_bags(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan | None:
    """CSR bags as many as their indices (one table, no per-sample weights, no argmax): most
    likely one row each, which only the device can tell. embedding_bag_forward_bulk copies a
    bag of one valid row with the bulk-copy engine and pools any other bag in the warp; only
    where the call gives each SM at least ``bulk_bags_min_steps_per_sm`` warp steps (below
    that each warp is a chain of dependent loads with nothing beside it)."""
    if not call.csr or call.table_batched or call.has_psw or call.need_argmax:
        return None
    if not tuning.bulk_one_row_csr or call.num_indices != call.num_bags:
        return None
    row_bytes = call.dim * call.elem_bytes
    bulk = bulk_gather_plan(row_bytes=row_bytes, num_indices=call.num_bags,
                            aligned=call.weight_align == 0 and call.out_aligned, device=device, tuning=tuning)
    if bulk is None or _ceil_div(call.num_bags, bulk.rows) < tuning.bulk_bags_min_steps_per_sm * device.sms:
        return None
    defines = {**_bulk_defines(call.index_type, bulk.rows, row_bytes), "BULK_BAGS": 1, "MODE": MODES[call.mode],
               "WEIGHT_DTYPE": call.weight_dtype}
    return _plan(GATHER, "embedding_bag_forward_bulk", defines, bulk.grid,
                 "CSR bags as many as their indices: one-row bags by the bulk-copy engine", block=BULK_BLOCK)


def _short_bags(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan | None:
    """[B, L] bags of one table with two or more bags per team step: the short-bag kernel,
    ``short_grid_per_sm`` blocks per SM, teams striding over the steps."""
    if call.csr or call.table_batched:
        return None
    variant = Variant.of(call, tuning)
    tiling = variant.tiling
    defines = short_bag_defines(variant, bag_len=call.bag_size, tuning=tuning)
    if defines is None:
        return None
    bags_per_step = int(defines["BAGS_PER_STEP"])  # type: ignore[call-overload]
    steps = _ceil_div(call.num_bags, bags_per_step) * tiling.col_tiles
    grid = grid_stride_blocks(steps * tiling.row_lanes, device.sms, tuning.short_grid_per_sm)
    return _plan(FORWARD, "embedding_bag_forward_short", defines, grid,
                 f"fixed bags of {call.bag_size}: {bags_per_step} bags per team step", col_tiles=tiling.col_tiles)


def _segmented_bags(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan | None:
    """CSR (or table-batched) bags of at most ``segment_max_avg`` rows on average, in a call
    with enough bags for two per segment at ``segment_min_warps_per_sm`` warps per SM: the
    segmented kernel (32-bit positions)."""
    if not call.csr or call.num_indices >= 2**31:
        return None
    variant = Variant.of(call, tuning)
    tiling = variant.tiling
    avg_len = call.avg_len
    pos32 = fits_pos32(num_indices=call.num_indices, num_rows=call.num_rows, num_bags=call.num_bags, dim=call.dim,
                       tuning=tuning)
    if leaves_segments(variant, pos32=pos32, tuning=tuning):  # the general kernel serves them better
        return None
    defines = segmented_defines(variant, avg_len=avg_len, tuning=tuning)
    if defines is None:
        return None
    cap = segment_cap(tiling.row_lanes, call.num_bags, device.sms, tuning)
    if cap < 2:
        return None
    # one table: its segment size is known here (2 or more: avg_len <= segment_max_avg);
    # several, or table columns (avg_len is all tables' average): each team works out each
    # table's, at most cap
    rows = segment_rows(call.weight_dtype, tuning)
    known = call.tables == 1 and not call.out_width
    bags = min(cap, segment_bags(avg_len, tiling.row_lanes, rows, tuning)) if known else 0
    units = (_ceil_div(call.num_bags, bags) if bags else call.num_bags) * tiling.col_tiles
    grid = grid_stride_blocks(units * tiling.row_lanes, device.sms, tuning.segment_grid_per_sm)
    return _plan(FORWARD, "embedding_bag_forward_segmented", defines, grid,
                 f"CSR bags of {avg_len} rows on average: segments of up to {cap} bags",
                 col_tiles=tiling.col_tiles, segment_bags=bags, segment_cap=cap)


def _general_bags(call: BagCall, device: DeviceProps, tuning: Tuning) -> Plan:
    """Every other call: the general kernel, one team per bag, or teams striding over the bags
    in ``forward_resident_waves`` waves of resident blocks (PERSISTENT)."""
    many_bags = call.num_bags >= device.sms * tuning.min_blocks * (BLOCK // 32)
    pos32 = fits_pos32(num_indices=call.num_indices, num_rows=call.num_rows, num_bags=call.num_bags, dim=call.dim,
                       tuning=tuning)
    variant = Variant.of(call, tuning)
    tiling = variant.tiling
    why: list[str] = []
    defines = forward_defines(variant, avg_len=call.avg_len, many_bags=many_bags, pos32=pos32,
                              units_per_sm=call.num_bags * tiling.col_tiles / device.sms, tuning=tuning, why=why)
    team = int(defines["TEAM"])  # type: ignore[call-overload]
    blocks = _ceil_div(call.num_bags * tiling.col_tiles * team, BLOCK)
    persistent = bool(defines["PERSISTENT"])
    return _plan(FORWARD, "embedding_bag_forward", defines, blocks,
                 f"general kernel: {'teams striding over' if persistent else 'one team per'} bag(s)",
                 f"{'many' if many_bags else 'few'} bags, {'32' if pos32 else '64'}-bit positions", *why,
                 resident_waves=tuning.forward_resident_waves if persistent else None, col_tiles=tiling.col_tiles)


def forward_defines(variant: Variant, *, avg_len: int, many_bags: bool = True, pos32: bool = True,
                    units_per_sm: float = float("inf"), tuning: Tuning, why: list[str] | None = None) -> Defines:
    """Compile-time variant of the general forward kernel for bags of ``avg_len`` rows.
    A team reads as many rows at once as fit in a warp, but no more than a bag holds.
    ``many_bags``: the call has more bags than ``min_blocks`` blocks per SM hold teams.
    ``pos32``: the call's positions, rows and threads fit 31 bits (fits_pos32).
    ``units_per_sm``: the call's units of work (bags times column tiles) per SM.
    ``why``, when given, receives one line per rule that shaped the variant."""
    reasons = why if why is not None else []
    tiling = variant.tiling
    # Narrow rows (16 lanes or fewer), short sum/mean bags: a team one row wide pools its bag alone,
    # FBGEMM's layout, with 8 rows in flight at 3 blocks per SM: several row groups per bag, then
    # their reduction, took over twice FBGEMM's instructions (docs/perf/change-47.md). Only where
    # such teams give the GPU narrow_min_warps_per_sm warps per SM (change 57: 7.75 warps per SM were
    # slower narrow than warp-wide, 15.5 faster; docs/perf/comment-figures.md). The knob's 12 lies
    # between the two and was not measured itself.
    narrow = (tuning.narrow_one_row_max_avg > 0 and tiling.row_lanes <= 16 and avg_len <= tuning.narrow_one_row_max_avg
              and variant.mode != "max" and not variant.need_argmax
              and units_per_sm * tiling.row_lanes / 32 >= tuning.narrow_min_warps_per_sm)
    rows_at_once = 1 if narrow else min(32 // tiling.row_lanes, _floor_pow2(avg_len), tuning.rows_at_once_cap)
    group_rows = _ceil_div(max(1, avg_len), rows_at_once)
    in_flight = min(group_rows, tuning.lean_long_bag_rows or group_rows) if narrow else group_rows
    unroll, min_blocks = _rows_in_flight(tiling, variant.has_psw, variant.need_argmax, in_flight, tuning)
    reasons.append(f"{rows_at_once} row(s) at once per team, {group_rows} rows per lane group: {unroll} in flight "
                   f"per lane, at least {min_blocks} blocks per SM" + (" (narrow_one_row)" if narrow else ""))
    lean = variant.mode != "max" and tiling.chunks == 1 and pos32 and not variant.need_argmax
    # Teams stride over bags of at most persistent_max_group_rows rows per lane group: they load
    # the next bag's bounds and indices while this bag's rows are in flight. Longer bags overlap
    # their own index batches; the 3-4 blocks-per-SM variants spill with the stride's registers.
    persistent = (tuning.forward_resident_waves > 0 and min_blocks <= tuning.min_blocks
                  and group_rows <= tuning.persistent_max_group_rows)
    plain_f32 = variant.weight_dtype == 0 and not (variant.has_psw or variant.need_argmax)
    # float32 rows of one vector per lane, all rows in flight, in a call that fills the GPU
    full_f32_vectors = (variant.weight_dtype == 0 and many_bags and tiling.vec == 4 and tiling.chunks == 1
                        and unroll == tuning.unroll_rows)
    # with 32-bit positions (6-11 registers fewer) the next two fit 64 registers: 4 blocks per SM
    blocks = 4 if pos32 else 3
    if persistent:
        reasons.append(f"bags of at most {tuning.persistent_max_group_rows} rows per lane group: teams stride")
    if tuning.stride_f32_half_unroll and persistent and plain_f32 and full_f32_vectors and rows_at_once == 1:
        # d128 striding: the same bytes in flight per SM, more warps to cover each bag's last row
        unroll, min_blocks = tuning.unroll_rows // 2, blocks
        reasons.append(f"stride_f32_half_unroll: {unroll} rows in flight at {blocks} blocks per SM")
    short_blocks = short_lean_blocks(variant, pos32=pos32, tuning=tuning)
    if short_blocks and rows_at_once == 1 and group_rows <= tuning.persistent_max_group_rows:
        unroll, min_blocks, persistent = min(unroll, 4), short_blocks, False
        if variant.weight_dtype == 0 and tiling.row_lanes == 32 and avg_len <= tuning.segment_max_avg:
            few_unroll, min_blocks = SHORT_F32_FEW_ROWS["weighted" if variant.has_psw else "plain"]
            unroll = min(unroll, few_unroll)
        reasons.append(f"short_lean: one team per bag, {unroll} rows in flight at {min_blocks} blocks per SM")
    f32_rows = variant.weight_dtype == 0 and not variant.need_argmax
    if tuning.wide_f32_fewer_rows and f32_rows and tiling.chunks == 3 and unroll == 4:
        # three vectors per lane, one team per bag (striding spills there): 2 rows in flight at 4
        # blocks, 3 with per-sample weights. 192 columns, sum and mean, 32-bit positions (measured,
        # docs/perf/change-51.md; ONE_TILE's registers): one row at 5 blocks (48 registers), per-
        # sample weights 2 rows at 4 (64); 64-bit positions spill there.
        measured = pos32 and tiling.row_lanes * tiling.chunks * tiling.vec == 192 and variant.mode != "max"
        if measured:
            unroll, min_blocks = (2, 4) if variant.has_psw else (1, 5)
        else:
            unroll, min_blocks = 2, 3 if variant.has_psw else blocks
        persistent = False
        reasons.append(f"wide_f32_fewer_rows: {unroll} row(s) in flight at {min_blocks} blocks per SM, one team "
                       "per bag")
    # Rows of several vectors per lane in a warp-wide team, sum and mean, 32-bit positions: the
    # fewest rows in flight at the most blocks that compile without a spill (change 57, 4 tables of
    # 136-1000 columns, B8192 L30, against FBGEMM). float32 rows of 2-3 vectors: one row at 6 or 5
    # blocks (38 / 48 registers); 4 vectors: two at 3 (78; one at 5 spills 48 bytes); per-sample
    # weights two at 4 up to 3 vectors (64, change 51's d192 pick), two at 3 at 4. d200-d256 had
    # run 8 rows at 2 blocks (100 registers). 16-bit rows of 2 vectors (d392 float16): one row at 5
    # blocks; their 4-vector rows spill at 3 blocks and keep 4 rows at 2, 3-vector rows were not
    # measured (the figures: docs/perf/comment-figures.md).
    # Only for calls whose warp-wide teams fill the rule's resident blocks (a wave of them, at
    # least): one row in flight per warp carries too few bytes to cover DRAM latency otherwise.
    wide = _wide_rows_in_flight(variant) if tuning.wide_one_row and pos32 and not narrow else None
    if wide is not None and tiling.row_lanes * rows_at_once == 32 and units_per_sm >= wide[1] * (BLOCK // 32):
        (unroll, min_blocks), persistent = wide, False
        reasons.append(f"wide_one_row: {unroll} row(s) in flight at {min_blocks} blocks per SM, one team per bag")
    if (tuning.wide_16bit_fewer_rows and pos32 and variant.weight_dtype != 0 and variant.mode != "max"
            and rows_at_once == 1 and tiling.vec == 8 and tiling.row_lanes * tiling.chunks * tiling.vec == 192
            and unroll == 4):
        # 192 16-bit columns in three 16-byte vectors per lane: 2 rows in flight at 3 blocks per
        # SM instead of 4 at 2 (docs/perf/change-50.md; 64-bit positions spill at 3)
        unroll, min_blocks, persistent = 2, 3, False
        reasons.append("wide_16bit_fewer_rows: 2 rows in flight at 3 blocks per SM, one team per bag")
    if tuning.small_f32_more_blocks and pos32 and full_f32_vectors and not variant.need_argmax:
        if rows_at_once == 2:  # 64 columns: half the rows in flight, more blocks (mean, max spill at 4)
            unroll, min_blocks = tuning.unroll_rows // 2, 4 if variant.mode == "sum" and not variant.has_psw else 3
            reasons.append(f"small_f32_more_blocks: {unroll} rows in flight at {min_blocks} blocks per SM")
            if tuning.small_f32_lean and lean and persistent:  # lean rows, which striding teams spill
                unroll, min_blocks, persistent = unroll // 2, 4 if variant.mode == "sum" and not variant.has_psw \
                    else 3, False
                reasons.append(f"small_f32_lean: one team per bag, {unroll} rows in flight (lean rows)")
        elif rows_at_once == 4 and variant.has_psw and persistent:  # 32 columns, per-sample weights
            min_blocks = 3
            reasons.append("small_f32_more_blocks: 3 blocks per SM")
    # Lean rows (sum, mean; one vector per lane; 32-bit positions; one team per bag) issue a row
    # in a few instructions, so cache-served (skewed) rows make them issue-bound: fewer rows in
    # flight and more blocks per SM served skewed 12-table L150 calls faster at a smaller cost on
    # uniform ones (docs/perf/change-46.md). Only for bags too long to stride, of rows one or two
    # per warp (the measured ones).
    if (lean and tuning.lean_long_bag_rows and unroll > tuning.lean_long_bag_rows and rows_at_once <= 2
            and group_rows > tuning.persistent_max_group_rows):
        unroll, min_blocks = _rows_in_flight(tiling, variant.has_psw, variant.need_argmax,
                                             tuning.lean_long_bag_rows, tuning)
        reasons.append(f"lean_long_bag_rows: {unroll} rows in flight at {min_blocks} blocks per SM")
    # 16-bit rows of one 16-byte vector per lane in 16 or 32 lanes, with per-sample weights, in bags
    # too long to stride: 4 rows in flight at 4 blocks per SM (63 registers) instead of 8 at 2 (126;
    # 8 at 3 fits 80 since ONE_TILE, and measured between): faster on skewed 12x500Kx128 float16
    # calls, uniform unchanged (docs/perf/change-52.md), and on 200- and 256-column float16 tables
    # (change 57; docs/perf/comment-figures.md)
    if (tuning.psw16_more_blocks and lean and variant.has_psw and variant.weight_dtype != 0 and not persistent
            and tiling.vec == 8 and tiling.row_lanes >= 16 and (unroll, min_blocks) == (8, 2)):
        unroll, min_blocks = 4, 4
        reasons.append("psw16_more_blocks: 4 rows in flight at 4 blocks per SM")
    team = tiling.row_lanes * rows_at_once
    # Lean rows in a team narrower than a warp, bags whose length leaves a partial step (the rows
    # one step of every lane loads): the bag's last rows take half a step when they fit one
    # (LEAN_TAIL). Measured only where it helped: 8x1Mx32 float32 bags of 20 in 8-row steps;
    # where no partial step is left (8x1Mx64 bags of 20 in 4-row steps) its test per step cost
    # time (docs/perf/change-52.md).
    step = min(unroll, tiling.row_lanes) * rows_at_once
    tail = tuning.lean_tail and lean and not persistent and team < 32 and avg_len % step != 0
    if tail:
        reasons.append(f"lean_tail: bags of {avg_len} rows in steps of {step}: half a step for the last rows")
    return _bag_defines(variant, min_blocks, tuning, TEAM=team, UNROLL=unroll, PERSISTENT=int(persistent),
                        POS32=int(pos32), ONE_TILE=int(tiling.col_tiles == 1), **({"LEAN_TAIL": 1} if tail else {}))


# Short bags of 64- and 128-column rows in lean rows, 4 rows in flight: the most blocks per SM
# that compile without spilling (nvcc -Xptxas -v, sm_90: float32 d128 40 registers for sum, 48
# for mean, per-sample weights spill at 5; the others 46-48 at 5). 16-bit rows with per-sample
# weights at 4 (63 registers; 5 spill): with ONE_TILE they beat the segmented kernel, which
# change 48 had kept for them (DCNv2 float16, docs/perf/change-52.md); 64-column rows with
# per-sample weights were not measured.
SHORT_LEAN_BLOCKS: dict[tuple[bool, int, str], int] = {
    (False, 128, "sum"): 6, (False, 128, "mean"): 5, (False, 128, "weighted"): 4,
    (True, 128, "sum"): 5, (True, 128, "mean"): 5, (True, 128, "weighted"): 4,
    (False, 64, "sum"): 5, (False, 64, "mean"): 5, (True, 64, "sum"): 5, (True, 64, "mean"): 5}
# float32 d128 bags of at most segment_max_avg rows on average (DCNv2's tables): (rows in flight,
# blocks per SM). One row at 8 blocks: 28-32 registers with one column tile known at compile time
# (ONE_TILE), per-sample weights included (docs/perf/change-51.md).
SHORT_F32_FEW_ROWS: dict[str, tuple[int, int]] = {"plain": (1, 8), "weighted": (1, 8)}


def short_lean_blocks(variant: Variant, *, pos32: bool, tuning: Tuning) -> int:
    """Blocks per SM for short bags of 64- or 128-column rows (a team one row wide, one 16-byte
    vector per lane), sum or mean, 32-bit positions, in lean rows one team per bag; 0 where the
    rule does not apply. Bags short enough for striding teams (and, for 128 columns, for the
    segmented kernel) take it instead: with skewed indices the rows come from the caches and the
    walk is latency-bound, so warps per SM decide its time (measured against FBGEMM in
    docs/perf/change-48.md and change-49.md)."""
    tiling = variant.tiling
    columns = tiling.row_lanes * tiling.vec
    if not (tuning.short_lean and pos32 and tiling.chunks == 1 and variant.mode != "max"
            and not variant.need_argmax):
        return 0
    kind = "weighted" if variant.has_psw else variant.mode
    return SHORT_LEAN_BLOCKS.get((variant.weight_dtype != 0, columns, kind), 0)


def leaves_segments(variant: Variant, *, pos32: bool, tuning: Tuning) -> bool:
    """The segmented kernel leaves a call to the short_lean rule: 128-column rows only (the
    measured ones)."""
    tiling = variant.tiling
    return tiling.row_lanes * tiling.vec == 128 and short_lean_blocks(variant, pos32=pos32, tuning=tuning) > 0


def fits_pos32(*, num_indices: int, num_rows: int, num_bags: int, dim: int, tuning: Tuning) -> bool:
    """The general kernel keeps positions, bags and rows in 32-bit registers (POS32) when the
    call's indices, table rows and threads (one 32-lane team per bag and column) stay below
    ``pos32_limit``; the margin below 2^31 leaves room for a team's last step past its bag's
    end and a stride past the last bag."""
    return max(num_indices, num_rows, num_bags * max(1, dim) * 32) < tuning.pos32_limit


def _wide_rows_in_flight(variant: Variant) -> tuple[int, int] | None:
    """(UNROLL, MIN_BLOCKS) of the wide_one_row rule (forward_defines says why): sum and mean rows
    of several 16-byte vectors per lane (the measured ones; rows of narrower vectors, from
    misaligned tables, keep theirs), float32 at 2-4, 16-bit at 2 without per-sample weights;
    else None."""
    chunks = variant.tiling.chunks
    sixteen_bytes = variant.tiling.vec == (4 if variant.weight_dtype == 0 else 8)
    if variant.mode == "max" or variant.need_argmax or not sixteen_bytes:
        return None
    if variant.weight_dtype == 0 and 2 <= chunks <= 4:
        if variant.has_psw:
            return (2, 4) if chunks <= 3 else (2, 3)
        return {2: (1, 6), 3: (1, 5), 4: (2, 3)}[chunks]
    if variant.weight_dtype != 0 and chunks == 2 and not variant.has_psw:
        return 1, 5
    return None


def _bag_defines(variant: Variant, min_blocks: int, tuning: Tuning, **kernel_specific: int) -> Defines:
    """The defines every forward entry takes, then the entry's own, then the tuning overrides."""
    tiling = variant.tiling
    defines: Defines = {
        "WEIGHT_DTYPE": variant.weight_dtype, "INDEX_T": variant.index_type, "MODE": MODES[variant.mode],
        "HAS_PSW": int(variant.has_psw), "WRITE_ARGMAX": int(variant.need_argmax), "VEC": tiling.vec,
        "ROW_LANES": tiling.row_lanes, "CHUNKS": tiling.chunks, "BLOCK": BLOCK, "MIN_BLOCKS": min_blocks,
        **kernel_specific,
    }
    defines.update(tuning.overrides)
    return defines


def _rows_in_flight(tiling: RowTiling, has_psw: bool, need_argmax: bool, rows_per_lane: int,
                    tuning: Tuning) -> tuple[int, int]:
    """(UNROLL, MIN_BLOCKS): rows each lane loads before adding any, and the occupancy floor.
    No more rows in flight than a bag gives a lane; the registers that frees buy more warps
    per SM (nvcc -Xptxas -v, sm_90: 102 registers at 16 vectors in flight, 70-80 at 8, 54-60
    at 4; tests/kernels compiles every pick and fails on a spill)."""
    most = _floor_pow2((tuning.unroll_rows // 2 if need_argmax else tuning.unroll_rows) // tiling.chunks)
    unroll = min(most, _ceil_pow2(rows_per_lane))
    vectors = unroll * tiling.chunks
    if need_argmax or tiling.chunks > 2 or vectors > 8:
        return unroll, tuning.min_blocks
    if vectors <= 4:
        return unroll, 4
    # 8 vectors: 70-80 registers fit 3 blocks, except 16-bit weights with per-sample weights
    # (8 converted floats per vector), which spill there
    return unroll, 2 if has_psw and tiling.vec > 4 else 3


def short_bag_defines(variant: Variant, *, bag_len: int, tuning: Tuning) -> Defines | None:
    """The short-bag kernel for [B, ``bag_len``] indices: ``short_step_vectors`` // (L * CHUNKS)
    bags per team step, at least two (half the vectors when argmax is written); None when two
    bags do not fit a step."""
    budget = tuning.short_step_vectors // 2 if variant.need_argmax else tuning.short_step_vectors
    vectors_per_bag = bag_len * variant.tiling.chunks
    if bag_len < 1 or budget < 1 or vectors_per_bag > budget:
        return None
    bags = max(2, budget // vectors_per_bag)
    _, min_blocks = _rows_in_flight(variant.tiling, variant.has_psw, variant.need_argmax, bags * bag_len, tuning)
    return _bag_defines(variant, min_blocks, tuning, TEAM=variant.tiling.row_lanes, BAGS_PER_STEP=bags,
                        BAG_LEN=bag_len)


def segment_capacity(row_lanes: int, tuning: Tuning) -> int:
    """The most bags a segment may hold: one offset per lane, ``segment_max_bags`` at most."""
    return min(tuning.segment_max_bags, row_lanes - 1)


def segment_rows(weight_dtype: int, tuning: Tuning) -> int:
    """Rows' worth of bags per segment: more for float32 rows."""
    return tuning.segment_rows_f32 if weight_dtype == 0 else tuning.segment_rows


def segment_bags(avg_len: int, row_lanes: int, rows: int, tuning: Tuning) -> int:
    """Bags per segment for a table of ``avg_len`` rows per bag and segments of ``rows`` rows'
    worth of bags (the kernel's table_segment_bags)."""
    if avg_len > tuning.segment_max_avg:
        return 1
    return min(segment_capacity(row_lanes, tuning), max(2, rows // max(1, avg_len)))


def segment_cap(row_lanes: int, num_bags: int, sms: int, tuning: Tuning) -> int:
    """The most bags per segment for a call of ``num_bags`` bags: room in a team, and at least
    ``segment_min_warps_per_sm`` warps' worth of teams per SM (a small batch in long segments
    is a chain of DRAM round trips)."""
    warps = max(1, 32 * sms * tuning.segment_min_warps_per_sm)
    return min(segment_capacity(row_lanes, tuning), num_bags * row_lanes // warps)


def segmented_defines(variant: Variant, *, avg_len: int, tuning: Tuning) -> Defines | None:
    """The segmented kernel for CSR bags of ``avg_len`` rows on average, or None when the
    general kernel serves better: long bags, a team too narrow to hold two bags' offsets."""
    tiling = variant.tiling
    vectors = tuning.segment_vectors // 2 if variant.need_argmax else tuning.segment_vectors
    if avg_len > tuning.segment_max_avg or tiling.row_lanes < 4 or vectors < tiling.chunks:
        return None
    unroll = min(tiling.row_lanes, _floor_pow2(vectors // tiling.chunks))
    # the walk's bag cursor and table bookkeeping cost registers: 4 blocks per SM (64) spill,
    # 3 (80) fit every mode; mean and per-sample weights over float32 rows keep 2 (3 was slower)
    min_blocks = min(3, _rows_in_flight(tiling, variant.has_psw, variant.need_argmax, unroll, tuning)[1])
    if (variant.has_psw or variant.mode == "mean") and tiling.vec <= 4:
        min_blocks = 2
    elif variant.has_psw and variant.weight_dtype != 0 and tiling.row_lanes * tiling.vec == 128:
        min_blocks = 4  # 16-bit d128 with per-sample weights: 4 spill 80 bytes and were faster (DCNv2, change 51)
    elif variant.weight_dtype != 0 and tiling.vec == 8 and tiling.chunks >= 2:
        # two 16-byte vectors of 16-bit values a lane, 2 rows in flight: 16-48 bytes spill at 3 in
        # every mode (nvcc -Xptxas -v, the sweep over change 57's widths, e.g. d392 float16); not timed
        min_blocks = 2
    return _bag_defines(variant, min_blocks, tuning, TEAM=tiling.row_lanes, UNROLL=unroll,
                        SEGMENT_BAGS=segment_capacity(tiling.row_lanes, tuning),
                        SEGMENT_ROWS=segment_rows(variant.weight_dtype, tuning),
                        SEGMENT_MAX_AVG=tuning.segment_walk_max_avg)


# ---------------------------------------------------------------------------------------------
# the gather (unpooled lookups) and the bulk-copy engine


@dataclass(frozen=True)
class BulkPlan:
    """A launch of a bulk-copy kernel."""

    rows: int  # rows per warp step (BULK_ROWS)
    grid: int  # blocks of BULK_BLOCK threads


def bulk_gather_plan(*, row_bytes: int, num_indices: int, aligned: bool, device: DeviceProps, tuning: Tuning,
                     min_row_bytes: int = 0) -> BulkPlan | None:
    """Two ``bulk_stage_bytes`` stages per warp for rows of ``row_bytes``; None where the
    bulk-copy engine does not apply (older GPUs, rows outside BULK_ROW_BYTES, below
    ``min_row_bytes`` or not a multiple of 16, pointers not 16-byte aligned). Grid: one
    resident wave while a warp has at most ``bulk_max_steps_per_warp`` steps, else one step
    per warp."""
    low, high = max(BULK_ROW_BYTES[0], min_row_bytes), BULK_ROW_BYTES[1]
    if device.arch < tuning.bulk_min_arch or not aligned or row_bytes % 16 or not low <= row_bytes <= high:
        return None
    rows = min(32, tuning.bulk_stage_bytes // row_bytes)
    warps = BULK_BLOCK // 32
    smem = warps * (2 * rows * row_bytes + 16)  # two stages and two barriers per warp
    per_sm = min(device.max_threads_per_sm // BULK_BLOCK, device.max_blocks_per_sm,
                 device.smem_per_sm // (smem + device.smem_reserved_per_block))
    steps = _ceil_div(num_indices, rows)
    blocks = _ceil_div(steps, warps)
    wave = per_sm * device.sms
    grid = min(blocks, wave) if steps <= tuning.bulk_max_steps_per_warp * wave * warps else blocks
    return BulkPlan(rows, max(1, min(grid, tuning.max_grid)))


def _bulk_defines(index_type: str, rows: int, row_bytes: int) -> Defines:
    return {"INDEX_T": index_type, "BULK_ROWS": rows, "ROW_BYTES": row_bytes, "BLOCK": BULK_BLOCK}


@dataclass(frozen=True, kw_only=True)
class GatherCall:
    """An unpooled lookup: ``num_indices`` rows of ``dim`` elements copied to a new output."""

    elem_bytes: int
    dim: int
    weight_align: int
    out_aligned: bool
    index_type: str
    num_indices: int


def plan_gather(call: GatherCall, device: DeviceProps, tuning: Tuning, *, bulk_only: bool = False) -> Plan | None:
    """The bulk-copy gather from rows of ``bulk_gather_min_row_bytes`` (bulk copies read from the
    L2 and never hit in the L1, where the register gather finds a skewed table's hot rows),
    else the register gather (None there with ``bulk_only``)."""
    row_bytes = call.dim * call.elem_bytes
    bulk = bulk_gather_plan(row_bytes=row_bytes, num_indices=call.num_indices,
                            aligned=call.weight_align == 0 and call.out_aligned, device=device, tuning=tuning,
                            min_row_bytes=tuning.bulk_gather_min_row_bytes)
    if bulk is not None:
        return _plan(GATHER, "embedding_gather_bulk", _bulk_defines(call.index_type, bulk.rows, row_bytes),
                     bulk.grid, f"rows of {row_bytes} bytes: the bulk-copy engine", block=BULK_BLOCK)
    if bulk_only:
        return None
    word = vector_width(row_bytes, 1, call.weight_align)  # bytes per copied word: 2..16
    tiling = RowTiling.for_row(row_bytes // word, 1, balanced=tuning.balanced_col_tiles)
    unroll = min(4, tiling.row_lanes)
    defines: Defines = {"INDEX_T": call.index_type, "CHUNK_BYTES": word, "ROW_LANES": tiling.row_lanes,
                        "CHUNKS": tiling.chunks, "UNROLL": unroll, "BLOCK": BLOCK}
    items = _ceil_div(call.num_indices, unroll) * tiling.col_tiles
    # one step per team: the block scheduler refills each SM as blocks end (striding left SMs
    # idle in the last wave); the kernel still strides past a capped grid
    grid = max(1, min(_ceil_div(items * tiling.row_lanes, BLOCK), tuning.max_grid))
    return _plan(GATHER, "embedding_gather", defines, grid, f"register gather, {word}-byte words",
                 row_words=row_bytes // word)


# ---------------------------------------------------------------------------------------------
# the backward


@dataclass(frozen=True, kw_only=True)
class BackwardCall:
    """The deterministic backward's chunk and combine passes over sorted positions."""

    grad_dtype: int
    elem_bytes: int
    dim: int
    grad_align: int
    num_positions: int
    row_type: str  # the sorted rows' index type
    has_psw: bool
    has_scale: bool
    grad_f32: bool  # float32 gradient rows for 16-bit grad_out
    fused: tuple[tuple[str, object], ...] = ()  # the fused optimizer's defines (FUSED_OPT)


def backward_chunk(num_positions: int, row_lanes: int, sms: int, tuning: Tuning) -> int:
    """The longest chunk that still gives every SM ``backward_min_warps_per_sm`` warps of teams
    (teams of ``row_lanes`` lanes, several to a warp for narrow rows); else the shortest. Short
    chunks mean more teams, each with fewer dependent rounds; long chunks mean fewer partial sums
    to combine per hot row."""
    for chunk in tuning.backward_chunks:
        if num_positions // chunk * row_lanes >= tuning.backward_min_warps_per_sm * 32 * sms:
            return chunk
    return tuning.backward_chunks[-1]


def overlaps_zero_fill(num_positions: int, num_weights: int, tuning: Tuning) -> bool:
    """Zero the untouched gradient rows on a side stream, beside the sort and the passes, only
    when lookups are few per table row: then the sort and the passes are small and latency-bound
    and hide under the fill; with many, both sides are memory-bound and a memset followed by the
    passes is faster."""
    return tuning.overlap_zero_fill and num_positions <= tuning.overlap_max_lookups_per_row * num_weights


# The combine pass (embedding_bag_backward.cu): blocks of 512 threads, so that a hot row's
# thousands of pieces are summed by 16 teams of 32 lanes at once; each block holds up to 32
# (chunk, column tile) items (one team each for the short runs); runs longer than 17 chunks go to
# the whole block (docs/perf/change-54.md). Rows of more than 16 floats a lane take blocks of 256:
# a fused update beside a whole row in flight needs more than 128 registers a thread.
COMBINE_BLOCK = 512
COMBINE_MAX_ITEMS = 32
COMBINE_PROBE = 16


def combine_block(tiling: RowTiling) -> int:
    """Threads per combine block: 512, or 256 for rows of more than 16 floats a lane."""
    return COMBINE_BLOCK if tiling.chunks * tiling.vec <= 16 else BLOCK


def combine_items(tiling: RowTiling) -> int:
    """(chunk, column tile) items per combine block: a team each, at most COMBINE_MAX_ITEMS."""
    return min(combine_block(tiling) // tiling.row_lanes, COMBINE_MAX_ITEMS)


def fused_chunk_defines(tiling: RowTiling, tuning: Tuning) -> Defines:
    """Where the fused chunk pass reads the rows it updates (embedding_bag_backward.cu, PRELOAD):
    preloaded as segments open, with fewer positions' gradients in flight (the registers the
    preloaded rows take) and, for rows of up to 4 floats a lane, three blocks per SM (row-wise
    Adagrad then spills a few words, and still runs faster: change 55). Rows of more than
    ``backward_preload_max_floats`` floats a lane are read at the flush: preloading them spills."""
    preload = tuning.backward_preload and tiling.chunks * tiling.vec <= tuning.backward_preload_max_floats
    defines: Defines = {"PRELOAD": int(preload)}
    if preload:
        defines["UNROLL"] = _floor_pow2(max(1, tuning.backward_preload_rows // tiling.chunks))
        if tiling.chunks * tiling.vec <= 4:  # wider rows: the 80 registers of three blocks spill more
            defines["MIN_BLOCKS"] = tuning.backward_preload_min_blocks
    return defines


ASYNC_STATIC_SMEM = 48 * 1024  # a kernel's static shared memory limit


def async_chunk_defines(tiling: RowTiling, elem_bytes: int, unroll: int, has_psw: bool, adam: bool,
                        device: DeviceProps, tuning: Tuning) -> Defines:
    """The chunk pass with its gradient rows copied into shared memory ahead of the walk
    (embedding_bag_backward.cu, ASYNC_AHEAD), in blocks of ``backward_async_block`` threads, for
    rows of 16-byte vectors where the registers would keep at most ``backward_async_max_unroll``
    positions in flight (``unroll``: the register walk's UNROLL; wide rows: one). The blocks per
    SM come first: as many as the registers the variant needs allow (nvcc -Xptxas -v: about
    ``backward_async_regs_base``, ``backward_async_regs_per_float`` a float of the lane's row, 8
    more with per-sample weights, 8 more for Adam's two state rows), then the positions ahead
    that their shared memory holds (and a kernel's static 48 KB), up to the knob's. Empty where
    it does not apply."""
    if (tuning.backward_async_ahead <= 0 or tiling.vec * elem_bytes != 16
            or unroll > tuning.backward_async_max_unroll or device.arch < 80):
        return {}
    block = tuning.backward_async_block
    floats = tiling.chunks * tiling.vec
    regs = min(255, tuning.backward_async_regs_base + tuning.backward_async_regs_per_float * floats
               + 8 * (int(has_psw) + int(adam)))
    min_blocks = max(1, min(device.regs_per_sm // (block * regs), device.max_threads_per_sm // block))
    slot_bytes = tiling.chunks * 16 * block
    block_smem = min(ASYNC_STATIC_SMEM, device.smem_per_sm // min_blocks - device.smem_reserved_per_block)
    ahead = min(tuning.backward_async_ahead, tiling.row_lanes, block_smem // slot_bytes - 1)
    if ahead < 1:
        return {}
    return {"ASYNC_AHEAD": ahead, "BLOCK": block, "MIN_BLOCKS": min_blocks}


def plan_backward(call: BackwardCall, device: DeviceProps, tuning: Tuning) -> tuple[Plan, Plan]:
    """The chunk pass (a team per chunk and column tile) and the combine pass (a block per
    ``combine_items`` of them: the grid is known from the number of positions alone)."""
    tiling = RowTiling.for_row(call.dim, vector_width(call.dim, call.elem_bytes, call.grad_align),
                               balanced=tuning.balanced_col_tiles)
    chunk = backward_chunk(call.num_positions, tiling.row_lanes, device.sms, tuning)
    defines = _backward_defines(call, tiling, chunk, tuning)
    chunk_defines = {**defines, "BACKWARD_PASS": 1, "EXTEND_RUNS": int(tuning.backward_extend_runs)}
    if call.fused:
        chunk_defines.update(fused_chunk_defines(tiling, tuning))
    unroll = chunk_defines["UNROLL"]
    assert isinstance(unroll, int)
    copies = async_chunk_defines(tiling, call.elem_bytes, unroll, call.has_psw,
                                 dict(call.fused).get("OPTIMIZER") == 2, device, tuning)
    chunk_defines.update(copies)
    chunk_block = copies.get("BLOCK", BLOCK)
    assert isinstance(chunk_block, int)
    items = _ceil_div(call.num_positions, chunk) * tiling.col_tiles
    grid = _ceil_div(items * tiling.row_lanes, chunk_block)
    per_block, block = combine_items(tiling), combine_block(tiling)
    combine = {**defines, "BACKWARD_PASS": 2, "BLOCK": block, "COMBINE_ITEMS": per_block,
               "COMBINE_PROBE": COMBINE_PROBE}
    why = f"chunks of {chunk} sorted positions"
    chunk_why = (why,) if not copies else (
        why, f"gradient rows copied into shared memory {copies['ASYNC_AHEAD']} positions ahead "
             f"(registers would hold one), {copies['MIN_BLOCKS']} blocks of {chunk_block} per SM")
    return (_plan(BACKWARD, "embedding_bag_backward", chunk_defines, grid, *chunk_why, col_tiles=tiling.col_tiles,
                  chunk_positions=chunk, block=chunk_block),
            _plan(BACKWARD, "embedding_bag_backward_combine", combine, _ceil_div(items, per_block), why,
                  f"{per_block} items a block of {block}; runs over {COMBINE_PROBE + 1} chunks: the whole block",
                  block=block, col_tiles=tiling.col_tiles, chunk_positions=chunk))


def _backward_defines(call: BackwardCall, tiling: RowTiling, chunk: int, tuning: Tuning) -> Defines:
    """The defines both passes share."""
    defines: Defines = {
        "WEIGHT_DTYPE": call.grad_dtype, "VEC": tiling.vec, "ROW_LANES": tiling.row_lanes, "CHUNKS": tiling.chunks,
        "UNROLL": _floor_pow2(max(1, tuning.backward_rows_in_flight // tiling.chunks)),
        "HAS_PSW": int(call.has_psw), "HAS_SCALE": int(call.has_scale), "CHUNK_POS": chunk, "BLOCK": BLOCK,
        "ROW_T": call.row_type, "MIN_BLOCKS": tuning.backward_min_blocks,
        "STREAMING_ROWS": tuning.backward_streaming_rows}
    if call.grad_f32:
        defines["GRAD_F32"] = 1
    defines.update(call.fused)
    return defines
