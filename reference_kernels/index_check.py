"""Index range checking: the four modes, the per-device error ledger and how errors surface.

Modes (``check_indices=`` of every entry point; semantics in docs/kernels.md, "Index range
check"):

* ``"deferred"`` (the default): one device pass checks the indices and offsets and writes the
  copy the lookup reads (bad indices as row 0 of their table, offsets clamped); the first error
  is recorded in this device's ledger and raised as ``EmbeddingIndexError`` at the next call of
  an op of this package on the device, or by ``check_index_errors()``. No host synchronisation.
* ``"warn"``: the same pass; bad indices read row 0 and are counted; one
  ``EmbeddingIndexWarning`` at the next call or at ``check_index_errors()``; never raises.
* ``"sync"`` (``True``): the same pass, then a host synchronisation; raises at once.
* ``"ignore"`` (``False``): no check; the caller guarantees the range.

``None`` takes the mode from REFERENCE_KERNELS_INDEX_CHECK, else ``"ignore"`` when the legacy
REFERENCE_KERNELS_SKIP_INDEX_CHECK=1 is set, else ``"deferred"``.

The resolution functions import nothing heavy (testable without torch or a GPU); torch and the
CUDA bindings are imported on first use of the ledger.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import host, launch, nvrtc, tuning
from .errors import CheckMode, EmbeddingIndexError, EmbeddingIndexWarning
from .host import LOADED as _HOST_PATH
from .nvrtc import I64, PTR
from .plan import BLOCK, grid_stride_blocks

if TYPE_CHECKING:
    import torch

MODES: tuple[CheckMode, ...] = tuple(CheckMode)
# host_path.cpp's codes 0-3: the compiled host path takes a mode as one of these members (resolved by
# its caller), never a spelling, and never reads the environment
HOST_MODES: tuple[CheckMode, ...] = (CheckMode.IGNORE, CheckMode.DEFERRED, CheckMode.WARN, CheckMode.SYNC)
MODE_ENV = "REFERENCE_KERNELS_INDEX_CHECK"
SKIP_ENV = "REFERENCE_KERNELS_SKIP_INDEX_CHECK"  # legacy: 1 means "ignore"
DEFAULT_MODE = CheckMode.DEFERRED
_SYNC, _IGNORE = CheckMode.SYNC, CheckMode.IGNORE  # module globals: no enum attribute lookup per call

_SPELLINGS = ("'deferred' (the default), 'warn', 'sync' (also True), 'ignore' (also False), "
              "or None (from the environment)")


def resolve_mode(check_indices: object) -> CheckMode:
    """The mode of one call from its ``check_indices`` argument (or module attribute): the one
    place a spelling (str, bool, None and the environment) becomes a CheckMode; each entry point
    resolves once and passes the mode on, to the compiled host path (host_path.cpp) too. The
    modules resolve theirs at construction (``FixedCheckMode``)."""
    if check_indices is None:
        return default_mode()
    if isinstance(check_indices, bool):
        return _SYNC if check_indices else _IGNORE
    if isinstance(check_indices, str):
        for mode in MODES:
            if check_indices == mode:
                return mode
        raise ValueError(f"reference_kernels: check_indices must be one of {_SPELLINGS}; got {check_indices!r}")
    raise TypeError(f"reference_kernels: check_indices must be one of {_SPELLINGS}; "
                    f"got {check_indices!r} of type {type(check_indices).__name__}")


def _read_environment() -> tuple[str | None, str | None]:
    """The two variables' values (None: unset), read on every call that leaves the mode to the
    environment. Through ``os.environ``'s public interface only, never through CPython's private
    ``os.environ._data``."""
    environ = os.environ
    return environ.get(MODE_ENV), environ.get(SKIP_ENV)


def default_mode() -> CheckMode:
    """The mode of calls that leave ``check_indices`` None: REFERENCE_KERNELS_INDEX_CHECK (one
    of MODES), else "ignore" if REFERENCE_KERNELS_SKIP_INDEX_CHECK=1, else "deferred"."""
    value, skip = _read_environment()
    if value:
        wanted = value.strip().lower()
        for mode in MODES:
            if wanted == mode:
                return mode
        raise ValueError(f"environment variable {MODE_ENV}={value!r} is not an index check mode; "
                         f"valid values: {', '.join(MODES)}")
    if skip in ("1", "true", "True", "yes"):
        return _IGNORE
    return DEFAULT_MODE


class FixedCheckMode:
    """``check_indices`` of the modules: the index check's mode, a ``CheckMode`` resolved once, from
    the constructor's argument (None: the environment's default, read then) or from an assignment;
    ``forward`` passes it on without resolving it again (as FBGEMM's ``bounds_check_mode``)."""

    _check_mode: CheckMode

    @property
    def check_indices(self) -> CheckMode:
        return self._check_mode

    @check_indices.setter
    def check_indices(self, value: CheckMode | str | bool | None) -> None:
        self._check_mode = resolve_mode(value)


# ---------------------------------------------------------------------------------------------
# The ledger: per device one int64 tensor, word 0 the lock, then one record per checking mode.

RECORD_OWNER, RECORD_OP, RECORD_POS, RECORD_VALUE, RECORD_TABLE, RECORD_ROWS = 0, 1, 2, 3, 4, 5
RECORD_BAG, RECORD_INDICES, RECORD_COUNT, RECORD_BAG_COUNT = 6, 7, 8, 9
RECORD_WORDS = 10  # as R_* in index_check.cu
REGIONS: dict[str, int] = {"deferred": 0, "warn": 1, "sync": 2}
OPS = ("embedding_bag", "embedding", "TableBatchedEmbeddingBag")  # op code = position + 1
_OP_CODES = {name: code for code, name in enumerate(OPS, start=1)}
MAX_DEVICES = 64
# Table-batched calls with fewer tables than this scan their spans in shared memory (caps:
# powers of two, so that few variants are compiled); more tables: spans precomputed by torch.
TABLE_CAPS = (64, 512, 4096)


@dataclass(frozen=True)
class Finding:
    """What one ledger record says (``None`` fields: nothing of that kind was found)."""

    op: str
    position: int | None
    value: int | None
    table: int | None
    rows: int | None
    bag: int | None
    num_indices: int
    bad_indices: int
    bad_bags: int

    def describe(self) -> str:
        parts = []
        if self.position is not None:
            where = f"table {self.table} of {self.rows} rows" if self.table is not None else \
                f"an embedding table of {self.rows} rows"
            valid = f"valid: 0..{self.rows - 1}" if self.rows else "the table has no rows"
            parts.append(f"index {self.value} at position {self.position} is out of range for {where} ({valid})")
        if self.bag is not None:
            parts.append(f"offsets are invalid at bag {self.bag}: offsets must start at 0 (offsets[0] == 0, as "
                         "torch.nn.functional.embedding_bag requires), be non-decreasing and lie in "
                         f"[0, {self.num_indices}] (the number of indices)")
        return "; ".join(parts)


def parse_record(words: list[int]) -> Finding | None:
    """The finding of one record (RECORD_WORDS int64 values), or None when it is clean."""
    if words[RECORD_OWNER] == 0:
        return None
    pos, bag, table = words[RECORD_POS], words[RECORD_BAG], words[RECORD_TABLE]
    op = words[RECORD_OP]
    return Finding(op=OPS[op - 1] if 1 <= op <= len(OPS) else f"op {op}",
                   position=pos - 1 if pos else None, value=words[RECORD_VALUE] if pos else None,
                   table=table if pos and table >= 0 else None, rows=words[RECORD_ROWS] if pos else None,
                   bag=bag - 1 if bag else None, num_indices=words[RECORD_INDICES],
                   bad_indices=words[RECORD_COUNT], bad_bags=words[RECORD_BAG_COUNT])


def error_message(finding: Finding) -> str:
    more = finding.bad_indices + finding.bad_bags - (finding.position is not None) - (finding.bag is not None)
    tail = f" ({more} more bad indices or bags since the last check)" if more > 0 else ""
    return f"reference_kernels.{finding.op}: {finding.describe()}{tail}"


def warning_message(finding: Finding) -> str:
    counts = []
    if finding.bad_indices:
        counts.append(f"{finding.bad_indices} out-of-range indices were read as row 0 of their table")
    if finding.bad_bags:
        counts.append(f"{finding.bad_bags} bags with invalid offsets were clamped")
    return (f"reference_kernels: {' and '.join(counts)} since the last report (check_indices='warn'); "
            f"the first, in {finding.op}: {finding.describe()}")


# Host flags, one int64 word per device: its low int32 is set by a failing deferred check, its
# high int32 by a failing warn check. Ordinary memory until the first ledger exists (reads 0),
# then pinned, device-mapped host memory. Read through ctypes: a plain load.
FLAGS: Any = (ctypes.c_int64 * MAX_DEVICES)()
_FLAGS_DEVICE_PTR = 0  # the pinned words' device address (0 until allocated)


class Ledger:
    """One device's ledger tensor (lock word, then one record per checking mode)."""

    def __init__(self, device_index: int) -> None:
        import torch

        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "reference_kernels: the index check's error ledger of this device is created by its first "
                "checked call; make one call (or reference_kernels.check_index_errors()) before CUDA graph "
                "capture, as a warm-up")
        global _torch
        _torch = torch  # for run_check, without an import statement per call
        self.device_index = device_index
        self.words = torch.zeros(1 + RECORD_WORDS * len(REGIONS), dtype=torch.int64, device=f"cuda:{device_index}")
        base = self.words.data_ptr()
        self.lock_ptr = base
        self.region_ptrs = {mode: base + 8 * (1 + RECORD_WORDS * r) for mode, r in REGIONS.items()}
        flags = _pinned_flags()
        self.flag_ptrs = {"deferred": flags + 8 * device_index, "warn": flags + 8 * device_index + 4, "sync": 0}
        # per mode, the check kernel's ledger arguments: lock, record, flag (one lookup per call)
        self.pointers = {mode: (self.lock_ptr, self.region_ptrs[mode], self.flag_ptrs[mode]) for mode in REGIONS}

    def region(self, mode: str) -> torch.Tensor:
        start = 1 + RECORD_WORDS * REGIONS[mode]
        return self.words[start:start + RECORD_WORDS]


_LEDGERS: dict[int, Ledger] = {}
_torch: Any = None  # the torch module, bound with the first ledger (this module imports torch on first use)


def _pinned_flags() -> int:
    """Allocate the flag words in pinned host memory once per process and return the address
    kernels write them through. cuMemHostAlloc(PORTABLE | DEVICEMAP): one allocation, mapped
    for every device. The CUDA Driver API's "Unified Addressing" section ("Automatic Mapping of
    Host Allocated Host Memory"): host memory from cuMemHostAlloc "is always directly accessible
    from all contexts on all devices that support unified addressing", through "the same
    pointer value" as on the host; cuMemHostGetDevicePointer's pointer is documented as
    "suitable for use on all devices provided Unified Virtual Addressing is enabled", so that
    is the one used (the host pointer where the call fails)."""
    global FLAGS, _FLAGS_DEVICE_PTR
    if _FLAGS_DEVICE_PTR:
        return _FLAGS_DEVICE_PTR
    from . import nvrtc

    driver, _ = nvrtc._bindings()
    flags = driver.CU_MEMHOSTALLOC_PORTABLE | driver.CU_MEMHOSTALLOC_DEVICEMAP
    host = int(nvrtc._check(driver.cuMemHostAlloc(8 * MAX_DEVICES, flags), "cuMemHostAlloc"))
    ctypes.memset(host, 0, 8 * MAX_DEVICES)
    err, device = driver.cuMemHostGetDevicePointer(host, 0)
    FLAGS = (ctypes.c_int64 * MAX_DEVICES).from_address(host)  # never freed: one per process
    _FLAGS_DEVICE_PTR = int(device) if int(err) == 0 else host
    return _FLAGS_DEVICE_PTR


def ledger(device_index: int) -> Ledger:
    found = _LEDGERS.get(device_index)
    if found is None:
        found = _LEDGERS[device_index] = Ledger(device_index)
        if _HOST_PATH:  # the compiled host path's checked calls write through it too
            offer_ledger(_HOST_PATH[0].library, found)
    return found


def offer_ledger(library: Any, book: Ledger) -> None:
    """Tell the compiled host path's library one device's ledger (its checked lookups write
    through these pointers)."""
    library.set_ledger(book.device_index, ctypes.addressof(FLAGS), book.pointers["deferred"], book.pointers["warn"])


def surface(device_index: int) -> None:
    """A check on this device failed (its flag is set): synchronise, read and reset the
    deferred and warn records, warn and raise as they say."""
    import torch

    book = _LEDGERS.get(device_index)
    if book is None:
        return
    torch.cuda.synchronize(device_index)
    words = book.words.tolist()
    FLAGS[device_index] = 0
    with torch.cuda.device(device_index):
        book.words.zero_()
    records = {mode: parse_record(words[1 + RECORD_WORDS * r:1 + RECORD_WORDS * (r + 1)])
               for mode, r in REGIONS.items() if mode != "sync"}
    warned = records["warn"]
    if warned is not None:
        warnings.warn(EmbeddingIndexWarning(warning_message(warned)), stacklevel=4)
    failed = records["deferred"]
    if failed is not None:
        raise EmbeddingIndexError(error_message(failed))


def poll(device_index: int) -> None:
    """At the start of each call: surface an earlier call's failed check on this device (a
    read of one host word; synchronises only when it is set)."""
    if FLAGS[device_index]:
        surface(device_index)


def check_index_errors(device: Any = None) -> None:
    """Synchronise ``device`` (default: the current CUDA device) and raise the first error of
    its deferred index checks since the last report (``EmbeddingIndexError``), after issuing
    the warning of its warn-mode checks (``EmbeddingIndexWarning``); returns None when clean.
    Also creates the device's ledger, so it serves as the warm-up before CUDA graph capture."""
    import torch

    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device()
    if device is not None:
        chosen = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if chosen.type != "cuda":
            raise ValueError(f"reference_kernels.check_index_errors: device must be a CUDA device, got {device!r}")
        index = index if chosen.index is None else chosen.index
    ledger(index)
    torch.cuda.synchronize(index)
    if FLAGS[index]:
        surface(index)
    return None


# ---------------------------------------------------------------------------------------------
# The check pass.

_TOKENS = itertools.count(1)  # one per checked call: the first failing call owns a record
INT32_LIMIT = 2**31 - 1


def clean_dtype(num_indices: int, max_rows: int, index_dtype: torch.dtype) -> torch.dtype:
    """int32 where every position and every valid row fits it, else the indices' own dtype."""
    import torch

    return torch.int32 if num_indices <= INT32_LIMIT and max_rows <= INT32_LIMIT + 1 else index_dtype  # as run_check


def table_cap(tables: int) -> int:
    """TABLE_CAP of a table-batched call: the smallest cap above ``tables``; -1: spans from torch."""
    for cap in TABLE_CAPS:
        if tables < cap:
            return cap
    return -1


# (device, index dtype, copy dtype, table cap) -> (compiled check, the device's SM count)
_FUNCTIONS: dict[tuple[Any, ...], tuple[Any, int]] = {}
# The check kernel's parameters (index_check.cu): indices, n, num_rows, offsets, n_off, table_sizes,
# tables, bags_per_table, spans, clean, clean_offsets, lock, record, flag, token, op.
CHECK_PARAMS = nvrtc.params(PTR + I64 + I64 + PTR + I64 + PTR + I64 + I64 + PTR + PTR + PTR + PTR + PTR + PTR
                             + I64 + I64)


def _function(device_index: int, index_dtype: torch.dtype, out_dtype: torch.dtype, cap: int) -> tuple[Any, int]:
    key = (device_index, index_dtype, out_dtype, cap)
    found = _FUNCTIONS.get(key)
    if found is None:
        defines: dict[str, Any] = {"INDEX_T": launch._index_type(index_dtype),
                                   "CLEAN_T": launch._index_type(out_dtype)}
        if cap:
            defines["TABLE_CAP"] = cap
        fn = nvrtc.get_function("index_check.cu", "index_check", defines, device_index)
        found = _FUNCTIONS[key] = (fn, launch._device_props(device_index).sms)
    return found


def run_check(indices: torch.Tensor, offsets: torch.Tensor | None, *, num_rows: int,
              table_sizes: torch.Tensor | None, bags_per_table: int, mode: str,
              op: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One check pass over contiguous ``indices`` (and ``offsets``, same dtype) on their device.
    ``num_rows``: the table's rows (table-batched: the largest table's, for the copy's dtype;
    ``table_sizes`` then holds each table's). Returns the copies the lookup reads; in "sync"
    mode raises EmbeddingIndexError before returning. Host work: one or two allocations and
    one launch (table-batched calls of 4096 tables or more: a few torch ops for the spans)."""
    device_index = indices.get_device()
    book = _LEDGERS.get(device_index)
    if book is None:
        book = ledger(device_index)
    n = indices.numel()
    out_dtype = _torch.int32 if n <= INT32_LIMIT and num_rows <= INT32_LIMIT + 1 else indices.dtype
    # empty_like: half the host time of new_empty(shape, dtype=...) (torch.Size parsing); one buffer
    # for both copies took longer here (an allocation plus two views, each view as dear as one)
    clean = _torch.empty_like(indices, dtype=out_dtype)
    clean_offsets = None if offsets is None else _torch.empty_like(offsets, dtype=out_dtype)
    n_off = 0 if offsets is None else offsets.numel()
    cap, tables, spans = 0, 0, None
    if table_sizes is not None:
        cap, tables, spans = _tables(offsets, table_sizes, bags_per_table, n)
    found = _FUNCTIONS.get((device_index, indices.dtype, out_dtype, cap))
    fn, sms = found if found is not None else _function(device_index, indices.dtype, out_dtype, cap)
    lock, record, flag = book.pointers[mode]
    blocks_per_sm = tuning.current().check_blocks_per_sm
    if _HOST_PATH and spans is None and _HOST_PATH[0].library.pending():  # the compiled host path missed this pass
        host.offer_check(device_index, indices.dtype, out_dtype, fn, sms, cap, blocks_per_sm)
    grid = grid_stride_blocks(max(n, n_off), sms, blocks_per_sm)
    launch._launch_packed(device_index, fn, grid, BLOCK, CHECK_PARAMS, (
        indices.data_ptr(), n, num_rows, launch._ptr(offsets), n_off, launch._ptr(table_sizes), tables,
        bags_per_table, launch._ptr(spans), clean.data_ptr(), launch._ptr(clean_offsets), lock, record, flag,
        next(_TOKENS), _OP_CODES[op]))
    if mode == "sync":
        _raise_now(book)
    return clean, clean_offsets


def lookup_ledger(device_index: int, mode: str, op: str, num_rows: int) -> tuple[int, int, int, int, int, int]:
    """The ledger arguments of a lookup that checks its own indices (CHECK in
    embedding_bag_forward.cu): the lock, ``mode``'s record and host flag, a fresh token, the op's
    code and the table's rows. Creates the device's ledger on first use (not during capture)."""
    book = _LEDGERS.get(device_index)
    if book is None:
        book = ledger(device_index)
    lock, record, flag = book.pointers[mode]
    return lock, record, flag, next(_TOKENS), _OP_CODES[op], num_rows


def raise_sync_finding(device_index: int) -> None:
    """Sync mode, after a lookup that checked its own indices: raise what it found (synchronises)."""
    _raise_now(_LEDGERS[device_index])


def _tables(offsets: torch.Tensor | None, table_sizes: torch.Tensor, bags_per_table: int,
            n: int) -> tuple[int, int, torch.Tensor | None]:
    """A table-batched check's table cap, table count and (past the largest cap) the tables'
    spans, from torch."""
    import torch

    tables = table_sizes.numel()
    cap = table_cap(tables)
    if cap >= 0:
        return cap, tables, None
    assert offsets is not None
    return cap, tables, offsets[::bags_per_table].to(torch.int64).clamp(0, n).cummax(0).values.contiguous()


def _raise_now(book: Ledger) -> None:
    """Sync mode: read this call's record (the one host synchronisation), reset it, raise."""
    region = book.region("sync")
    finding = parse_record(region.tolist())
    if finding is not None:
        region.zero_()
        raise EmbeddingIndexError(error_message(finding))


# The launcher's checked lookups call back into this module (lookup_ledger, raise_sync_finding,
# run_check); it sits below, so this module registers itself there.
launch.use_index_check(sys.modules[__name__])
