"""Launching: describe a call, ask ``plan`` for its plan, compile the plan's variant, pack the
arguments and launch. The lookups' and the backward passes' kernels and grids are chosen in
``plan.py`` (pure); one choice is made here: the backward's sort (``sort_rows``, ``radix_start``)
takes radix_sort.cu or torch.sort by the keys' count and width, the knob ``own_sort`` and the
device, and sizes radix_sort.cu's tiles (``RADIX_*`` below), because it decides between a kernel
of this package and a torch op on live tensors.

Everything here takes and returns torch tensors; validation of user arguments lives in
``api.py``, the custom-op wiring in ``ops.py``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from . import host, nvrtc, tuning
from .host import LOADED as _HOST_PATH
from .nvrtc import F32, I32, I64, PTR
from .plan import (
    BLOCK,
    BackwardCall,
    BagCall,
    DeviceProps,
    GatherCall,
    Plan,
    RowTiling,
    grid_stride_blocks,
    overlaps_zero_fill,
    plan_backward,
    plan_bag_forward,
    plan_checked_bag_forward,
    plan_gather,
    vector_width,
)

if TYPE_CHECKING:
    import torch

__all__ = ["BLOCK", "RowTiling", "bag_backward", "bag_forward", "backward_passes", "device_props", "gather",
           "sm_count", "vector_width"]

# Debug aid used by the tests: fill every output with NaN before the kernel runs, so
# that an element the kernel fails to write cannot pass a comparison.
POISON_OUTPUTS = os.environ.get("REFERENCE_KERNELS_POISON_OUTPUTS", "0") == "1"


@functools.cache
def _device_props(device_index: int) -> DeviceProps:
    return DeviceProps(**nvrtc.device_attributes(device_index))


def device_props(device: torch.device) -> DeviceProps:
    """The properties of ``device`` that selection reads (from the driver, once per device)."""
    return _device_props(device.index if device.index is not None else 0)


def sm_count(device: torch.device) -> int:
    return device_props(device).sms


def _dtype_code(dtype: torch.dtype) -> int:
    import torch

    codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    return codes[dtype]


def _index_type(dtype: torch.dtype) -> str:
    import torch

    return {torch.int64: "i64", torch.int32: "int"}[dtype]


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def _bind_cuda_queries() -> None:
    """Bind ``_current_device`` and ``_raw_stream`` to torch's C entry points (plain ints, no
    ``torch.cuda.Stream`` object per call), or to the public functions where a build lacks them."""
    global _current_device, _raw_stream
    import torch

    get_device = getattr(torch._C, "_cuda_getDevice", None)
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _current_device = get_device if get_device is not None else torch.cuda.current_device
    if raw_stream is not None:
        _raw_stream = raw_stream
    else:
        _raw_stream = lambda index: int(torch.cuda.current_stream(index).cuda_stream)  # noqa: E731


def _first_current_device() -> int:
    _bind_cuda_queries()
    return _current_device()


def _first_raw_stream(index: int) -> int:
    _bind_cuda_queries()
    return _raw_stream(index)


# The current CUDA device, and the raw handle of a device's current stream (bound on first use).
_current_device: Callable[[], int] = _first_current_device
_raw_stream: Callable[[int], int] = _first_raw_stream


def _launch_packed(index: int, fn: Any, grid: int, block: int, signature: nvrtc.Params,
                   values: Sequence[object]) -> None:
    """Launch ``fn`` on device ``index``'s current stream, ``values`` packed as ``signature``;
    under a device guard only when ``index`` is not the current device (the guard costs more
    than the check). On the current device the body of ``nvrtc.launch_packed`` runs here:
    every lookup launches through this function, and a call layer would cost more host time. Once
    the compiled host path is loaded, the driver is called through it (``launch_raw``), without
    cuda-bindings' per-call wrapping of the result (figures: docs/perf/comment-figures.md)."""
    if index == _current_device():
        if grid > 0:
            extra = signature.pack(values)
            if _HOST_PATH:
                err = _HOST_PATH[0].library.launch_raw(int(fn), grid, block, _raw_stream(index), extra)
            else:
                (err,) = nvrtc._cu_launch_kernel()(fn, grid, 1, 1, block, 1, 1, 0, _raw_stream(index), None, extra)
            if err:
                nvrtc.raise_launch_error(err, grid, block, signature)
        return
    import torch

    with torch.cuda.device(index):
        nvrtc.launch_packed(fn, grid, block, _raw_stream(index), signature, values)


def _launch_on(t: torch.Tensor, fn: object, grid: int, args: list[tuple[object, str]], block: int = BLOCK) -> None:
    """Launch on the current stream of ``t``'s device; ``args`` are (value, kind) pairs."""
    _launch_packed(t.device.index, fn, grid, block, nvrtc.params("".join(kind for _, kind in args)),
                   [value for value, _ in args])


def new_output(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    if POISON_OUTPUTS:
        return like.new_full(shape, float("nan"))
    return like.new_empty(shape)  # like's dtype and device; cheaper than torch.empty's keywords


# A call's key holds the raw values its description is built from, and nothing else: the
# description (BagCall, GatherCall) is made from the key alone, on a miss, so no input of the
# selection can be left out of the key. The key is a plain tuple in the field order of BagKey /
# GatherKey (their lengths differ, so the two never collide in one cache); a hit costs that tuple
# and two dictionary lookups (a NamedTuple per call costs a Python-level __new__, a frozen
# dataclass several microseconds more). The named key is made on a miss only.
# Prepared: plan, compiled function, grid, the kernel's parameter layout, and the call's packer: a
# function of the per-call values (pointers and tensors) that returns the kernel's arguments, the
# constants of the key (sizes, the plan's scalars) bound when it was planned: a hit reads nothing
# else and takes no branch on the entry.
Packer = Callable[..., tuple[object, ...]]
Prepared = tuple[Plan, Any, int, nvrtc.Params, Packer]


class BagKey(NamedTuple):
    """What bag_forward's selection depends on, as read from the tensors."""

    dtype: Any  # torch.dtype of the weight
    num_rows: int
    dim: int
    weight_align: int
    out_aligned: bool
    index_dtype: Any  # torch.dtype of the indices
    bag_size: int
    num_indices: int
    num_bags: int
    tables: int
    table_batched: bool
    mode: str
    has_psw: bool
    need_argmax: bool
    has_padding: bool
    checked: bool  # the lookup checks its indices (CHECK) where its kernel can


class GatherKey(NamedTuple):
    """What gather's selection depends on, as read from the tensors."""

    dtype: Any
    dim: int
    weight_align: int
    out_aligned: bool
    index_dtype: Any
    num_indices: int


# (tuning, device index) -> key -> Prepared. The tuning is part of the key, so experiments that
# change a knob never meet a stale plan.
_PLANS: dict[tuple[tuning.Tuning, int], dict[tuple[Any, ...], Prepared | None]] = {}
_MAX_PLANS = 4096
_last: list[Any] = [None, None, None]  # the tuning, device index and plans of the last call


def planned_launches() -> list[tuple[Plan, int]]:
    """(plan, grid) of every call planned since clear_plans (tests check which paths ran)."""
    return [(prepared[0], prepared[2]) for plans in _PLANS.values() for prepared in plans.values()
            if prepared is not None]


def clear_plans() -> None:
    _PLANS.clear()
    _last[:] = [None, None, None]
    _BACKWARD_BY_TUNING.clear()
    _BACKWARD_PLANS[:] = [None, {}]
    _PREPARE.clear()
    _RADIX.clear()
    if _HOST_PATH:
        _HOST_PATH[0].library.clear()


def _plans_now(device_index: int) -> tuple[tuning.Tuning, dict[tuple[Any, ...], Prepared | None]]:
    knobs = tuning.current()
    if _last[0] is not knobs or _last[1] != device_index:  # identity: no hash of the knobs per call
        _last[:] = [knobs, device_index, _PLANS.setdefault((knobs, device_index), {})]
    return knobs, _last[2]


def _prepared(key: tuple[Any, ...], like: torch.Tensor, device_index: int, describe: Any, select: Any,
              kinds: Mapping[str, str], packer: Callable[[Plan, Any], Packer]) -> Prepared | None:
    """The memoised (plan, function, grid, parameters, packer) of the call ``key`` on the device
    of ``like`` (``device_index``: its ``get_device()``): ``describe(key)`` makes the call's
    description, ``select(call, props, knobs)`` its plan (None: the path does not serve the
    call), ``kinds[entry]`` the parameter kinds of each entry the path may pick,
    ``packer(plan, call)`` the call's packer."""
    knobs, plans = _plans_now(device_index)
    found = plans.get(key)
    if found is not None or key in plans:  # a plan, or None remembered
        return found
    device = like.device  # a device object on a miss only
    if device.type == "cuda":
        host.start()  # the compiled host path, as REFERENCE_KERNELS_HOST_PATH says (once per process)
    props = device_props(device)
    call = describe(key)
    plan = select(call, props, knobs)
    if len(plans) >= _MAX_PLANS:  # calls of ever new sizes (CSR batches) must not grow it forever
        plans.clear()
    if plan is None:
        plans[key] = None
        return None
    fn = nvrtc.get_function(plan.source, plan.entry, dict(plan.defines), device.index)
    resident = nvrtc.resident_blocks(fn, plan.block) if plan.resident_waves is not None else 0
    plans[key] = (plan, fn, plan.grid(props.sms, resident), nvrtc.params(kinds[plan.entry]), packer(plan, call))
    return plans[key]


def _describe_bag(key: BagKey) -> BagCall:
    return BagCall(weight_dtype=_dtype_code(key.dtype), elem_bytes=key.dtype.itemsize, dim=key.dim,
                   num_rows=key.num_rows, weight_align=key.weight_align, out_aligned=key.out_aligned,
                   index_type=_index_type(key.index_dtype), bag_size=key.bag_size, num_indices=key.num_indices,
                   num_bags=key.num_bags, tables=key.tables, table_batched=key.table_batched, mode=key.mode,
                   has_psw=key.has_psw, need_argmax=key.need_argmax, has_padding=key.has_padding)


def bag_forward(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None, *, num_bags: int,
                per_sample_weights: torch.Tensor | None, mode: str, padding_idx: int, need_argmax: bool,
                table_rows: torch.Tensor | None = None,
                check: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Pooled lookup. ``indices`` is [B, L] (offsets None) or 1-D with CSR ``offsets``
    (``num_bags`` = B; offsets has B or B + 1 entries). Inputs are contiguous.
    With ``table_rows`` (int64 [T], first row of each table in ``weight``) the bags are
    T tables' bags, table-major, and the result is [num_bags / T, T * dim].
    ``check`` (an index check mode, one table): the lookup checks its indices and offsets
    itself where its plan can (plan_checked_bag_forward), else the check pass runs first.
    Returns (out, argmax); argmax is None unless ``need_argmax`` (max mode, for backward)."""
    num_rows, dim = weight.shape
    tables = 1 if table_rows is None else table_rows.numel()
    shape = (num_bags // tables, tables * dim)
    out = new_output(shape, weight) if POISON_OUTPUTS else weight.new_empty(shape)
    argmax = _new_argmax(shape, weight) if need_argmax else None
    if num_bags == 0 or dim == 0:
        if check is not None:  # nothing to look up, but the offsets (and indices) are still checked
            _check_pass(indices, offsets, num_rows, check)
        return out, argmax
    w, o = weight.data_ptr(), out.data_ptr()
    key = (weight.dtype, num_rows, dim, w % 16, o % 16 == 0, indices.dtype,
           indices.shape[1] if offsets is None else 0, indices.numel(), num_bags, tables, table_rows is not None,
           mode, per_sample_weights is not None, need_argmax, padding_idx >= 0, check is not None)  # BagKey's
    index = weight.get_device()
    # _prepared's hit, inline (every eager lookup passes here): the last call's plans, same knobs
    prepared = _last[2].get(key) if _last[0] is tuning._CURRENT and _last[1] == index else None
    if prepared is None:
        prepared = _prepared(key, weight, index, _bag_call, _FORWARD_SELECT[check is not None], FORWARD_KINDS,
                             _forward_packer)
        if prepared is None:  # this call's kernel does not check: the pass first (its copies), then the lookup
            assert check is not None
            if _HOST_PATH and _HOST_PATH[0].library.pending():  # the compiled path leaves this call to Python
                host.offer(key, index, None)
            indices, offsets = _check_pass(indices, offsets, num_rows, check)
            return bag_forward(weight, indices, offsets, num_bags=num_bags, per_sample_weights=per_sample_weights,
                               mode=mode, padding_idx=padding_idx, need_argmax=need_argmax)
    if _HOST_PATH and _HOST_PATH[0].library.pending():
        host.offer(key, index, prepared)  # the compiled path missed this call: it launches its next ones
    plan, fn, grid, signature, pack = prepared
    ledger = _NO_CHECK if check is None else _index_check().lookup_ledger(index, check, "embedding_bag", num_rows)
    _launch_packed(index, fn, grid, plan.block, signature,
                   pack(w, indices, offsets, per_sample_weights, padding_idx, table_rows, o, argmax, ledger))
    if check == "sync":
        _index_check().raise_sync_finding(index)
    return out, argmax


def bag_forward_columns(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, *, tables: int,
                        all_tables: int, per_sample_weights: torch.Tensor | None, mode: str, layout: torch.Tensor,
                        columns_align: int, out: torch.Tensor) -> None:
    """Table-batched lookup of ``tables`` of the ``all_tables`` tables of CSR ``offsets``
    (T * B + 1 entries) into their columns of ``out`` [B, width] (TABLE_COLS; a width group of
    ``tbe.TableBatchedEmbeddingBag`` with mixed widths). ``layout`` (int64 [3 * tables]): per
    table, its first row in ``weight``, first output column, and number among the offsets' tables.
    ``columns_align``: the address remainder modulo 16 that the output's row width and the
    tables' columns share (in bytes; 0: all multiples of 16); vectors keep it as they keep the
    weight's. Inputs contiguous and checked; no argmax, no padding row. The plan is the one a
    table-batched call of these tables side by side would get, with the average bag length of
    all tables; the compiled host path never serves it (its key has two more fields)."""
    batch, width = out.shape
    num_rows, dim = weight.shape
    if batch == 0 or tables == 0:
        return
    w, o = weight.data_ptr(), out.data_ptr()
    align = columns_align if not (w | o) & 15 else shared_align(w % 16, o % 16, columns_align)
    key = (weight.dtype, num_rows, dim, align, not o & 15, indices.dtype, 0, indices.numel(), tables * batch,
           tables, True, mode, per_sample_weights is not None, False, False, False, all_tables * batch, width)
    index = weight.get_device()
    # _prepared's hit, inline (one launch per width per call, as bag_forward's)
    prepared = _last[2].get(key) if _last[0] is tuning._CURRENT and _last[1] == index else None
    if prepared is None:
        prepared = _prepared(key, weight, index, _columns_call, plan_bag_forward, FORWARD_KINDS, _forward_packer)
        assert prepared is not None
    plan, fn, grid, signature, pack = prepared
    _launch_packed(index, fn, grid, plan.block, signature,
                   pack(w, indices, offsets, per_sample_weights, -1, layout, o, None, _NO_CHECK))


def shared_align(*remainders: int) -> int:
    """One remainder modulo 16 for several (addresses modulo 16, or offsets in bytes): a power of
    two divides it exactly when it divides all of them (the smallest one's lowest set bit)."""
    low = [r & -r for r in (r % 16 for r in remainders) if r]
    return min(low, default=0)


def _columns_call(key: tuple[Any, ...]) -> BagCall:
    from dataclasses import replace  # here: a plan cache miss only

    return replace(_describe_bag(BagKey._make(key[:16])), all_bags=key[16], out_width=key[17])


_NO_CHECK = (0, 0, 0, 0, 0, 0)  # the general kernel's ledger arguments when it does not check
# plan_bag_forward, or (checked calls) plan_checked_bag_forward: None where the kernel cannot check
_FORWARD_SELECT = (plan_bag_forward, plan_checked_bag_forward)
# The index check module (index_check.py), registered by it at its import: it launches its pass
# through this module, so this module does not import it. Checked calls come through the ops and
# api.py, which import it.
_INDEX_CHECK: list[ModuleType] = []


def use_index_check(module: ModuleType) -> None:
    """Register the index check module whose ledger and pass checked lookups use (index_check.py)."""
    _INDEX_CHECK[:] = [module]


def _index_check() -> Any:
    if not _INDEX_CHECK:
        raise RuntimeError("reference_kernels.launch: a checked lookup needs reference_kernels.index_check "
                           "imported (it registers itself with use_index_check)")
    return _INDEX_CHECK[0]


def _check_pass(indices: torch.Tensor, offsets: torch.Tensor | None, num_rows: int,
                check: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The check pass of a one-table embedding_bag call (index_check.run_check): its copies."""
    checked: tuple[torch.Tensor, torch.Tensor | None] = _index_check().run_check(
        indices, offsets, num_rows=num_rows, table_sizes=None, bags_per_table=1, mode=check, op="embedding_bag")
    return checked


def _new_argmax(shape: tuple[int, int], like: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.empty(shape, dtype=torch.int64, device=like.device)


def _bag_call(key: tuple[Any, ...]) -> BagCall:
    return _describe_bag(BagKey._make(key))


# The parameter kinds of each forward entry, in the order of its kernel's parameters (the
# .cu signatures); _forward_values gives the values in the same order.
FORWARD_KINDS: dict[str, str] = {
    "embedding_gather_bulk": PTR + PTR + I64 + PTR,
    "embedding_bag_forward_bulk": PTR + PTR + I64 + PTR + I64 + I64 + I64 + PTR,
    "embedding_bag_forward_short": PTR + I64 + PTR + I64 + I32 + PTR + I64 + PTR + PTR,
    "embedding_bag_forward_segmented": (PTR + I64 + PTR + I64 + PTR + I64 + I64 + I32 + I32 + I32 + PTR + I64 + PTR
                                        + I64 + I64 + PTR + PTR),
    "embedding_bag_forward": PTR + I64 + PTR + I64 + PTR + I64 + I64 + I64 + I32 + PTR + I64 + PTR + I64 + I64
    + PTR + PTR + PTR + PTR + PTR + I64 + I64 + I64,  # ... out, argmax, then the check's ledger (CHECK)
}


def _forward_packer(plan: Plan, call: BagCall) -> Packer:
    """The packer of ``plan.entry``: ``(weight pointer, indices, offsets, per-sample weights,
    padding_idx, table_rows, out pointer, argmax, ledger) -> the kernel's arguments`` in its parameter
    order (kinds: FORWARD_KINDS), the call's sizes and the plan's scalars bound now. Optional
    tensors are tested inline (``_ptr`` as a call would cost a Python frame each)."""
    entry, n, dim, bags, tiles = plan.entry, call.num_indices, call.dim, call.num_bags, plan.col_tiles
    per_table, width, bag_size = bags // call.tables, call.out_width or call.tables * dim, call.bag_size
    if entry == "embedding_gather_bulk":
        return lambda w, idx, off, psw, pad, rows, o, amax, ledger: (w, idx.data_ptr(), n, o)
    if entry == "embedding_bag_forward_bulk":
        return lambda w, idx, off, psw, pad, rows, o, amax, ledger: (
            w, idx.data_ptr(), n, 0 if off is None else off.data_ptr(), 0 if off is None else off.numel(), bags, pad, o)
    if entry == "embedding_bag_forward_short":
        return lambda w, idx, off, psw, pad, rows, o, amax, ledger: (
            w, dim, idx.data_ptr(), bags, tiles, 0 if psw is None else psw.data_ptr(), pad, o,
            0 if amax is None else amax.data_ptr())
    if entry == "embedding_bag_forward_segmented":
        segment_bags, segment_cap = plan.segment_bags, plan.segment_cap
        return lambda w, idx, off, psw, pad, rows, o, amax, ledger: (
            w, dim, idx.data_ptr(), n, 0 if off is None else off.data_ptr(), 0 if off is None else off.numel(), bags,
            tiles, segment_bags, segment_cap, 0 if psw is None else psw.data_ptr(), pad,
            0 if rows is None else rows.data_ptr(), per_table, width, o, 0 if amax is None else amax.data_ptr())
    return lambda w, idx, off, psw, pad, rows, o, amax, ledger: (
        w, dim, idx.data_ptr(), n, 0 if off is None else off.data_ptr(), 0 if off is None else off.numel(), bag_size,
        bags, tiles, 0 if psw is None else psw.data_ptr(), pad, 0 if rows is None else rows.data_ptr(), per_table,
        width, o, 0 if amax is None else amax.data_ptr(), *ledger)


# The parameter kinds of the gather entries (embedding_gather.cu).
GATHER_KINDS: dict[str, str] = {
    "embedding_gather_bulk": PTR + PTR + I64 + PTR,
    "embedding_gather": PTR + I64 + PTR + I64 + PTR,
}


def gather(weight: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Unpooled lookup: out[i] = weight[indices[i]] for flat contiguous ``indices``."""
    dim = weight.shape[1]
    n = indices.numel()
    out = new_output((n, dim), weight)
    if n == 0 or dim == 0:
        return out
    w, o = weight.data_ptr(), out.data_ptr()
    key = (weight.dtype, dim, w % 16, o % 16 == 0, indices.dtype, n)  # GatherKey's
    index = weight.get_device()
    prepared = _prepared(key, weight, index, _gather_call, plan_gather, GATHER_KINDS, _gather_packer)
    assert prepared is not None
    plan, fn, grid, signature, pack = prepared
    _launch_packed(index, fn, grid, plan.block, signature, pack(w, indices, o))
    return out


def _gather_packer(plan: Plan, call: GatherCall) -> Packer:
    """``(weight pointer, indices, out pointer) -> the kernel's arguments`` (GATHER_KINDS)."""
    n, row_words = call.num_indices, plan.row_words
    if plan.entry == "embedding_gather_bulk":
        return lambda w, idx, o: (w, idx.data_ptr(), n, o)
    return lambda w, idx, o: (w, row_words, idx.data_ptr(), n, o)


def _gather_call(key: tuple[Any, ...]) -> GatherCall:
    return _describe_gather(GatherKey._make(key))


def _describe_gather(key: GatherKey) -> GatherCall:
    return GatherCall(elem_bytes=key.dtype.itemsize, dim=key.dim, weight_align=key.weight_align,
                      out_aligned=key.out_aligned, index_type=_index_type(key.index_dtype),
                      num_indices=key.num_indices)


# The backward kernels' parameters (embedding_bag_backward.cu), each list ending in the fused
# optimizer's ten: weight, state1, state2, lr, eps, beta1, beta2, weight_decay, step_size, seed.
FUSED_KINDS = PTR * 3 + F32 * 6 + I64
CHUNK_PARAMS = nvrtc.params(PTR + I64 + PTR + PTR + I64 + PTR + I64 + PTR + PTR + F32 + I64 + I32 + PTR + PTR + PTR
                            + FUSED_KINDS)
COMBINE_PARAMS = nvrtc.params(PTR + I64 + I64 + I32 + PTR + PTR + PTR + FUSED_KINDS)
# The fused optimizer's values when none is fused (FUSED_OPT = 0).
NO_FUSED_VALUES: tuple[object, ...] = (0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)

def bag_backward(grad_out: torch.Tensor, indices: torch.Tensor, bag_of: torch.Tensor | None, *, bag_size: int,
                 num_weights: int, per_sample_weights: torch.Tensor | None, bag_scale: torch.Tensor | None,
                 padding_idx: int, scale: float = 1.0) -> torch.Tensor:
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
    if overlaps_zero_fill(n, num_weights, tuning.current()):
        grad_weight = new_output((num_weights, dim), grad_out)
        # the side stream's first kernel (the bitmap) also writes the int32 sort keys: one
        # launch fewer before the sort, and launches beside the fill are slow
        keys = torch.empty(n, dtype=torch.int32, device=flat.device) if num_weights < 2**31 else None
        side = _side_stream(grad_out.device.index)
        side.wait_stream(main)
        with torch.cuda.stream(side):  # zeros for the rows nobody looked up, meanwhile
            marked = _zero_untouched_rows(grad_weight, flat, padding_idx, keys)
        main.wait_event(marked)
        if keys is None:
            keys = flat.to(torch.int64)
        sorted_rows, positions = sort_rows(keys, num_weights)
    else:  # many lookups per row: a plain memset first, then the passes, one after the other
        grad_weight = torch.zeros((num_weights, dim), dtype=grad_out.dtype, device=grad_out.device)
        sorted_rows, positions = sort_by_row(flat, num_weights)
    backward_passes(grad_out, sorted_rows, positions, bag_of=bag_of, bag_size=bag_size,
                    per_sample_weights=per_sample_weights, bag_scale=bag_scale, padding_idx=padding_idx, scale=scale,
                    grad_weight=grad_weight)
    if side is not main:
        main.wait_stream(side)
        assert keys is not None  # the overlapped branch always has its keys
        for t in (flat, grad_weight, keys):  # used on both streams: not reused before the side work is done
            t.record_stream(side)
    return grad_weight


def sort_by_row(flat: torch.Tensor, num_weights: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted rows, their positions in ``flat``): a stable sort, so each row's positions
    stay in order; int32 keys where the rows fit (fewer radix passes)."""
    import torch

    keys = flat.to(torch.int32) if num_weights < 2**31 else flat.to(torch.int64)
    return sort_rows(keys, num_weights)


# radix_sort.cu's kernels' parameters: (keys, n, passes, totals); (keys in, values in, n, shift,
# totals, status, tile counter, keys out, values out, positions out).
HISTOGRAMS_PARAMS = nvrtc.params(PTR + I64 + I32 + PTR)
ZERO_PARAMS = nvrtc.params(PTR + I64)  # radix_zero: (8-byte words, count)
ONESWEEP_PARAMS = nvrtc.params(PTR + PTR + I64 + I32 + PTR + PTR + PTR + PTR + PTR + PTR)
# Keys per thread per tile (radix_sort.cu's ITEMS: 8 * TILE bytes of shared memory): 12, and 6
# below RADIX_SMALL_BELOW keys, where twice the tiles fill more of the GPU (measured in change 60:
# docs/perf/comment-figures.md).
RADIX_ITEMS = 12
RADIX_ITEMS_SMALL = 6
RADIX_SMALL_BELOW = 1 << 18
RADIX_TILE = BLOCK * RADIX_ITEMS  # the tiles' sizes in keys (the tests cut inputs at them)
RADIX_TILE_SMALL = BLOCK * RADIX_ITEMS_SMALL
RADIX_DIGITS = 256
RADIX_LOOK_BACK = 8  # look-back words a onesweep thread reads at once (radix_sort.cu's LOOK_BACK)
RADIX_MAX_PASSES = 4
RADIX_MAX_KEYS = 2**30  # radix_sort.cu's look-back words count in 30 bits
RADIX_HISTOGRAM_MAX_BLOCKS = 256  # the totals' grid-stride blocks, at most (each adds its counts atomically)
# From 16,384 keys on (the fewest measured), 22 and 26 bits, ours takes less GPU time than
# torch.sort's four onesweep passes, four passes included, and about the same host time (changes
# 59-60: docs/perf/comment-figures.md). Fewer keys take torch.sort.
RADIX_MIN_KEYS = 1 << 14


# A radix sort begun before its keys exist (``radix_start``): its zeroed control words, passes,
# tiles and keys per thread; the keys' writer counts the digit totals into the control words.
RadixStart = tuple[Any, int, int, int]


def _radix_shape(n: int, max_key: int) -> tuple[int, int, int]:
    """(passes, keys per thread per tile, tiles) of radix_sort.cu over ``n`` keys up to ``max_key``."""
    passes = max(1, -(-max(1, max_key).bit_length() // 8))
    items = RADIX_ITEMS_SMALL if n < RADIX_SMALL_BELOW else RADIX_ITEMS
    return passes, items, -(-n // (BLOCK * items))


def _takes_radix(n: int, int32_keys: bool, on_gpu: bool) -> bool:
    return int32_keys and on_gpu and RADIX_MIN_KEYS <= n < RADIX_MAX_KEYS and tuning.current().own_sort


def _radix_control(index: int, passes: int, tiles: int, items: int, device: Any) -> Any:
    """The sort's control words (every pass's digit totals, tile counter and look-back words; an
    even count: radix_zero writes 8-byte words), zeroed by radix_zero on the current stream."""
    import torch

    zero = _radix_functions(index, items)[0]
    words = RADIX_MAX_PASSES * (RADIX_DIGITS + 1) + passes * tiles * RADIX_DIGITS
    control = torch.empty(words, dtype=torch.int32, device=device)
    _launch_packed(index, zero, min(-(-words // (2 * BLOCK)), RADIX_HISTOGRAM_MAX_BLOCKS), BLOCK, ZERO_PARAMS,
                   (control.data_ptr(), words // 2))
    return control


def radix_start(n: int, max_key: int, like: torch.Tensor) -> RadixStart | None:
    """Begin ``sort_rows`` of ``n`` int32 keys up to ``max_key`` on ``like``'s device before the keys
    are written, where sort_rows would take radix_sort.cu (else None): the control words zeroed,
    for the keys' writer to count the digit totals (lookup_prepare.cu's ``totals``) so that the
    sort skips its own counting launch (change 61)."""
    if not _takes_radix(n, max_key < KEYS_INT32_BELOW, _on_gpu(like)):
        return None
    passes, items, tiles = _radix_shape(n, max_key)
    return _radix_control(like.get_device(), passes, tiles, items, like.device), passes, tiles, items


def sort_rows(keys: torch.Tensor, max_key: int, started: RadixStart | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.sort(keys, stable=True)`` for sort keys in [0, ``max_key``] (the backward's rows,
    the sentinel row ``num_rows`` included): (sorted keys, int64 positions). int32 keys on a
    CUDA device, RADIX_MIN_KEYS of them or more, take radix_sort.cu, 8 bits a pass over
    bit_length(max_key) bits only (1 to 4 passes, where torch sorts all 32 bits in 4): one
    launch zeroing its control words, one for every pass's digit totals, then one a pass; other
    keys, and the knob ``tuning.own_sort`` off, torch.sort. The same bits either way: both are the stable sort.
    Keys outside [0, max_key] are the caller's error (sorted by their low bits only).
    ``started``: ``radix_start``'s for these keys, their digit totals already counted."""
    import torch

    n = keys.numel()
    if started is None and not _takes_radix(n, keys.dtype == torch.int32, _on_gpu(keys)):
        return torch.sort(keys, stable=True)
    index = keys.get_device()
    if started is None:
        passes, items, tiles = _radix_shape(n, max_key)
        control = _radix_control(index, passes, tiles, items, keys.device)
    else:
        control, passes, tiles, items = started
    _, histograms, onesweep = _radix_functions(index, items)
    # pointers into the zeroed words (no views: each view is a dispatch): every pass's digit
    # totals, its tile counter, its look-back words
    totals = control.data_ptr()
    counters = totals + 4 * RADIX_MAX_PASSES * RADIX_DIGITS
    status = counters + 4 * RADIX_MAX_PASSES
    pairs = torch.empty(4 * n if passes > 1 else 0, dtype=torch.int32, device=keys.device)  # (keys, values) x 2
    out_keys = torch.empty_like(keys)
    positions = torch.empty(n, dtype=torch.int64, device=keys.device)
    if POISON_OUTPUTS:  # an element the kernels fail to write cannot pass a comparison
        out_keys.fill_(-7)
        positions.fill_(-7)
    if started is None:
        _launch_packed(index, histograms, min(tiles, RADIX_HISTOGRAM_MAX_BLOCKS), BLOCK, HISTOGRAMS_PARAMS,
                       (keys.data_ptr(), n, passes, totals))
    src_keys, src_values = keys.data_ptr(), 0  # the first pass numbers the positions itself
    for p in range(passes):
        last = p == passes - 1
        pair = pairs.data_ptr() + (p % 2) * 8 * n
        dst_keys, dst_values = (out_keys.data_ptr(), 0) if last else (pair, pair + 4 * n)
        _launch_packed(index, onesweep, tiles, BLOCK, ONESWEEP_PARAMS, (
            src_keys, src_values, n, 8 * p, totals + 4 * RADIX_DIGITS * p, status + 4 * RADIX_DIGITS * tiles * p,
            counters + 4 * p, dst_keys, dst_values, positions.data_ptr() if last else 0))
        src_keys, src_values = dst_keys, dst_values
    return out_keys, positions


def _on_gpu(t: torch.Tensor) -> bool:
    """``t`` is on a CUDA device (the host-work tests replace this to run the GPU path's Python
    on CPU tensors)."""
    return bool(t.is_cuda)


# (device, items, look-back) -> radix_sort.cu's three kernels
_RADIX: dict[tuple[int, int, int], tuple[Any, Any, Any]] = {}


def _radix_functions(index: int, items: int) -> tuple[Any, Any, Any]:
    """radix_sort.cu's zero, histogram and onesweep kernels on device ``index``, ``items`` keys
    per thread per tile (compiled once)."""
    key = (index, items, RADIX_LOOK_BACK)
    found = _RADIX.get(key)
    if found is None:
        defines = {"BLOCK": BLOCK, "ITEMS": items, "LOOK_BACK": RADIX_LOOK_BACK}
        zero, histograms, onesweep = (nvrtc.get_function("radix_sort.cu", entry, defines, index)
                                      for entry in ("radix_zero", "radix_histograms", "radix_onesweep"))
        found = _RADIX[key] = (zero, histograms, onesweep)
    return found


def backward_passes(grad_out: torch.Tensor, sorted_rows: torch.Tensor, positions: torch.Tensor, *,
                    bag_of: torch.Tensor | None, bag_size: int, per_sample_weights: torch.Tensor | None,
                    bag_scale: torch.Tensor | None, padding_idx: int, scale: float,
                    grad_weight: torch.Tensor | None, fused_defines: tuple[tuple[str, object], ...] = (),
                    fused_values: tuple[object, ...] = NO_FUSED_VALUES) -> None:
    """The chunk and combine kernels: write every looked-up row of ``grad_weight`` (float32 rows
    when it is float32 and grad_out is not: GRAD_F32), or, with ``fused_defines`` /
    ``fused_values`` (FUSED_OPT, _segments.py: the optimizer's defines and its ten values, as
    FUSED_KINDS), update those rows in place instead. Host work: one allocation (the partial
    sums and the carry flags share it) and two launches; the plan, the compiled functions and
    the grid are memoised per call shape (``_backward_prepared``)."""
    import torch

    n = sorted_rows.numel()
    index = grad_out.get_device()
    grad_f32 = grad_weight is not None and grad_weight.dtype != grad_out.dtype
    key = (grad_out.dtype, grad_out.shape[1], grad_out.data_ptr() % 16, n, sorted_rows.dtype,
           per_sample_weights is not None, bag_scale is not None, grad_f32, fused_defines, index)
    plans = _BACKWARD_PLANS[1] if _BACKWARD_PLANS[0] is tuning._CURRENT else _backward_plans_now()
    prepared = plans.get(key)
    if prepared is None:
        prepared = _backward_prepared(key, grad_out, sorted_rows, plans)
    chunk, combine, chunks, partial_floats = prepared
    dim = key[1]
    # the partial sums (2 rows per chunk, float32), then the chunks' carry flags (int32)
    work = grad_out.new_empty((partial_floats + chunks,), dtype=torch.float32)
    partial = work.data_ptr()
    carries = partial + 4 * partial_floats
    rows, grad = sorted_rows.data_ptr(), 0 if grad_weight is None else grad_weight.data_ptr()
    fn, grid, block, col_tiles = chunk
    _launch_packed(index, fn, grid, block, CHUNK_PARAMS, (
        grad_out.data_ptr(), dim, rows, positions.data_ptr(), n, 0 if bag_of is None else bag_of.data_ptr(),
        max(1, bag_size), 0 if per_sample_weights is None else per_sample_weights.data_ptr(),
        0 if bag_scale is None else bag_scale.data_ptr(), scale, padding_idx, col_tiles, grad, partial, carries,
        *fused_values))
    fn, grid, block, col_tiles = combine
    _launch_packed(index, fn, grid, block, COMBINE_PARAMS, (rows, n, dim, col_tiles, partial, carries, grad,
                                                            *fused_values))


# The memoised backward plans of the current knobs: [tuning, {call key: BackwardPrepared}].
# BackwardPrepared: the chunk pass and the combine pass, each (compiled function, grid, block,
# column tiles), then the chunks and the floats of partial sums.
PassLaunch = tuple[Any, int, int, int]
BackwardPrepared = tuple[PassLaunch, PassLaunch, int, int]
_BACKWARD_PLANS: list[Any] = [None, {}]
_BACKWARD_BY_TUNING: dict[tuning.Tuning, dict[tuple[Any, ...], BackwardPrepared]] = {}


def _backward_plans_now() -> dict[tuple[Any, ...], BackwardPrepared]:
    knobs = tuning.current()
    _BACKWARD_PLANS[:] = [knobs, _BACKWARD_BY_TUNING.setdefault(knobs, {})]
    plans: dict[tuple[Any, ...], BackwardPrepared] = _BACKWARD_PLANS[1]
    return plans


def _backward_prepared(key: tuple[Any, ...], grad_out: torch.Tensor, sorted_rows: torch.Tensor,
                       plans: dict[tuple[Any, ...], BackwardPrepared]) -> BackwardPrepared:
    """Plan the backward call ``key`` (backward_passes'), compile its two passes, remember them."""
    dtype, dim, align, n, row_dtype, has_psw, has_scale, grad_f32, fused, index = key
    call = BackwardCall(grad_dtype=_dtype_code(dtype), elem_bytes=grad_out.element_size(), dim=dim, grad_align=align,
                        num_positions=n, row_type=_index_type(row_dtype), has_psw=has_psw, has_scale=has_scale,
                        grad_f32=grad_f32, fused=fused)
    chunk_pass, combine = plan_backward(call, device_props(grad_out.device), tuning.current())
    device = grad_out.device.index
    launches = tuple((nvrtc.get_function(p.source, p.entry, dict(p.defines), device), p.blocks, p.block, p.col_tiles)
                     for p in (chunk_pass, combine))
    chunks = -(-n // chunk_pass.chunk_positions)
    if len(plans) >= _MAX_PLANS:  # calls of ever new sizes must not grow it forever
        plans.clear()
    plans[key] = (launches[0], launches[1], chunks, chunks * 2 * dim)
    return plans[key]


# The preparation kernel's parameters (lookup_prepare.cu): indices, num_indices, offsets,
# num_bags, tables, bags_per_table, table_rows, sentinel, keys, grad_row, bag_scale, totals, passes.
PREPARE_PARAMS = nvrtc.params(PTR + I64 + PTR + I64 + I64 + I64 + PTR + I64 + PTR + PTR + PTR + PTR + I32)
# (device, index dtype, key dtype, mean, positions, bags, grid by tiles) -> (compiled function, grid)
_PREPARE: dict[tuple[Any, ...], tuple[Any, int]] = {}
PREPARE_BLOCKS_PER_SM = 8  # the preparation's grid cap (a grid-stride loop)
PREPARE_ITEMS = 4  # positions per thread per tile (lookup_prepare.cu's ITEMS)
KEYS_INT32_BELOW = 2**31 - 1  # sort keys are int32 for fewer rows (the sentinel, num_rows, fits too)


def prepare_table_lookups(indices: torch.Tensor, offsets: torch.Tensor, table_rows: torch.Tensor, *,
                          num_rows: int, mean: bool, sentinel: int,
                          sort: RadixStart | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One launch of lookup_prepare.cu for a table-batched call (T = ``table_rows.numel()``
    tables, ``offsets``: T * B + 1 entries, the indices' dtype, both contiguous on one device):
    (sort keys, grad rows, bag scales). keys[p]: position p's global row (int32 below
    KEYS_INT32_BELOW rows, else int64), ``sentinel`` where p is in no bag (``sentinel`` < 0: the
    index itself, the dense backward's row for it); grad_row[p] (int64): its row of the output
    gradient viewed as [B * T, dim] (j * T + t for table t's j-th bag), -1 in no bag; with
    ``mean`` the float32 scale 1 / (bag length) of each grad row (0 for an empty bag), else None.
    Equal, bit for bit, to ``tbe.tbe_lookups``' torch operations for non-decreasing offsets.
    ``sort`` (``radix_start``'s for these keys): the kernel also counts their digit totals."""
    import torch

    n, bags = indices.numel(), offsets.numel() - 1
    tables = table_rows.numel()
    key_dtype = torch.int32 if num_rows < KEYS_INT32_BELOW else torch.int64
    keys = torch.empty_like(indices, dtype=key_dtype)
    grad_row = torch.empty_like(indices, dtype=torch.int64)
    bag_scale = indices.new_empty((bags,), dtype=torch.float32) if mean else None
    if POISON_OUTPUTS:  # an element the kernel fails to write cannot pass a comparison
        keys.fill_(-7)
        grad_row.fill_(-7)
        if bag_scale is not None:
            bag_scale.fill_(float("nan"))
    index = indices.get_device()
    by_tiles = tuning.current().prepare_grid_by_tiles
    found = _PREPARE.get((index, indices.dtype, key_dtype, mean, n, bags, by_tiles))
    if found is None:
        found = _prepare_function(index, indices, key_dtype, mean, n, bags, by_tiles)
    fn, grid = found
    _launch_packed(index, fn, grid, BLOCK, PREPARE_PARAMS, (
        indices.data_ptr(), n, offsets.data_ptr(), bags, tables, bags // tables, table_rows.data_ptr(), sentinel,
        keys.data_ptr(), grad_row.data_ptr(), 0 if bag_scale is None else bag_scale.data_ptr(),
        0 if sort is None else sort[0].data_ptr(), 0 if sort is None else sort[1]))
    return keys, grad_row, bag_scale


def _prepare_function(index: int, indices: torch.Tensor, key_dtype: torch.dtype, mean: bool, n: int,
                      bags: int, by_tiles: bool) -> tuple[Any, int]:
    """Compile (once) the preparation's variant and size its grid; remember both. ``by_tiles``
    (the knob ``prepare_grid_by_tiles``): a block per tile of BLOCK * PREPARE_ITEMS positions (and
    enough for the mean's bags), where a block per BLOCK positions left three of four idle."""
    defines = {"INDEX_T": _index_type(indices.dtype), "KEY_T": _index_type(key_dtype), "MEAN": int(mean),
               "BLOCK": BLOCK, "ITEMS": PREPARE_ITEMS}
    fn = nvrtc.get_function("lookup_prepare.cu", "tbe_prepare", defines, indices.device.index)
    threads = max(-(-n // PREPARE_ITEMS), bags if mean else 0) if by_tiles else max(n, bags)
    grid = grid_stride_blocks(threads, sm_count(indices.device), PREPARE_BLOCKS_PER_SM)
    if len(_PREPARE) >= _MAX_PLANS:
        _PREPARE.clear()
    found = _PREPARE[(index, indices.dtype, key_dtype, mean, n, bags, by_tiles)] = (fn, grid)
    return found


@functools.cache
def _side_stream(device_index: int) -> torch.cuda.Stream:
    import torch

    return torch.cuda.Stream(device_index)  # type: ignore[no-untyped-call]


def _zero_untouched_rows(grad_weight: torch.Tensor, rows: torch.Tensor, padding_idx: int,
                         keys: torch.Tensor | None) -> torch.cuda.Event:
    """On the current stream: a bitmap of the looked-up rows (``rows``: int32 or int64; also
    copied to the int32 ``keys`` when given), then zeros in every other row (and the padding
    row), ``fill_blocks_per_sm`` blocks per SM (fewer do not leave the sort more room: it is
    slowed by the fill's DRAM traffic, not by a lack of SM slots). The backward passes write
    exactly the rows this leaves alone. Returns an event recorded after the bitmap (and keys)
    are written."""
    import torch

    num_weights, dim = grad_weight.shape
    sms = sm_count(grad_weight.device)
    touched = torch.zeros((num_weights + 31) // 32, dtype=torch.int32, device=grad_weight.device)
    device = grad_weight.device.index
    mark = nvrtc.get_function("embedding_bag_backward.cu", "embedding_bag_backward_mark",
                               {"BACKWARD_PASS": 3, "BLOCK": BLOCK, "INDEX_T": _index_type(rows.dtype)}, device)
    grid = grid_stride_blocks(rows.numel(), sms, 8)
    _launch_on(grad_weight, mark, grid, [
        (rows.data_ptr(), PTR), (rows.numel(), I64), (num_weights, I64), (touched.data_ptr(), PTR),
        (_ptr(keys), PTR)])
    marked = torch.cuda.Event()  # type: ignore[no-untyped-call]
    marked.record()
    row_bytes = dim * grad_weight.element_size()
    word = vector_width(row_bytes, 1, grad_weight.data_ptr())  # bytes per zeroed word: 2..16
    fill = nvrtc.get_function("embedding_bag_backward.cu", "embedding_bag_backward_fill",
                               {"BACKWARD_PASS": 3, "BLOCK": BLOCK, "FILL_BYTES": word}, device)
    row_words = row_bytes // word
    row_shift = row_words.bit_length() - 1 if row_words & (row_words - 1) == 0 else -1
    grid = grid_stride_blocks(num_weights * row_words, sms, tuning.current().fill_blocks_per_sm)
    _launch_on(grad_weight, fill, grid, [
        (touched.data_ptr(), PTR), (num_weights, I64), (row_words, I64), (row_shift, I32), (padding_idx, I64),
        (grad_weight.data_ptr(), PTR)])
    return marked
