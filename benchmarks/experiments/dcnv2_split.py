"""Where DCNv2's table-batched call spends its time (device diagnostics for docs/perf/change-42.md).

The MLPerf DCNv2 layout (26 tables, pooling 1-100, B 6912, d128) runs in one launch of the
segmented kernel (change 27): every table's bags are walked as streams of positions, 4
vectors in flight per lane (SEGMENT_VECTORS). With its re-reads made cache hits (change 38:
sorted indices) it reached 77.7 % of the copy ceiling against a same-size copy's 98.9 %, so
the kernel is part of its miss. Half of its bytes are one table's (pooling 100, 354 of 757
MB), which the segmented kernel walks one bag per team with 4 rows in flight per lane,
where the general kernel keeps 16.

Side by side, median of 100 cold calls, each output checked against torch first:

* the whole call with SEGMENT_VECTORS 4 (the package), 8 and 16;
* its long tables (pooling > 8: 5 tables, 2/3 of the bytes) alone, in the general kernel
  (the package's pick for that subset) and forced into the segmented kernel, and its
  short tables (21, pooling <= 8) alone: if long + short in two launches beat the one
  launch, a split pays.

``--f32`` instead times float32 choices side by side (alternately, twice): SEGMENT_ROWS 32 or
64 (64 had won on float32 DCNv2 and lost on bfloat16 in runs 29-33) against SEGMENT_VECTORS 4
or 8, on DCNv2 in one launch and one launch per table, in every mode, and on one table's CSR
bags of 2, 4 and 8 rows and of 0-8 rows (d128, B131072).

Percentages are of the copy ceiling measured in the same run, in compulsory bytes."""
import sys
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F

from benchmarks.harness import (
    DCN_POOLING,
    DCN_ROW_CAP,
    DCN_ROWS,
    Suite,
    table_batch,
    table_batch_bytes,
)
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import Tuning, tuned

DEV = "cuda"
BATCH = 6912
ROWS = [min(r, DCN_ROW_CAP) for r in DCN_ROWS]


def tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 2e-2


class Call:
    """One table-batched call over a subset of DCNv2's tables, with its torch reference."""

    def __init__(self, suite: Suite, tables: list[int], dtype: torch.dtype, mode: str, psw: bool) -> None:
        rows, pooling = [ROWS[t] for t in tables], [DCN_POOLING[t] for t in tables]
        self.tbe = TableBatchedEmbeddingBag(rows, 128, mode, dtype, DEV)
        self.tbe.check_indices = False
        self.tb = table_batch(rows, BATCH, pooling, 0.0, suite.gen)
        self.w = torch.rand(self.tb.indices.shape, generator=suite.gen, device=DEV).to(dtype) if psw else None
        weights = [self.tbe.table(t).detach() for t in range(len(rows))]
        per_w = None if self.w is None else torch.split(self.w, [i.numel() for i in self.tb.per_table])
        with torch.no_grad():
            self.expected = torch.cat([
                F.embedding_bag(i, t, o, mode=mode, include_last_offset=True,
                                per_sample_weights=None if per_w is None else per_w[k])
                for k, (i, t, o) in enumerate(zip(self.tb.per_table, weights, self.tb.per_table_offsets,
                                                  strict=False))], dim=1)
        self.comp, _ = table_batch_bytes(weights, self.tb, psw, BATCH)
        self.tol = tolerance(dtype)

    def __call__(self) -> torch.Tensor:
        with torch.no_grad():
            return self.tbe(self.tb.indices, self.tb.offsets, self.w)

    def timed(self, suite: Suite) -> float:
        torch.testing.assert_close(self(), self.expected, rtol=self.tol, atol=self.tol)
        return suite.timer.median_us(self)


def vectors(suite: Suite, dtype: torch.dtype, mode: str, psw: bool) -> None:
    call = Call(suite, list(range(len(ROWS))), dtype, mode, psw)
    times: dict[int, list[float]] = {v: [] for v in (4, 8, 16)}
    for _ in range(2):
        for v in (4, 8, 16):
            with tuned(segment_vectors=v):
                times[v].append(call.timed(suite))
    cells = [f"vectors {v}: {min(t):6.1f} us {suite.pct_of_copy(call.comp, min(t)):5.1f}%" for v, t in times.items()]
    print(f"DCNv2 TBE {str(dtype)[6:]} {mode}{'+psw' if psw else ''}: " + " | ".join(cells), flush=True)


def split(suite: Suite, dtype: torch.dtype) -> None:
    long = [t for t, p in enumerate(DCN_POOLING) if p > 8]
    short = [t for t, p in enumerate(DCN_POOLING) if p <= 8]
    whole, long_call, short_call = (Call(suite, ts, dtype, "sum", False) for ts in (list(range(26)), long, short))
    t_whole = whole.timed(suite)
    t_long = long_call.timed(suite)
    with tuned(segment_max_avg=1000):  # the long tables' average (27) through the segmented kernel too
        t_long_seg = long_call.timed(suite)
    t_short = short_call.timed(suite)
    print(f"DCNv2 {str(dtype)[6:]} sum: whole {t_whole:6.1f} us {suite.pct_of_copy(whole.comp, t_whole):5.1f}% | "
          f"long tables {long} general {t_long:6.1f} us {suite.pct_of_copy(long_call.comp, t_long):5.1f}%, "
          f"segmented {t_long_seg:6.1f} us {suite.pct_of_copy(long_call.comp, t_long_seg):5.1f}% | "
          f"short tables {t_short:6.1f} us {suite.pct_of_copy(short_call.comp, t_short):5.1f}% | "
          f"long + short {t_long + t_short:6.1f} us", flush=True)


CHOICES = [(32, 4), (32, 8), (64, 4), (64, 8)]  # (rows per segment, vectors in flight)


def choose(rows: int, vectors: int) -> AbstractContextManager[Tuning]:
    """Segments of ``rows`` rows' worth of bags (whatever the row type), ``vectors`` in flight."""
    return tuned(segment_rows=rows, segment_rows_f32=rows, segment_vectors=vectors)


def side_by_side(suite: Suite, label: str, comp: int, fn, check) -> None:  # type: ignore[no-untyped-def]
    times: dict[tuple[int, int], list[float]] = {c: [] for c in CHOICES}
    for c in CHOICES:
        with choose(*c):
            check()
    for _ in range(2):
        for c in CHOICES:
            with choose(*c):
                times[c].append(suite.timer.median_us(fn))
    cells = [f"rows {r} vec {v}: {min(t):6.1f} us {suite.pct_of_copy(comp, min(t)):5.1f}%"
             for (r, v), t in times.items()]
    print(f"{label:36s} " + " | ".join(cells), flush=True)


def f32_choices(suite: Suite) -> None:
    import reference_kernels as rk

    for mode, psw in (("sum", False), ("max", False), ("mean", False), ("sum", True)):
        call = Call(suite, list(range(len(ROWS))), torch.float32, mode, psw)
        label = f"DCNv2 TBE f32 {mode}{'+psw' if psw else ''}"
        side_by_side(suite, label, call.comp, call,
                     lambda c=call: torch.testing.assert_close(c(), c.expected, rtol=c.tol, atol=c.tol))
        weights = [call.tbe.table(t).detach() for t in range(len(ROWS))]
        per_w = None if call.w is None else torch.split(call.w, [i.numel() for i in call.tb.per_table])

        def per_table(c: Call = call, ws: list = weights, pw=per_w, m: str = mode) -> list:  # type: ignore[no-untyped-def]
            with torch.no_grad():
                return [rk.embedding_bag(i, t, o, mode=m, include_last_offset=True, check_indices=False,
                                         per_sample_weights=None if pw is None else pw[k])
                        for k, (i, t, o) in enumerate(zip(c.tb.per_table, ws, c.tb.per_table_offsets, strict=False))]

        side_by_side(suite, label.replace("TBE", "per-table"), call.comp, per_table,
                     lambda c=call, f=per_table: torch.testing.assert_close(torch.cat(f(), dim=1), c.expected,
                                                                            rtol=c.tol, atol=c.tol))
        del call, weights
        torch.cuda.empty_cache()
    weight = torch.randn(1_000_000, 128, device=DEV, generator=suite.gen)
    for label, lengths in (("L2", torch.full((131072,), 2)), ("L4", torch.full((131072,), 4)),
                           ("L8", torch.full((131072,), 8)), ("L0-8", torch.randint(0, 9, (131072,)))):
        lengths = lengths.to(DEV)
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        idx = torch.randint(0, weight.shape[0], (int(offsets[-1]),), device=DEV, generator=suite.gen)
        for mode in ("sum", "max"):
            expected = F.embedding_bag(idx, weight, offsets, mode=mode, include_last_offset=True)

            def one(i=idx, o=offsets, m=mode) -> torch.Tensor:  # type: ignore[no-untyped-def]
                with torch.no_grad():
                    return rk.embedding_bag(i, weight, o, mode=m, include_last_offset=True, check_indices=False)

            comp = int(torch.unique(idx).numel()) * 512 + idx.numel() * 8 + offsets.numel() * 8 + 131072 * 512
            side_by_side(suite, f"1Mx128 f32 B131072 CSR {label} {mode}", comp, one,
                         lambda f=one, e=expected: torch.testing.assert_close(f(), e, rtol=1e-4, atol=1e-4))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    suite = Suite(reps=100, quick=False, seed=42)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s; % of copy in compulsory bytes", flush=True)
    if "--f32" in args:
        f32_choices(suite)
        return
    for dtype, mode, psw in ((torch.float32, "sum", False), (torch.float32, "mean", False),
                             (torch.float32, "sum", True), (torch.float32, "max", False),
                             (torch.bfloat16, "sum", False), (torch.float16, "mean", False)):
        vectors(suite, dtype, mode, psw)
        torch.cuda.empty_cache()
    for dtype in (torch.float32, torch.bfloat16):
        split(suite, dtype)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
