"""Timeline of the suite-1 backward's pieces on two streams (device diagnostics)."""
import torch
from reference_kernels import _launch

gen = torch.Generator(device="cuda").manual_seed(5)
rows, dim = 5_000_000, 128
idx = torch.randint(0, rows, (2048, 150), device="cuda", generator=gen)
grad = torch.randn(2048, dim, device="cuda", generator=gen)
flush = torch.ones(128 << 20, device="cuda")
sink = torch.empty((), device="cuda")
marks: dict[str, torch.cuda.Event] = {}


def ev(name: str) -> None:
    e = torch.cuda.Event(enable_timing=True)
    e.record()  # on the current stream
    marks[name] = e


real_sort, real_fill = torch.sort, _launch._zero_untouched_rows


def sort(*a, **k):
    ev("sort0")
    r = real_sort(*a, **k)
    ev("sort1")
    return r


def fill(*a, **k):
    ev("fill0")
    real_fill(*a, **k)
    ev("fill1")


torch.sort, _launch._zero_untouched_rows = sort, fill
for overlap in (True, False):
    _launch.OVERLAP_ZERO_FILL = overlap
    for _ in range(3):
        torch.sum(flush, dim=0, out=sink)
        torch.cuda._sleep(1_000_000)
        ev("start")
        _launch.bag_backward(grad, idx, None, 150, rows, None, None, -1)
        ev("end")
        torch.cuda.synchronize()
    t = lambda a: marks["start"].elapsed_time(marks[a]) * 1e3
    print(f"overlap={overlap}: fill {t('fill0'):.0f}-{t('fill1'):.0f} us, sort {t('sort0'):.0f}-{t('sort1'):.0f} us, "
          f"end {t('end'):.0f} us")
for streaming in (True,):
    _launch.FILL_STREAMING = streaming
    for blocks in (4, 16):
        _launch.FILL_BLOCKS_PER_SM = blocks
        _launch.OVERLAP_ZERO_FILL = True
        for _ in range(3):
            torch.sum(flush, dim=0, out=sink)
            torch.cuda._sleep(1_000_000)
            ev("start")
            _launch.bag_backward(grad, idx, None, 150, rows, None, None, -1)
            ev("end")
            torch.cuda.synchronize()
        t = lambda a: marks["start"].elapsed_time(marks[a]) * 1e3
        print(f"streaming={streaming} blocks/SM={blocks}: fill {t('fill0'):.0f}-{t('fill1'):.0f} us, "
              f"sort {t('sort0'):.0f}-{t('sort1'):.0f} us, end {t('end'):.0f} us")
torch.sort = real_sort
flat32 = idx.reshape(-1).to(torch.int32)
flat64 = idx.reshape(-1)
for name, keys in (("int64", flat64), ("int32", flat32)):
    for _ in range(3):
        torch.sum(flush, dim=0, out=sink)
        ev("start")
        torch.sort(keys, stable=True)
        ev("end")
        torch.cuda.synchronize()
    print(f"sort alone, {name} keys: {marks['start'].elapsed_time(marks['end']) * 1e3:.0f} us")
torch.sort = sort
lo, hi = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") else (0, -1)
print("priority range", lo, hi)
_launch.FILL_STREAMING = True
for blocks in (2, 4, 16):
    _launch.FILL_BLOCKS_PER_SM = blocks
    hp = torch.cuda.Stream(priority=-1)
    for _ in range(3):
        torch.sum(flush, dim=0, out=sink)
        torch.cuda._sleep(1_000_000)
        ev("start")
        hp.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(hp):
            _launch.bag_backward(grad, idx, None, 150, rows, None, None, -1)
        torch.cuda.current_stream().wait_stream(hp)
        ev("end")
        torch.cuda.synchronize()
    t = lambda a: marks["start"].elapsed_time(marks[a]) * 1e3
    print(f"high-priority caller stream, blocks/SM={blocks}: fill {t('fill0'):.0f}-{t('fill1'):.0f} us, "
          f"sort {t('sort0'):.0f}-{t('sort1'):.0f} us, end {t('end'):.0f} us")
