"""Timeline of the suite-1 backward's pieces on two streams (device diagnostics for
docs/perf-log.md; results in reference_kernels/results/h200-run17-backward-timeline.txt).

Event timestamps (us from the op's start) around the zero fill (on its stream), the sort
and the end of the op, for the fill overlapped or not, per fill grid size, and on a
high-priority caller stream; then the sort alone with int64 and int32 keys; then each of
the two passes alone (after the sort, on a zeroed gradient) and the whole op, per chunk
length, rows in flight, occupancy floor and store kind of the chunk kernel."""
from typing import Any, Callable

import torch

from reference_kernels import _launch

gen = torch.Generator(device="cuda").manual_seed(5)
ROWS, DIM = 5_000_000, 128
idx = torch.randint(0, ROWS, (2048, 150), device="cuda", generator=gen)
grad = torch.randn(2048, DIM, device="cuda", generator=gen)
flush = torch.ones(128 << 20, device="cuda")
sink = torch.empty((), device="cuda")
marks: dict[str, torch.cuda.Event] = {}


def ev(name: str) -> None:
    e = torch.cuda.Event(enable_timing=True)
    e.record()  # on the current stream
    marks[name] = e


def us(name: str) -> float:
    return marks["start"].elapsed_time(marks[name]) * 1e3


def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn with events before and after it, named after it."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ev(fn.__name__ + "0")
        out = fn(*args, **kwargs)
        ev(fn.__name__ + "1")
        return out
    return wrapper


def backward(stream: "torch.cuda.Stream | None" = None) -> None:
    """Three cold runs of the op (the last one's events remain), optionally on `stream`."""
    for _ in range(3):
        marks.clear()
        torch.sum(flush, dim=0, out=sink)
        torch.cuda._sleep(1_000_000)
        ev("start")
        caller = stream or torch.cuda.current_stream()
        caller.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(caller):
            _launch.bag_backward(grad, idx, None, 150, ROWS, None, None, -1)
        torch.cuda.current_stream().wait_stream(caller)
        ev("end")
        torch.cuda.synchronize()


def report(label: str) -> None:
    fill = (f"fill {us('_zero_untouched_rows0'):.0f}-{us('_zero_untouched_rows1'):.0f} us"
            if "_zero_untouched_rows0" in marks else "memset path")
    print(f"{label}: {fill}, sort {us('sort0'):.0f}-{us('sort1'):.0f} us, end {us('end'):.0f} us")


real_sort = torch.sort
torch.sort = timed(real_sort)
_launch._zero_untouched_rows = timed(_launch._zero_untouched_rows)
_launch.OVERLAP_MAX_LOOKUPS_PER_ROW = 1.0  # suite 1 takes the overlapped path either way
for overlap in (True, False):
    _launch.OVERLAP_ZERO_FILL = overlap
    backward()
    report(f"overlap={overlap}")
_launch.OVERLAP_ZERO_FILL = True
for blocks in (4, 16):
    _launch.FILL_BLOCKS_PER_SM = blocks
    backward()
    report(f"blocks/SM={blocks}")
    backward(torch.cuda.Stream(priority=-1))
    report(f"high-priority caller stream, blocks/SM={blocks}")
torch.sort = real_sort
for name, keys in (("int64", idx.reshape(-1)), ("int32", idx.reshape(-1).to(torch.int32))):
    for _ in range(3):
        torch.sum(flush, dim=0, out=sink)
        ev("start")
        torch.sort(keys, stable=True)
        ev("end")
        torch.cuda.synchronize()
    print(f"sort alone, {name} keys: {us('end'):.0f} us")


def passes_alone(reps: int = 20) -> tuple[float, float]:
    """Medians of the chunk kernel and of the combine kernel alone, L2 flushed, given the
    sorted positions (events after each launch)."""
    flat = idx.reshape(-1)
    rows, positions = _launch.sort_by_row(flat, ROWS)
    grad_weight = torch.zeros(ROWS, DIM, device="cuda")
    launch_on = _launch._launch_on
    stamps: list[torch.cuda.Event] = []

    def launch_and_stamp(*args: Any) -> None:
        launch_on(*args)
        stamps.append(torch.cuda.Event(enable_timing=True))
        stamps[-1].record()

    _launch._launch_on = launch_and_stamp
    chunk, combine = [], []
    for _ in range(reps):
        torch.sum(flush, dim=0, out=sink)
        torch.cuda._sleep(200_000)
        stamps.clear()
        stamps.append(torch.cuda.Event(enable_timing=True))
        stamps[0].record()
        _launch.backward_passes(grad, rows, positions, None, 150, None, None, -1, 1.0, grad_weight)
        torch.cuda.synchronize()
        chunk.append(stamps[0].elapsed_time(stamps[1]) * 1e3)
        combine.append(stamps[1].elapsed_time(stamps[2]) * 1e3)
    _launch._launch_on = launch_on
    return sorted(chunk)[reps // 2], sorted(combine)[reps // 2]


def variants() -> None:
    default = (_launch.BACKWARD_CHUNKS, _launch.BACKWARD_ROWS_IN_FLIGHT, _launch.BACKWARD_MIN_BLOCKS,
               _launch.BACKWARD_STREAMING_ROWS)
    # (rows in flight, occupancy floor) pairs that nvcc compiles without spills (sm_90: 78 and
    # 107 registers; at 3-4 blocks per SM both spill)
    for chunk, rows_in_flight, min_blocks, streaming in ((32, 4, 2, 0), (32, 4, 2, 1), (32, 8, 2, 1),
                                                         (64, 4, 2, 1), (128, 4, 2, 1)):
        _launch.BACKWARD_CHUNKS = (chunk,)
        _launch.BACKWARD_ROWS_IN_FLIGHT, _launch.BACKWARD_MIN_BLOCKS = rows_in_flight, min_blocks
        _launch.BACKWARD_STREAMING_ROWS = streaming
        chunk_us, combine_us = passes_alone()
        ends, sorts = [], []
        for _ in range(5):
            backward()
            ends.append(us("end"))
            sorts.append(us("sort1"))
        print(f"chunk {chunk}, rows in flight {rows_in_flight}, min blocks {min_blocks}, streaming stores "
              f"{streaming}: alone: chunk kernel {chunk_us:.1f} us, combine {combine_us:.1f} us; "
              f"op (median of 5): sort ends {sorted(sorts)[2]:.0f} us, end {sorted(ends)[2]:.0f} us", flush=True)
    (_launch.BACKWARD_CHUNKS, _launch.BACKWARD_ROWS_IN_FLIGHT, _launch.BACKWARD_MIN_BLOCKS,
     _launch.BACKWARD_STREAMING_ROWS) = default


torch.sort = timed(real_sort)
variants()
torch.sort = real_sort
