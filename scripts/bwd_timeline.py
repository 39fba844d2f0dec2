"""Timeline of the suite-1 backward's pieces on two streams (device diagnostics for
docs/perf-log.md; results in reference_kernels/results/h200-run17-backward-timeline.txt).

Event timestamps (us from the op's start) around the zero fill (on its stream), the sort
and the end of the op, for the fill overlapped or not, per fill grid size, and on a
high-priority caller stream; then the sort alone with int64 and int32 keys."""
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
