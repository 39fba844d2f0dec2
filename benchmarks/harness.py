"""Benchmark suite: ``python3 -m benchmarks suite --json out.json --charts DIR`` (from the repository root).

Method (docs/perf/): the copy ceiling is measured in the same run (a large
device-to-device copy, bytes read + written); every figure is the median of
``--reps`` (>= 100) calls timed with CUDA events after warm-up; before every timed
call the 60 MB L2 is flushed (cold figures), then the GPU sleeps (at least ~0.25 ms,
and 3x the host time of one call) so that the host has enqueued the whole call before
the start event runs: the figures are GPU times, and host overhead per call is
reported separately (``*_host_us``: wall time per call while the GPU is held busy,
so calls only enqueue). Tables are random normal (never zeros).

Flush (``--flush``): ``clean`` (default) reads a 512 MB buffer, which evicts the L2
and leaves only clean lines in it, as Nsight Compute's cache control does (write
back and invalidate). ``dirty`` overwrites the buffer instead, as a ``zero_()``
flush does: that leaves ~50-60 MB of dirty lines in the L2, which the timed call
then pays to write back (docs/perf/ measures both side by side).

Processes: each group (``--only``) runs in a fresh worker process of its own and the
parent merges their results, so no figure depends on what earlier groups allocated and
freed: after the big-table groups had freed 15 GB, a 2.56 GB table's random rows took 8 %
longer to gather in the same process, the same rows in ascending order did not
(docs/perf/change-28.md). Each process measures its own copy ceiling, and its cases'
percentages use it; the summary reports the median. ``--one-process`` runs every group in
one process, as before.

Bytes: *compulsory* = unique rows touched x row bytes + indices + offsets +
per-sample weights + output; *logical* counts every row read. Each forward case
also times a plain copy that moves the same compulsory bytes (``same_size_copy``; rounded to
a multiple of 32 KB, the sizes at which a copy is fastest, see ``COPY_ALIGN``):
the copy's own percentage of the ceiling at that size, launch floor included, is
the most any kernel moving those bytes could show (the summary's ``targets``
splits the missed cases by it). Speedup is torch's
median over ours, measured side by side on the same inputs. ``ours`` skips the
index check (inputs are generated in range); ``ours+check`` includes the default
check (``check_indices="deferred"``: the lookup checks its own indices where its kernel can, else
one pass validates them and writes the copy the lookup reads; no host synchronisation;
docs/kernels.md). Host time per call is measured for ours without the check (``ours_host_us``),
with the default check (``ours_check_host_us``), torch and FBGEMM; ours through the compiled
host path (``python3 -m benchmarks`` builds it before the first call:
REFERENCE_KERNELS_HOST_PATH=wait unless set).

FBGEMM (``benchmarks/fbgemm_peer.py``): where its table-batched forward op is available (the
``fbgemm_gpu`` package, or its library's directory: ``--fbgemm DIR`` or $FBGEMM_FORWARD_DIR),
every case it has (sum, mean; float32, float16; per-sample weights; one table or many) is
timed the same way on the same inputs, after its output is compared with ours; ``vs_fbgemm``
is FBGEMM's median over ours (above 1: ours is faster). Table-batched cases time FBGEMM's one
launch against both of our lines (one launch, and one launch per table).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks import fbgemm_peer
from reference_kernels import diagnostics
from reference_kernels.plan import width_groups
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import overrides_from_spec, tuned

DEV = "cuda"
CHECK = "deferred"  # the index check that ``ours+check`` times: the default, no host synchronisation
FLUSH_BYTES = 512 << 20
SLEEP_CYCLES = 500_000  # ~0.25 ms at 1.98 GHz: the host's least head start before each timed call
SLEEP_CLOCK_HZ = 1.98e9  # H200 boost clock: converts host seconds into sleep cycles
MAX_SLEEP_CYCLES = 40_000_000  # ~20 ms
DCN_POOLING = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
DCN_ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
            11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
DCN_ROW_CAP = 4_000_000  # the 40M-row tables are shrunk to 4M rows (memory and fill time)
# issue 37's widths nothing was tuned for, and tables of mixed widths (group "widths"); every table
# at most TABLE_BYTES (1M rows, fewer for wide rows)
SWEEP_WIDTHS = (4, 20, 44, 100, 200, 260, 520, 1000)
MIXED_WIDTHS = {"mixed 8 tables interleaved": [64, 128, 64, 256, 32, 128, 16, 64],
                "mixed 8 untuned widths": [4, 20, 44, 100, 200, 260, 520, 1000]}
TABLE_BYTES = 1 << 30


@dataclass
class Result:
    case: str
    group: str
    dtype: str
    mode: str
    psw: bool
    ours_us: float
    torch_us: float
    ours_check_us: float | None
    compulsory_bytes: int
    logical_bytes: int
    ours_gbps: float = 0.0
    torch_gbps: float = 0.0
    logical_gbps: float = 0.0
    pct_copy: float = 0.0
    torch_pct_copy: float = 0.0
    speedup: float = 0.0
    row_bytes: int = 0
    ours_host_us: float | None = None
    ours_check_host_us: float | None = None  # host time of the default call (deferred index check)
    torch_host_us: float | None = None
    reuse: float = 1.0  # logical / compulsory bytes: how often, on average, a touched row is read
    logical_pct_copy: float = 0.0
    notes: str = ""
    # A plain device-to-device copy that moves the case's compulsory bytes (half read, half
    # written; rounded to COPY_ALIGN), timed the same way: what a copy reaches at this size,
    # launch floor included.
    same_size_copy_us: float | None = None
    same_size_copy_pct: float | None = None  # its bandwidth (bytes it moved) / copy ceiling
    # FBGEMM's TBE forward on the same inputs (None: it has no such op, or is not available)
    fbgemm_us: float | None = None
    fbgemm_host_us: float | None = None
    fbgemm_gbps: float | None = None
    fbgemm_pct_copy: float | None = None
    vs_fbgemm: float | None = None  # FBGEMM's time over ours: above 1, ours is faster


@dataclass
class Timer:
    reps: int
    warmup: int = 5
    flush_mode: str = "clean"
    flush: torch.Tensor = field(default_factory=lambda: torch.ones(FLUSH_BYTES // 4, device=DEV))
    sink: torch.Tensor = field(default_factory=lambda: torch.empty((), device=DEV))

    def evict_l2(self) -> None:
        if self.flush_mode == "dirty":
            self.flush.fill_(1.0)
        else:  # a read-only sweep: the L2 ends up holding clean lines of this buffer only
            torch.sum(self.flush, dim=0, out=self.sink)

    def head_start_cycles(self, fn: Callable[[], object]) -> int:
        """GPU sleep before each timed call: at least 3x the host time of one call, so that a
        call that enqueues many launches (one per table) is still timed as GPU time only."""
        torch.cuda.synchronize()
        host = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        return min(MAX_SLEEP_CYCLES, max(SLEEP_CYCLES, int(3 * min(host) * SLEEP_CLOCK_HZ)))

    def median_us(self, fn: Callable[[], object], before: Callable[[], object] | None = None) -> float:
        """Median GPU time of ``fn`` over ``reps`` cold calls; ``before`` (if given) runs ahead of
        each call, outside the timed window (the diagnostics scripts reset state with it)."""
        for _ in range(self.warmup):
            if before:
                before()
            fn()
        sleep = self.head_start_cycles(fn)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends, strict=False):
            self.evict_l2()
            if before:
                before()
            torch.cuda._sleep(sleep)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=False)) * 1e3


def _host_attempt(fn: Callable[[], object], calls: int) -> tuple[float, bool]:
    """Host time per call of ``calls`` calls while the GPU sleeps (~0.1 s, longer than the calls
    take to enqueue), and whether the GPU woke before they were enqueued: then the host waited
    for it (the driver's launch queue was full, or a call synchronised)."""
    torch.cuda._sleep(200_000_000)
    woke = torch.cuda.Event()
    woke.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    waited = woke.query()
    torch.cuda.synchronize()
    return host, waited


def host_us(fn: Callable[[], object], calls: int = 50) -> float:
    """Host time per call: the GPU sleeps meanwhile, so calls only enqueue work."""
    fn()
    torch.cuda.synchronize()
    return _host_attempt(fn, calls)[0]


def host_us_unqueued(fn: Callable[[], object], calls: Sequence[int] = (20, 5, 2, 1)) -> float | None:
    """``host_us`` for calls that launch many kernels: where the GPU woke before the host had
    enqueued the calls, the host waited (the driver's launch queue was full, or a call
    synchronised) and the figure would be the GPU's sleep; fewer calls are timed then, down to
    the last of ``calls``, and None is returned if even those waited."""
    fn()
    torch.cuda.synchronize()
    for count in calls:
        host, waited = _host_attempt(fn, count)
        if not waited:
            return host
    return None


def copy_ceiling_gbps(timer: Timer) -> float:
    src = torch.randn(1 << 30, device=DEV)  # 4 GiB
    dst = torch.empty_like(src)
    us = timer.median_us(lambda: dst.copy_(src))
    return 2 * (4 << 30) / (us * 1e-6) / 1e9


def zipf_indices(n: int, rows: int, alpha: float, gen: torch.Generator) -> torch.Tensor:
    """n draws in [0, rows): uniform for alpha 0, else Zipf(alpha) ranks scattered over the table."""
    if alpha == 0:
        return torch.randint(0, rows, (n,), generator=gen, device=DEV)
    ranks = torch.arange(1, rows + 1, device=DEV, dtype=torch.float64)
    cdf = torch.cumsum(ranks.pow(-alpha), 0)
    cdf /= cdf[-1].clone()
    u = torch.rand(n, generator=gen, device=DEV, dtype=torch.float64)
    rank = torch.searchsorted(cdf, u).clamp(max=rows - 1)
    return (rank * 2654435761 + 12345) % rows  # hot rows spread over the table


def bag_indices(batch: int, pooling: int, rows: int, alpha: float, csr: bool,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """B bags of L lookups (zipf_indices): [B, L] indices and no offsets (fixed layout), or flat
    indices and B + 1 CSR offsets (include_last_offset)."""
    idx = zipf_indices(batch * pooling, rows, alpha, gen)
    if not csr:
        return idx.view(batch, pooling), None
    return idx, torch.arange(0, idx.numel() + 1, pooling, device=DEV)


def table(rows: int, dim: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(rows, dim, generator=gen, device=DEV, dtype=torch.float32).to(dtype)


def bag_bytes(weight: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor | None, psw: bool,
              out_elems: int) -> tuple[int, int]:
    row = weight.shape[1] * weight.element_size()
    extra = idx.numel() * idx.element_size() + (0 if offsets is None else offsets.numel() * offsets.element_size())
    extra += idx.numel() * weight.element_size() if psw else 0
    extra += out_elems * weight.element_size()
    unique = int(torch.unique(idx).numel())
    return unique * row + extra, idx.numel() * row + extra


@dataclass
class TableBatch:
    """The indices of one table-batched call: B bags per table, a fixed pooling per table."""

    per_table: list[torch.Tensor]  # each table's flat indices (B x its pooling)
    per_table_offsets: list[torch.Tensor]  # each table's CSR offsets, B + 1 of them
    indices: torch.Tensor  # every table's indices, table-major (what the TBE module takes)
    offsets: torch.Tensor  # T x B + 1 offsets into ``indices``


def table_batch(rows: list[int], batch: int, pooling: list[int], alpha: float, gen: torch.Generator) -> TableBatch:
    per_table = [zipf_indices(batch * p, r, alpha, gen) for r, p in zip(rows, pooling, strict=False)]
    lengths = torch.tensor([p for p in pooling for _ in range(batch)], device=DEV)
    per_offsets = [torch.arange(0, i.numel() + 1, p, device=DEV) for i, p in zip(per_table, pooling, strict=False)]
    return TableBatch(per_table, per_offsets,
                      torch.cat(per_table), torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]))


def table_batch_bytes(tables: list[torch.Tensor], tb: TableBatch, psw: bool, batch: int) -> tuple[int, int]:
    """(compulsory, logical) bytes of a table-batched call: bag_bytes summed over the tables."""
    sizes = [bag_bytes(t, i, o, psw, batch * t.shape[1])
             for t, i, o in zip(tables, tb.per_table, tb.per_table_offsets, strict=False)]
    return sum(c for c, _ in sizes), sum(n for _, n in sizes)


# The same-size copy moves a multiple of 2 x COPY_ALIGN bytes: a device-to-device copy whose
# size is a multiple of 8 KB or more ran 4-7 points of the ceiling faster than one of a
# neighbouring size that is a multiple of only 16-512 bytes (run 48, git show b80f893:scripts/copy_sizes.py:
# suite 1 f32's 160.8 MB, 94.7 % aligned against a median of 89.6 % over 60 sizes within
# +-3 %). The yardstick is what a copy of the case's bytes can reach, so it gets the aligned size.
COPY_ALIGN = 16 << 10


def copy_bytes(nbytes: int, align: int = COPY_ALIGN) -> int:
    """Bytes moved by the same-size copy for a case of nbytes: the nearest multiple of
    2 x align (at least one), half read and half written."""
    return 2 * align * max(1, round(nbytes / (2 * align)))


def finish(r: Result, copy_gbps: float) -> Result:
    r.ours_gbps = r.compulsory_bytes / (r.ours_us * 1e-6) / 1e9
    r.torch_gbps = r.compulsory_bytes / (r.torch_us * 1e-6) / 1e9
    r.logical_gbps = r.logical_bytes / (r.ours_us * 1e-6) / 1e9
    r.pct_copy = 100 * r.ours_gbps / copy_gbps
    r.torch_pct_copy = 100 * r.torch_gbps / copy_gbps
    r.speedup = r.torch_us / r.ours_us
    r.reuse = r.logical_bytes / r.compulsory_bytes
    r.logical_pct_copy = 100 * r.logical_gbps / copy_gbps
    if r.fbgemm_us:
        r.fbgemm_gbps = r.compulsory_bytes / (r.fbgemm_us * 1e-6) / 1e9
        r.fbgemm_pct_copy = 100 * r.fbgemm_gbps / copy_gbps
        r.vs_fbgemm = r.fbgemm_us / r.ours_us
    if r.same_size_copy_us:
        moved = copy_bytes(r.compulsory_bytes)
        r.same_size_copy_pct = 100 * moved / (r.same_size_copy_us * 1e-6) / 1e9 / copy_gbps
    return r


class Suite:
    def __init__(self, reps: int, quick: bool, seed: int, flush_mode: str = "clean",
                 fbgemm: fbgemm_peer.PeerSource | None = None) -> None:
        self.timer = Timer(reps, flush_mode=flush_mode)
        self.fbgemm = fbgemm if fbgemm is not None and fbgemm.available else None
        self.quick = quick
        self.gen = torch.Generator(device=DEV).manual_seed(seed)
        self.results: list[Result] = []
        self._copy_buffers: tuple[torch.Tensor, torch.Tensor] | None = None  # same-size copies
        self.copy_gbps = copy_ceiling_gbps(self.timer)
        print(f"copy ceiling: {self.copy_gbps:.0f} GB/s (read + write)", flush=True)

    def add(self, r: Result) -> None:
        if r.group != "bwd":
            r.same_size_copy_us = self.same_size_copy_us(r.compulsory_bytes)
        self.results.append(finish(r, self.copy_gbps))
        host = f" host {r.ours_host_us:5.1f}/{r.torch_host_us:5.1f} us" if r.ours_host_us else ""
        same = f" (same-size copy {r.same_size_copy_pct:5.1f}%)" if r.same_size_copy_pct else ""
        peer = f" fbgemm {r.fbgemm_us:8.1f} us x{r.vs_fbgemm:5.2f}" if r.fbgemm_us and r.vs_fbgemm else ""
        print(f"{r.case:58s} ours {r.ours_us:9.1f} us torch {r.torch_us:9.1f} us  x{r.speedup:5.2f}{peer}  "
              f"{r.ours_gbps:6.0f} GB/s {r.pct_copy:5.1f}% copy{same}{host}", flush=True)

    def fbgemm_call(self, weight: torch.Tensor, table_rows: list[int], indices: torch.Tensor,
                    offsets: torch.Tensor, mode: str, psw: torch.Tensor | None,
                    ours: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor] | None:
        """FBGEMM's forward on these inputs, when it has the case and its output matches what
        ``ours()`` computes (a wrong argument must not be timed): else None, and a note says why."""
        if self.fbgemm is None or not fbgemm_peer.supports(mode, weight.dtype, psw is not None):
            return None
        return self.matching_peer(fbgemm_peer.FbgemmForward(weight, table_rows, indices, offsets, mode, psw), ours,
                                  weight.dtype)

    def fbgemm_mixed_call(self, tables: list[torch.Tensor], indices: torch.Tensor, offsets: torch.Tensor, mode: str,
                          psw: torch.Tensor | None,
                          ours: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor] | None:
        """fbgemm_call for tables of their own widths (FBGEMM's one launch over mixed D)."""
        if self.fbgemm is None or not fbgemm_peer.supports(mode, tables[0].dtype, psw is not None):
            return None
        return self.matching_peer(fbgemm_peer.FbgemmForward.mixed(tables, indices, offsets, mode, psw), ours,
                                  tables[0].dtype)

    @staticmethod
    def matching_peer(peer: fbgemm_peer.FbgemmForward, ours: Callable[[], torch.Tensor],
                      dtype: torch.dtype) -> Callable[[], torch.Tensor] | None:
        """``peer`` when its output matches ours, else None (and a note says why)."""
        theirs, mine = peer(), ours()
        tol = 1e-2 if dtype == torch.float16 else 1e-4
        if theirs.shape != mine.shape or not torch.allclose(theirs.float(), mine.float(), rtol=tol, atol=tol):
            print(f"  FBGEMM's output differs from ours (max |diff| "
                  f"{float((theirs.float() - mine.float()).abs().max()):.3g}): not timed", flush=True)
            return None
        return peer

    def pct_of_copy(self, nbytes: int, us: float) -> float:
        """``nbytes`` moved in ``us`` microseconds, as a percentage of this run's copy ceiling."""
        return 100 * nbytes / (us * 1e-6) / 1e9 / self.copy_gbps

    def same_size_copy_us(self, nbytes: int, align: int = COPY_ALIGN) -> float:
        """Median time of a copy that moves copy_bytes(nbytes, align) bytes (half read, half
        written): the buffers grow as needed."""
        half = copy_bytes(nbytes, align) // 2
        if self._copy_buffers is None or self._copy_buffers[0].numel() < half:
            self._copy_buffers = None
            torch.cuda.empty_cache()
            src = torch.randint(1, 255, (half,), dtype=torch.uint8, device=DEV, generator=self.gen)
            self._copy_buffers = (src, torch.empty_like(src))
        src, dst = (t[:half] for t in self._copy_buffers)
        return self.timer.median_us(lambda: dst.copy_(src))

    def bag_case(self, name: str, group: str, weight: torch.Tensor, idx: torch.Tensor,
                 offsets: torch.Tensor | None, mode: str, psw: bool) -> None:
        w = None
        if psw:
            w = torch.rand(idx.shape, generator=self.gen, device=DEV).to(weight.dtype)
        args = dict(mode=mode, per_sample_weights=w, include_last_offset=offsets is not None)
        out_elems = (idx.shape[0] if offsets is None else offsets.numel() - 1) * weight.shape[1]
        with torch.no_grad():
            ours = self.timer.median_us(lambda: rk.embedding_bag(idx, weight, offsets, check_indices=False, **args))
            theirs = self.timer.median_us(lambda: F.embedding_bag(idx, weight, offsets, **args))
            checked = self.timer.median_us(lambda: rk.embedding_bag(idx, weight, offsets, check_indices=CHECK, **args))
            ours_host = host_us(lambda: rk.embedding_bag(idx, weight, offsets, check_indices=False, **args))
            checked_host = host_us(lambda: rk.embedding_bag(idx, weight, offsets, check_indices=CHECK, **args))
            torch_host = host_us(lambda: F.embedding_bag(idx, weight, offsets, **args))
            csr = offsets if offsets is not None else fbgemm_peer.fixed_offsets(idx.shape[0], idx.shape[1], DEV)
            peer = self.fbgemm_call(weight, [0], idx, csr, mode, w,
                                    lambda: rk.embedding_bag(idx, weight, offsets, check_indices=False, **args))
            peer_us = self.timer.median_us(peer) if peer else None
            peer_host = host_us(peer) if peer else None
        comp, logical = bag_bytes(weight, idx, offsets, psw, out_elems)
        self.add(Result(name, group, str(weight.dtype).replace("torch.", ""), mode, psw, ours, theirs, checked,
                        comp, logical, row_bytes=weight.shape[1] * weight.element_size(),
                        ours_host_us=ours_host, ours_check_host_us=checked_host, torch_host_us=torch_host,
                        fbgemm_us=peer_us,
                        fbgemm_host_us=peer_host))

    def variants(self) -> list[tuple[torch.dtype, str, bool]]:
        out = []
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for mode, psw in (("sum", False), ("sum", True), ("mean", False), ("max", False)):
                out.append((dtype, mode, psw))
        return out[:4] if self.quick else out

    # issue 3's acceptance case: pooling 20, dim 128, float32
    def simple(self) -> None:
        weight = table(1_000_000, 128, torch.float32, self.gen)
        for batch in (2048, 16384):
            for layout in ("fixed", "csr"):
                idx, offsets = bag_indices(batch, 20, 1_000_000, 0.0, layout == "csr", self.gen)
                for mode in ("sum", "mean", "max"):
                    self.bag_case(f"0 1Mx128 B{batch} L20 {layout} {mode} f32", "0-simple", weight, idx, offsets,
                                  mode, False)

    # (1) one large table
    def single_table(self) -> None:
        for dtype, mode, psw in self.variants():
            weight = table(5_000_000, 128, dtype, self.gen)
            idx = zipf_indices(2048 * 150, 5_000_000, 0, self.gen).view(2048, 150)
            self.bag_case(f"1 5Mx128 B2048 L150 {mode}{'+psw' if psw else ''} {dtype}".replace("torch.", ""),
                          "1-large", weight, idx, None, mode, psw)

    # (2) 12 tables, per-table launches vs one table-batched launch
    def twelve_tables(self) -> None:
        for alpha in (0.0, 1.05, 1.2):
            for dtype, mode, psw in self.variants():
                self.multi_table(f"2 12x500Kx128 a{alpha}", "2-12tables", [500_000] * 12, 128, 2048,
                                 [150] * 12, alpha, dtype, mode, psw)

    def batch_of(self, tbe: TableBatchedEmbeddingBag, batch: int, pooling: list[int], alpha: float,
                 psw: bool) -> tuple[TableBatch, torch.Tensor | None, list[torch.Tensor], list[torch.Tensor] | None]:
        """A table batch for ``tbe`` (its index check off: inputs are in range), per-sample weights
        when ``psw`` (all, and per table), and the tables' rows."""
        tbe.check_indices = False
        rows = tbe.table_sizes.tolist()
        tb = table_batch(rows, batch, pooling, alpha, self.gen)
        dtype = tbe.table(0).dtype
        w = torch.rand(tb.indices.shape, generator=self.gen, device=DEV).to(dtype) if psw else None
        per_w = None if w is None else list(torch.split(w, [i.numel() for i in tb.per_table]))
        return tb, w, [tbe.table(t).detach() for t in range(len(rows))], per_w

    def multi_table(self, name: str, group: str, rows: list[int], dim: int, batch: int, pooling: list[int],
                    alpha: float, dtype: torch.dtype, mode: str, psw: bool) -> None:
        tbe = TableBatchedEmbeddingBag(rows, dim, mode, dtype, DEV)
        tb, w, tables, per_w = self.batch_of(tbe, batch, pooling, alpha, psw)
        per_idx, per_off, idx, offsets = tb.per_table, tb.per_table_offsets, tb.indices, tb.offsets

        def one_launch() -> torch.Tensor:
            return tbe(idx, offsets, w)

        def torch_per_table() -> list[torch.Tensor]:
            return [F.embedding_bag(i, t, o, mode=mode, include_last_offset=True,
                                    per_sample_weights=None if per_w is None else per_w[k])
                    for k, (i, t, o) in enumerate(zip(per_idx, tables, per_off, strict=False))]

        def ours_per_table() -> list[torch.Tensor]:
            return [rk.embedding_bag(i, t, o, mode=mode, include_last_offset=True, check_indices=False,
                                     per_sample_weights=None if per_w is None else per_w[k])
                    for k, (i, t, o) in enumerate(zip(per_idx, tables, per_off, strict=False))]

        with torch.no_grad():
            theirs = self.timer.median_us(torch_per_table)
            ours_tbe = self.timer.median_us(one_launch)
            ours_loop = self.timer.median_us(ours_per_table)
            starts = tbe.table_rows.tolist()
            peer = self.fbgemm_call(tbe.weight.detach(), starts, idx, offsets, mode, w, one_launch)
            peer_us = self.timer.median_us(peer) if peer else None
        comp, logical = table_batch_bytes(tables, tb, psw, batch)
        label = f"{name} {mode}{'+psw' if psw else ''} {dtype}".replace("torch.", "")
        row = dim * tables[0].element_size()
        self.add(Result(label + " TBE", group, str(dtype)[6:], mode, psw, ours_tbe, theirs, None, comp, logical,
                        row_bytes=row, notes="one launch for all tables vs one torch call per table",
                        fbgemm_us=peer_us))
        self.add(Result(label + " per-table", group, str(dtype)[6:], mode, psw, ours_loop, theirs, None, comp,
                        logical, row_bytes=row, notes="one launch per table (torch too); FBGEMM: one launch",
                        fbgemm_us=peer_us))

    # (3) two big tables
    def two_big_tables(self) -> None:
        for alpha in (1.0, 1.15):
            for dtype in (torch.float32, torch.float16):
                for mode, psw in (("sum", False), ("sum", True), ("mean", False), ("max", False)):
                    rows = 10_000_000 if not self.quick else 2_000_000
                    self.multi_table(f"3 2x{rows // 10**6}Mx192 B65536 L32 a{alpha}", "3-2big", [rows] * 2, 192,
                                     65536, [32, 32], alpha, dtype, mode, psw)

    # (4) sweep
    def sweep(self) -> None:
        weights = {dim: table(1_000_000, dim, torch.float32, self.gen) for dim in (32, 128)}
        for dim in (32, 128):
            for batch in (1024, 32768, 131072):
                for pooling in (1, 16, 64):
                    for alpha in (0.0, 1.05, 1.15):
                        for layout in ("fixed", "csr"):
                            if self.quick and (batch != 32768 or alpha != 0.0):
                                continue
                            idx, offsets = bag_indices(batch, pooling, 1_000_000, alpha, layout == "csr", self.gen)
                            self.bag_case(f"4 d{dim} B{batch} L{pooling} a{alpha} {layout} sum f32", "4-sweep",
                                          weights[dim], idx, offsets, "sum", False)

    # (5) MLPerf DLRM-DCNv2 multi-hot
    def dcnv2(self) -> None:
        rows = [min(r, DCN_ROW_CAP) for r in DCN_ROWS]
        for alpha in (0.0, 1.05, 1.2):
            for dtype, mode, psw in self.variants():
                if alpha and dtype == torch.bfloat16:  # skewed: the dtypes FBGEMM's build has
                    continue
                self.multi_table(f"5 DCNv2 26 tables B6912 a{alpha}", "5-dcnv2", rows, 128, 6912, DCN_POOLING,
                                 alpha, dtype, mode, psw)

    # (7) narrow rows: 8 tables of 1M rows of 32 or 64 columns (DLRM's small embedding dims)
    def narrow(self) -> None:
        for dim in (32, 64):
            for alpha in (0.0, 1.05, 1.2):
                for dtype in (torch.float32, torch.float16):
                    for mode in ("sum", "mean"):
                        if self.quick and (alpha or dtype != torch.float32):
                            continue
                        self.multi_table(f"7 8x1Mx{dim} B16384 L20 a{alpha}", "7-narrow", [1_000_000] * 8, dim,
                                         16384, [20] * 8, alpha, dtype, mode, False)

    # (8) widths nothing was tuned for (issue 37): 4 tables of one width, B8192 L30; and tables of
    # mixed widths in one module against FBGEMM's one launch over mixed D and one module per width
    def widths(self) -> None:
        modes = [("sum", False)] if self.quick else [("sum", False), ("mean", False), ("sum", True)]
        for width in SWEEP_WIDTHS:
            for dtype in (torch.float32, torch.float16):
                rows = min(1_000_000, TABLE_BYTES // (width * dtype.itemsize))
                for alpha in (0.0, 1.05):
                    for mode, psw in modes:
                        self.multi_table(f"8 4x{rows // 1000}Kx{width} B8192 L30 a{alpha}", "8-widths", [rows] * 4,
                                         width, 8192, [30] * 4, alpha, dtype, mode, psw)
        for name, dims in MIXED_WIDTHS.items():
            for dtype in (torch.float32, torch.float16):
                rows = [min(1_000_000, TABLE_BYTES // (d * dtype.itemsize)) for d in dims]
                for alpha in (0.0, 1.05):
                    for mode, psw in modes:
                        self.mixed_table(f"8 {name} B8192 L30 a{alpha}", "8-mixed", rows, dims, 8192,
                                         [30] * len(dims), alpha, dtype, mode, psw)

    def mixed_table(self, name: str, group: str, rows: list[int], dims: list[int], batch: int, pooling: list[int],
                    alpha: float, dtype: torch.dtype, mode: str, psw: bool) -> None:
        """One mixed-width module (one launch per width into one output) against FBGEMM's one
        launch, torch per table, and one uniform module per width whose outputs are joined in
        table order (what mixed widths cost without the module; their inputs are split outside
        the timed call, which favours them)."""
        tbe = TableBatchedEmbeddingBag(rows, dims, mode, dtype, DEV)
        tb, w, tables, per_w = self.batch_of(tbe, batch, pooling, alpha, psw)
        per_idx, per_off, idx, offsets = tb.per_table, tb.per_table_offsets, tb.indices, tb.offsets
        per_width = []
        for members in width_groups(dims):
            module = TableBatchedEmbeddingBag([rows[t] for t in members], dims[members[0]], mode, dtype, DEV)
            module.check_indices = False
            with torch.no_grad():
                for k, t in enumerate(members):
                    module.table(k).copy_(tables[t])
            lengths = torch.tensor([p for t in members for p in [pooling[t]] * batch], device=DEV)
            member_w = None if per_w is None else torch.cat([per_w[t] for t in members])
            per_width.append((module, torch.cat([per_idx[t] for t in members]),
                              torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]), member_w))
        starts = [sum(dims[:t]) for t in range(len(dims))]
        order = [c for members in width_groups(dims) for t in members for c in range(starts[t], starts[t] + dims[t])]
        to_table_order = torch.argsort(torch.tensor(order, device=DEV))

        def one_module() -> torch.Tensor:
            return tbe(idx, offsets, w)

        def module_per_width() -> torch.Tensor:
            return torch.cat([m(i, o, pw) for m, i, o, pw in per_width], 1).index_select(1, to_table_order)

        def torch_per_table() -> list[torch.Tensor]:
            return [F.embedding_bag(i, t, o, mode=mode, include_last_offset=True,
                                    per_sample_weights=None if per_w is None else per_w[k])
                    for k, (i, t, o) in enumerate(zip(per_idx, tables, per_off, strict=False))]

        with torch.no_grad():
            tol = 1e-2 if dtype == torch.float16 else 1e-4  # the same pooling (vectors may differ: alignment)
            assert torch.allclose(one_module().float(), module_per_width().float(), rtol=tol, atol=tol)
            theirs = self.timer.median_us(torch_per_table)
            ours = self.timer.median_us(one_module)
            ours_split = self.timer.median_us(module_per_width)
            ours_host, split_host = host_us(one_module), host_us(module_per_width)
            torch_host = host_us(torch_per_table)
            peer = self.fbgemm_mixed_call(tables, idx, offsets, mode, w, one_module)
            peer_us = self.timer.median_us(peer) if peer else None
            peer_host = host_us(peer) if peer else None
        comp, logical = table_batch_bytes(tables, tb, psw, batch)
        label = f"{name} {mode}{'+psw' if psw else ''} {dtype}".replace("torch.", "")
        widths = len(per_width)
        self.add(Result(label + " mixed", group, str(dtype)[6:], mode, psw, ours, theirs, None, comp, logical,
                        row_bytes=max(dims) * tables[0].element_size(), ours_host_us=ours_host,
                        torch_host_us=torch_host, fbgemm_us=peer_us, fbgemm_host_us=peer_host,
                        notes=f"one module, {widths} launches (one per width) into one output; FBGEMM: one launch"))
        self.add(Result(label + " per-width", group, str(dtype)[6:], mode, psw, ours_split, theirs, None, comp,
                        logical, row_bytes=max(dims) * tables[0].element_size(), ours_host_us=split_host,
                        torch_host_us=torch_host, fbgemm_us=peer_us, fbgemm_host_us=peer_host,
                        notes=f"{widths} one-width modules, outputs joined in table order (cat + column gather)"))

    # (6) unpooled one-hot copy
    def one_hot(self) -> None:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            weight = table(5_000_000, 128, dtype, self.gen)
            idx = zipf_indices(262144, 5_000_000, 0, self.gen)
            with torch.no_grad():
                ours = self.timer.median_us(lambda: rk.embedding(idx, weight, check_indices=False))
                theirs = self.timer.median_us(lambda: F.embedding(idx, weight))
                checked = self.timer.median_us(lambda: rk.embedding(idx, weight, check_indices=CHECK))
            row = 128 * weight.element_size()
            unique = int(torch.unique(idx).numel())
            extra = idx.numel() * (8 + row)
            self.add(Result(f"6 one-hot gather 5Mx128 N262144 {dtype}".replace("torch.", ""), "6-onehot",
                            str(dtype)[6:], "gather", False, ours, theirs, checked, unique * row + extra,
                            idx.numel() * row + extra, row_bytes=row))

    # backward on (1) and (3)
    def backward(self) -> None:
        cases = [("1 bwd 5Mx128 B2048 L150", 5_000_000, 128, 2048, 150, 0.0)]
        cases += [(f"3 bwd 10Mx192 B65536 L32 a{a}", 10_000_000, 192, 65536, 32, a) for a in (1.0, 1.15)]
        for name, rows, dim, batch, pooling, alpha in cases[:1] if self.quick else cases:
            for mode in ("sum", "mean"):
                weight = table(rows, dim, torch.float32, self.gen).requires_grad_(True)
                idx = zipf_indices(batch * pooling, rows, alpha, self.gen).view(batch, pooling)
                grad = torch.randn(batch, dim, generator=self.gen, device=DEV)
                out_ours = rk.embedding_bag(idx, weight, mode=mode, check_indices=False)
                out_torch = F.embedding_bag(idx, weight, mode=mode)
                ours = self.timer.median_us(lambda: torch.autograd.grad(out_ours, weight, grad, retain_graph=True))
                theirs = self.timer.median_us(lambda: torch.autograd.grad(out_torch, weight, grad, retain_graph=True))
                row = dim * 4
                comp = idx.numel() * 8 + grad.numel() * 4 + rows * row  # the dense gradient is written once
                self.add(Result(f"{name} {mode} float32 backward", "bwd", "float32", mode, False, ours, theirs,
                                None, comp, comp + idx.numel() * row, row_bytes=row,
                                notes="dense grad: compulsory = indices + grad_out + whole grad table"))


def tune(suite: Suite) -> None:
    """Forward-kernel variants on a few shapes (compile-time overrides, reference_kernels.tuning)."""
    shapes = [("5Mx128 B2048 L150 f32 sum", 5_000_000, 128, torch.float32, 2048, 150, "sum"),
              ("5Mx128 B2048 L150 f32 mean", 5_000_000, 128, torch.float32, 2048, 150, "mean"),
              ("5Mx128 B2048 L150 f32 max", 5_000_000, 128, torch.float32, 2048, 150, "max"),
              ("5Mx128 B2048 L150 bf16 sum", 5_000_000, 128, torch.bfloat16, 2048, 150, "sum"),
              ("1Mx32 B32768 L16 f32 sum", 1_000_000, 32, torch.float32, 32768, 16, "sum"),
              ("10Mx192 B65536 L32 f32 sum", 10_000_000, 192, torch.float32, 65536, 32, "sum"),
              ("10Mx192 B65536 L32 f16 sum", 10_000_000, 192, torch.float16, 65536, 32, "sum"),
              ("10Mx192 B65536 L32 bf16 sum", 10_000_000, 192, torch.bfloat16, 65536, 32, "sum")]
    specs = ["", "MIN_BLOCKS=1", "UNROLL=8", "ROW_LANES=32,CHUNKS=1,TEAM=32,UNROLL=16", "MIN_BLOCKS=3"]
    for name, rows, dim, dtype, batch, pooling, mode in shapes:
        weight = table(rows, dim, dtype, suite.gen)
        idx = zipf_indices(batch * pooling, rows, 0.0, suite.gen).view(batch, pooling)
        comp, _ = bag_bytes(weight, idx, None, False, batch * dim)
        with torch.no_grad():
            theirs = suite.timer.median_us(lambda: F.embedding_bag(idx, weight, mode=mode))
            line = [f"{name:28s} torch {theirs:8.1f}"]
            for spec in specs:
                if "ROW_LANES" in spec and dim != 192:
                    continue
                with tuned(overrides=overrides_from_spec(spec)):
                    us = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, mode=mode, check_indices=False))
                pct = 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps
                line.append(f"{spec or 'default'}: {us:.1f}us {pct:.0f}%")
            if mode == "sum" and dtype == torch.float32:
                # Isolating variants: the same rows in sorted order (DRAM locality), and the same
                # rows copied by the unpooled gather (no reduction; writes every row once).
                ordered = idx.view(-1).sort().values.view(batch, pooling)
                us = suite.timer.median_us(lambda: rk.embedding_bag(ordered, weight, mode="sum", check_indices=False))
                line.append(f"sorted idx: {us:.1f}us {100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps:.0f}%")
                flat = idx.view(-1)
                us = suite.timer.median_us(lambda: rk.embedding(flat, weight, check_indices=False))
                gathered = comp + (flat.numel() - batch) * dim * weight.element_size()
                line.append(f"gather same rows: {us:.1f}us {100 * gathered / (us * 1e-6) / 1e9 / suite.copy_gbps:.0f}%")
        print(" | ".join(line), flush=True)
    for variant, (regs, local) in diagnostics.compile_stats().resources.items():
        if "forward" in variant:
            print(f"registers {regs:3d} local {local:3d} B  {variant}")


def profile_cases(suite: Suite) -> None:
    """A few calls of suite (1) in float32 and bfloat16, for Nsight Compute (ncu) to capture."""
    for dtype in (torch.float32, torch.bfloat16):
        weight = table(5_000_000, 128, dtype, suite.gen)
        idx = zipf_indices(2048 * 150, 5_000_000, 0.0, suite.gen).view(2048, 150)
        for _ in range(2):
            suite.timer.evict_l2()
            rk.embedding_bag(idx, weight, mode="sum", check_indices=False)
        torch.cuda.synchronize()


def probe(suite: Suite) -> None:
    """Side-by-side evidence for docs/perf/: the same calls timed after a dirty and after a
    clean L2 flush, the smallest launch (the timing floor), tuning variants, a bag kernel given
    32x more bags, and the parts of the suite-1 backward."""
    clean = suite.timer
    dirty = Timer(clean.reps, flush_mode="dirty", flush=clean.flush)
    gb = suite.copy_gbps

    def pct(nbytes: int, us: float) -> float:
        return 100 * nbytes / (us * 1e-6) / 1e9 / gb

    def both(label: str, fn: Callable[[], object], nbytes: int, logical: int = 0) -> None:
        d, c = dirty.median_us(fn), clean.median_us(fn)
        extra = f"  logical: dirty {pct(logical, d):5.1f}%, clean {pct(logical, c):5.1f}%" if logical else ""
        print(f"probe {label:44s} dirty {d:8.1f} us ({pct(nbytes, d):5.1f}%)  clean {c:8.1f} us "
              f"({pct(nbytes, c):5.1f}%)  delta {d - c:6.1f} us{extra}", flush=True)

    src = torch.randn(1 << 28, device=DEV)  # 1 GiB
    dst = torch.empty_like(src)
    both("copy 1 GiB", lambda: dst.copy_(src), 2 << 30)  # noqa: F821  (timed before the del below)
    del src, dst
    for dtype in (torch.float32, torch.bfloat16):
        weight = table(5_000_000, 128, dtype, suite.gen)
        idx = zipf_indices(2048 * 150, 5_000_000, 0, suite.gen).view(2048, 150)
        comp, _ = bag_bytes(weight, idx, None, False, 2048 * 128)
        name = str(dtype)[6:]
        with torch.no_grad():
            both(f"suite1 sum {name} ours", lambda: rk.embedding_bag(idx, weight, check_indices=False), comp)
            both(f"suite1 sum {name} torch", lambda: F.embedding_bag(idx, weight), comp)
            for spec in ("UNROLL=8", "UNROLL=4", "MIN_BLOCKS=1"):
                with tuned(overrides=overrides_from_spec(spec)):
                    us = clean.median_us(lambda: rk.embedding_bag(idx, weight, check_indices=False))
                print(f"probe suite1 sum {name} ours {spec:16s} clean {us:8.1f} us ({pct(comp, us):5.1f}%)",
                      flush=True)
            flat = idx.view(-1)[:262144]
            gathered = int(torch.unique(flat).numel()) * 128 * weight.element_size() + flat.numel() * (
                8 + 128 * weight.element_size())
            both(f"one-hot 262144 {name} ours", lambda: rk.embedding(flat, weight, check_indices=False), gathered)
            both(f"one-hot 262144 {name} torch", lambda: F.embedding(flat, weight), gathered)
            if dtype == torch.float32:
                one = flat[:1]
                both("floor: two events, nothing between", lambda: None, 0)
                both("floor: an empty kernel (sleep 0)", lambda: torch.cuda._sleep(0), 0)
                both("floor: ours gather of 1 row", lambda: rk.embedding(one, weight, check_indices=False), 0)
                both("floor: torch gather of 1 row", lambda: F.embedding(one, weight), 0)
                many = zipf_indices(65536 * 150, 5_000_000, 0, suite.gen).view(65536, 150)
                comp_many, logical_many = bag_bytes(weight, many, None, False, 65536 * 128)
                both("B65536 L150 sum f32 ours", lambda: rk.embedding_bag(many, weight, check_indices=False),
                     comp_many, logical_many)
                del many
        del weight
        torch.cuda.empty_cache()
    # suite-1 backward, piece by piece
    weight = table(5_000_000, 128, torch.float32, suite.gen).requires_grad_(True)
    idx = zipf_indices(2048 * 150, 5_000_000, 0, suite.gen).view(2048, 150)
    grad = torch.randn(2048, 128, generator=suite.gen, device=DEV)
    dense = 5_000_000 * 128 * 4
    both("bwd part: torch.zeros of the 5Mx128 grad", lambda: torch.zeros(5_000_000, 128, device=DEV), dense)
    buf = torch.empty(5_000_000, 128, device=DEV)
    both("bwd part: zero_() of an existing 5Mx128", lambda: buf.zero_(), dense)  # noqa: F821  (before the del)
    both("bwd part: stable sort of 307200 indices", lambda: torch.sort(idx.view(-1), stable=True), 0)
    rows = idx.view(-1)
    out_ours = rk.embedding_bag(idx, weight, check_indices=False)
    for blocks in (2, 4, 16):
        with tuned(fill_blocks_per_sm=blocks):
            both(f"bwd ours, fill {blocks} blocks/SM", lambda: torch.autograd.grad(out_ours, weight, grad,
                                                                                   retain_graph=True), dense)
    del buf, rows
    out_torch = F.embedding_bag(idx, weight)
    both("bwd ours", lambda: torch.autograd.grad(out_ours, weight, grad, retain_graph=True), dense)
    with tuned(overlap_zero_fill=False):
        both("bwd ours, memset then the passes (no overlap)", lambda: torch.autograd.grad(out_ours, weight, grad,
                                                                                retain_graph=True), dense)
    both("bwd torch", lambda: torch.autograd.grad(out_torch, weight, grad, retain_graph=True), dense)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(results: list[Result], copy_gbps: float) -> dict[str, object]:
    by_group: dict[str, list[float]] = {}
    for r in results:
        by_group.setdefault(r.group, []).append(r.speedup)
    uniform = [r for r in results if " a0.0" in r.case or r.group in ("1-large", "6-onehot")]
    return {
        "copy_ceiling_gbps": copy_gbps,
        "geomean_speedup": geomean([r.speedup for r in results]),
        "geomean_speedup_by_group": {g: geomean(v) for g, v in by_group.items()},
        "slower_than_torch": [r.case for r in results if r.speedup < 1.0],
        **peer_summary(results),
        **host_summary(results),
        "uniform_pct_copy_256B_plus": [round(r.pct_copy, 1) for r in uniform
                                       if r.row_bytes >= 256 and r.mode != "gather"],
        "uniform_pct_copy_64_128B": [round(r.pct_copy, 1) for r in uniform if 64 <= r.row_bytes <= 128],
        "targets": {
            "rows_256B_plus_at_90pct": target_report([r for r in uniform if r.row_bytes >= 256], 90.0),
            "rows_64_128B_at_75pct": target_report([r for r in uniform if 64 <= r.row_bytes <= 128], 75.0),
        },
    }


def peer_summary(results: list[Result]) -> dict[str, object]:
    """Ours against FBGEMM over the cases it has: geomean, worst, the cases where it is faster.
    The "per-table" lines (ours one launch per table) are left out: FBGEMM's figure is its one
    launch, which our "TBE" line of the same case meets."""
    paired = [r for r in results if r.vs_fbgemm is not None and not r.case.endswith(" per-table")]
    if not paired:
        return {"vs_fbgemm": None}
    worst = min(paired, key=lambda r: r.vs_fbgemm or 0.0)
    return {"vs_fbgemm": {"cases": len(paired), "geomean": geomean([r.vs_fbgemm or 0.0 for r in paired]),
                          "worst": worst.vs_fbgemm, "worst_case": worst.case,
                          "slower_than_fbgemm": [r.case for r in paired if (r.vs_fbgemm or 0.0) < 1.0]}}


def host_summary(results: list[Result]) -> dict[str, object]:
    """Host time per eager call against torch's (the single-call cases that measure it): the
    median and worst ratio, without and with the default index check."""
    timed = [r for r in results if r.ours_host_us and r.torch_host_us]
    if not timed:
        return {"host_vs_torch": None}
    plain = sorted((r.ours_host_us or 0.0) / (r.torch_host_us or 1.0) for r in timed)
    checked = sorted((r.ours_check_host_us or 0.0) / (r.torch_host_us or 1.0) for r in timed if r.ours_check_host_us)
    return {"host_vs_torch": {
        "cases": len(timed), "median_ours_us": statistics.median(r.ours_host_us or 0.0 for r in timed),
        "median_torch_us": statistics.median(r.torch_host_us or 0.0 for r in timed),
        "ratio_median": statistics.median(plain), "ratio_worst": plain[-1],
        "with_check_ratio_median": statistics.median(checked) if checked else None,
        "with_check_ratio_worst": checked[-1] if checked else None}}


REREAD = 1.10  # reuse (logical / compulsory bytes) from which a case's DRAM traffic exceeds its compulsory bytes


def miss_cause(r: Result, target: float) -> str:
    """Why a case misses a bandwidth target: "size" (a copy of the case's own compulsory bytes
    falls short too: no kernel moving those bytes can meet it), "reuse" (the case re-reads rows:
    a table far larger than the L2 fetches a re-read row again, so DRAM moves more than the
    compulsory bytes), else "kernel" (the kernel's own gap)."""
    if (r.same_size_copy_pct or 0) < target:
        return "size"
    return "reuse" if r.reuse >= REREAD else "kernel"


def target_report(results: list[Result], target: float) -> dict[str, object]:
    """A bandwidth target against each case; the missed ones grouped by miss_cause."""
    causes = {r.case: miss_cause(r, target) for r in results if r.pct_copy < target}
    return {
        "target_pct": target, "cases": len(results), "met": [r.case for r in results if r.pct_copy >= target],
        "missed_same_size_copy_also_below": [c for c, why in causes.items() if why == "size"],
        "missed_rows_re_read": [c for c, why in causes.items() if why == "reuse"],
        "missed_kernel_gap": [c for c, why in causes.items() if why == "kernel"],
        "figures": [{"case": r.case, "pct_copy": round(r.pct_copy, 1), "reuse": round(r.reuse, 2),
                     "same_size_copy_pct": None if r.same_size_copy_pct is None else round(r.same_size_copy_pct, 1)}
                    for r in results],
    }


def environment() -> dict[str, object]:
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # nvidia-smi absent: record that, do not fail the run
        driver = "unknown"
    return {"gpu": props.name, "sm_count": props.multi_processor_count, "driver": driver,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "nvrtc": list(diagnostics.nvrtc_version()), "time": time.strftime("%Y-%m-%d %H:%M:%S")}


GROUPS = ("simple", "large", "tables", "big", "sweep", "dcnv2", "narrow", "onehot", "backward", "widths")
EXTRAS = ("tune", "profile", "probe")  # side-by-side evidence: printed, no results


class WorkerError(RuntimeError):
    """A group's worker process failed or wrote no results."""


def compile_seconds() -> dict[str, float]:
    """NVRTC compile (on a cache miss) plus module load time per kernel variant, this process."""
    stats = diagnostics.compile_stats()
    return {k: stats.compile_s.get(k, 0.0) + v for k, v in stats.load_s.items()}


def run_groups(args: argparse.Namespace, chosen: list[str]) -> tuple[list[Result], float]:
    """Run the chosen groups in this process: their results and this process's copy ceiling."""
    suite = Suite(args.reps, args.quick, args.seed, args.flush, fbgemm_peer.locate(args.fbgemm))
    steps = {"simple": suite.simple, "large": suite.single_table, "tables": suite.twelve_tables,
             "big": suite.two_big_tables,
             "sweep": suite.sweep, "dcnv2": suite.dcnv2, "narrow": suite.narrow, "onehot": suite.one_hot,
             "backward": suite.backward, "widths": suite.widths,
             "tune": lambda: tune(suite), "profile": lambda: profile_cases(suite), "probe": lambda: probe(suite)}
    for name in chosen:
        steps[name]()
        torch.cuda.empty_cache()
    return suite.results, suite.copy_gbps


def worker_command(args: argparse.Namespace, group: str, out: str) -> list[str]:
    """The command that runs one group in a fresh process and writes its results to ``out``."""
    return [sys.executable, "-m", "benchmarks.harness", "--worker", out, "--only", group, "--reps", str(args.reps),
            "--seed", str(args.seed), "--flush", args.flush] + (["--quick"] if args.quick else []) + (
            ["--fbgemm", args.fbgemm] if args.fbgemm else [])


def run_isolated(args: argparse.Namespace, chosen: list[str],
                 runner: Callable[[list[str]], int] = lambda cmd: subprocess.run(cmd).returncode,
                 ) -> tuple[list[Result], dict[str, float], dict[str, float]]:
    """Run each group in its own process (``runner`` runs a command, returns its exit code):
    a case's figure must not depend on what earlier groups allocated and freed (the one-hot
    f32 gather ran 8 % slower after the big-table groups, docs/perf/change-28.md).
    Returns the results, each process's copy ceiling and the compile + load seconds."""
    results: list[Result] = []
    ceilings: dict[str, float] = {}
    compiles: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rk-bench-") as tmp:
        for group in chosen:
            out = str(Path(tmp) / f"{group}.json")
            code = runner(worker_command(args, group, out))
            if code != 0:
                raise WorkerError(f"group {group!r}: its worker process exited with {code}")
            try:
                data = json.loads(Path(out).read_text())
                ceilings[group] = float(data["copy_ceiling_gbps"])
                results += [Result(**r) for r in data["results"]]
                compiles.update(data["compile_plus_load_s"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise WorkerError(f"group {group!r}: unreadable worker output {out}: {exc}") from exc
    return results, ceilings, compiles


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="where to write every figure (JSON); required")
    p.add_argument("--charts", help="folder for the charts (PNGs and README.md, benchmarks/charts.py); required")
    p.add_argument("--reps", type=int, default=100, help="timed calls per figure (median; at least 100)")
    p.add_argument("--quick", action="store_true", help="a small subset (smoke test)")
    p.add_argument("--only", default="",
                   help=f"comma-separated groups: {','.join(GROUPS)} (default: all); also {', '.join(EXTRAS)}")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--fbgemm", help=f"FBGEMM's forward library directory (default ${fbgemm_peer.ENV_DIR}; the "
                                    "fbgemm_gpu package is used when installed)")
    p.add_argument("--flush", choices=("clean", "dirty"), default="clean",
                   help="how the L2 is emptied before each timed call (see above)")
    p.add_argument("--one-process", action="store_true",
                   help="run every group in this process instead of one fresh process per group")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run --only here, write results to this file
    args = p.parse_args(argv)
    if not args.worker and not (args.json and args.charts):
        p.error("--json and --charts are required")
    chosen = [s for s in args.only.split(",") if s] or list(GROUPS)
    unknown = [s for s in chosen if s not in GROUPS + EXTRAS]
    if unknown:
        p.error(f"unknown group(s) in --only: {', '.join(unknown)}")
    if args.reps < 100 and not args.quick:
        p.error("--reps must be at least 100 (use --quick for a smoke test)")
    if not torch.cuda.is_available():
        print("benchmarks suite needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        peer = fbgemm_peer.locate(args.fbgemm)
    except fbgemm_peer.PeerError as exc:  # named but unusable: say so rather than time without it
        print(f"benchmarks suite: {exc}", file=sys.stderr)
        return 2
    if not args.worker:
        print(f"FBGEMM: {peer.origin if peer.available else 'not available: ' + peer.reason}", flush=True)
        if peer.available and Path(peer.origin).is_dir():
            args.fbgemm = peer.origin  # the workers load what this process unpacked
    t0 = time.perf_counter()
    if args.worker:
        results, gbps = run_groups(args, chosen)
        Path(args.worker).write_text(json.dumps({"copy_ceiling_gbps": gbps, "results": [asdict(r) for r in results],
                                                 "compile_plus_load_s": compile_seconds()}))
        return 0
    if args.one_process:
        results, gbps = run_groups(args, chosen)
        ceilings, compiles = {"all groups": gbps}, compile_seconds()
    else:
        try:
            results, ceilings, compiles = run_isolated(args, chosen)
        except WorkerError as exc:
            print(f"benchmarks suite: {exc}", file=sys.stderr)
            return 1
        gbps = statistics.median(ceilings.values())
    if not results:
        return 0
    forward = [r for r in results if r.group != "bwd"]
    info = summary(forward, gbps)
    info["copy_ceiling_gbps_per_process"] = ceilings
    info["fbgemm"] = {"available": peer.available, "origin": peer.origin, "reason": peer.reason}
    info["backward_speedups"] = {r.case: round(r.speedup, 2) for r in results if r.group == "bwd"}
    info["seconds"] = time.perf_counter() - t0
    info["compile_plus_load_s"] = compiles
    with open(args.json, "w") as f:
        json.dump({"environment": environment(), "method": __doc__, "summary": info,
                   "results": [asdict(r) for r in results]}, f, indent=1)
    from benchmarks.charts import ChartInputError, chart_file  # matplotlib only here, after the GPU work

    try:
        chart_file(Path(args.json), Path(args.charts))
    except ChartInputError as exc:  # the figures are in the JSON: render again with `benchmarks charts`
        print(f"benchmarks suite: no charts: {exc}", file=sys.stderr)
    shown = {k: v for k, v in info.items() if k != "compile_plus_load_s"}
    shown["targets"] = {name: {k: v for k, v in t.items() if k != "figures"}  # type: ignore[union-attr]
                        for name, t in info["targets"].items()}  # type: ignore[union-attr]
    print(json.dumps(shown, indent=1))
    if compiles:
        print(f"compile+load per kernel: max {max(compiles.values()):.3f} s, median "
              f"{statistics.median(compiles.values()):.3f} s, {len(compiles)} variants")
    return 0


if __name__ == "__main__":
    sys.exit(main())
