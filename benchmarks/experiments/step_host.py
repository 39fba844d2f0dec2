"""Host time of a training step, split, under the host path's variants (changes 59, 60).

    python3 -m benchmarks step_host [--only TEXT ...] [--rounds N] [--variants NAME ...] [--timeline]
                                    [--sort-sizes [--radix-items N ...] [--radix-look-back N ...]]

For each training-suite case named (default: 4Mx128 Zipf 1.2 SGD and 40Mx128 uniform SGD; float32,
no per-sample weights), our module is built as the suite builds it and one step is timed under
each variant, ``--rounds`` times in turn (the host's speed drifts within a minute):

- ``new``: as shipped;
- ``python-path``: the compiled host path hidden (``diagnostics.python_host_path``): the forward
  through the Python path, every launch through cuda-bindings;
- ``torch-sort``: the backward's keys sorted by torch.sort (the knob ``tuning.own_sort`` off);
- ``bindings-launches``: the forward served, the Python path's launches through cuda-bindings'
  cuLaunchKernel instead of the library's ``launch_raw``.
- ``plain-launches``: the library's launches through cuLaunchKernel, not programmatic
  (``host.set_programmatic(False)``; change 61);
- ``no-extend-runs``, ``check-grid-8``, ``prepare-grid-by-positions``: change 61's knobs back at
  their old values (``backward_extend_runs`` off, ``check_blocks_per_sm`` 8,
  ``prepare_grid_by_tiles`` off).

``--variants``: only the variants named.

``--timeline``: per variant, one step's kernels in the order they started (torch.profiler's
trace, the step's launches queued behind a GPU sleep): stream, start and end in µs from the
first kernel's start, name: the kernels' own times and the gaps between them.

Per variant: GPU time (the suite's median of L2-flushed steps), wall time (the suite's median of
loops of back-to-back steps), host time per step (median of five ``harness.host_us``), and the
forward's and the backward's host time apart (medians, the GPU held asleep).

``--sort-sizes``: host and GPU time of ``torch.sort(keys, stable=True)`` and of ``launch.sort_rows``
at 16K to 2.6M int32 keys of 22 and 26 bits (the radix sort forced on with ``RADIX_MIN_KEYS`` 1),
the two results compared; ours at each pair of radix_sort.cu's ITEMS (keys per thread per tile)
and LOOK_BACK (look-back words read at once) given.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from benchmarks import harness, training_suite

DEFAULT_CASES = ["4Mx128 B6912 L100 zipf1.2 sgd", "40Mx128 B6912 L27 uniform sgd"]
SORT_SIZES = (16_384, 65_536, 186_624, 400_000, 691_200, 1_048_576, 2_621_440)
STEPS = 20
SLEEP_KERNEL = "spin_kernel"  # torch.cuda._sleep's kernel, left out of a timeline


@contextlib.contextmanager
def plain_launches() -> Any:
    """The compiled host path's launches through cuLaunchKernel inside the block (not programmatic)."""
    from reference_kernels import host

    was = host.set_programmatic(False)
    try:
        yield
    finally:
        host.set_programmatic(was)


def variants() -> dict[str, Callable[[], contextlib.AbstractContextManager[Any]]]:
    from reference_kernels import diagnostics, launch, tuning

    return {"new": contextlib.nullcontext, "python-path": diagnostics.python_host_path,
            "torch-sort": partial(tuning.tuned, own_sort=False),
            "bindings-launches": partial(mock.patch.object, launch, "_HOST_PATH", []),
            "plain-launches": plain_launches,
            "no-extend-runs": partial(tuning.tuned, backward_extend_runs=False),
            "check-grid-8": partial(tuning.tuned, check_blocks_per_sm=8),
            "prepare-grid-by-positions": partial(tuning.tuned, prepare_grid_by_tiles=False)}


def timeline(step: Callable[[], None]) -> list[tuple[int, float, float, str]]:
    """One step's kernels as the profiler traced them: (stream, start µs, end µs, name), start
    order, times from the first kernel's start."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(100_000_000)  # the step's launches queue up: the GPU's own timeline
        step()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        events = json.loads(Path(trace.name).read_text())["traceEvents"]
    kernels = sorted((e["ts"], e["ts"] + e["dur"], e["args"].get("stream", -1), e["name"])
                     for e in events if e.get("cat") in ("kernel", "gpu_memset") and SLEEP_KERNEL not in e["name"])
    first = kernels[0][0] if kernels else 0.0
    return [(stream, start - first, end - first, name) for start, end, stream, name in kernels]


def host_split(forward: Callable[[], torch.Tensor], grad: torch.Tensor) -> tuple[float, float]:
    """Median host µs of the forward and of the backward, the GPU asleep meanwhile."""
    fw, bw = [], []
    for _ in range(5):
        torch.cuda.synchronize()
        torch.cuda._sleep(300_000_000)
        for _ in range(STEPS):
            t0 = time.perf_counter()
            out = forward()
            t1 = time.perf_counter()
            out.backward(grad)
            bw.append(time.perf_counter() - t1)
            fw.append(t1 - t0)
        torch.cuda.synchronize()
    return 1e6 * statistics.median(fw), 1e6 * statistics.median(bw)


def run_case(name: str, rounds: int, timer: harness.Timer, with_timeline: bool, only: list[str]) -> None:
    case = next(c for c in training_suite.all_cases() if c.name == name)
    inputs = training_suite.make_inputs(case, torch.Generator(device=harness.DEV).manual_seed(0))
    ours = training_suite.ours_module(case, "default")

    def forward() -> torch.Tensor:
        out: torch.Tensor = ours(inputs.indices, inputs.offsets)
        return out

    def step() -> None:
        forward().backward(inputs.grad)

    for r in range(rounds):
        for label, variant in variants().items():
            if only and label not in only:
                continue
            with variant():
                for _ in range(3):
                    step()
                fw, bw = host_split(forward, inputs.grad)
                figures = training_suite.measure(step, timer)
                host = statistics.median(harness.host_us(step, calls=STEPS) for _ in range(5))
                kernels = timeline(step) if with_timeline and r == 0 else []
            print(f"{name} round {r} [{label}] GPU {figures.gpu_us:.0f} wall {figures.wall_us:.0f} host {host:.0f} "
                  f"| forward host {fw:.0f} backward host {bw:.0f}", flush=True)
            for stream, start, end, kernel in kernels:
                print(f"    stream {stream:>3} {start:7.1f} {end:7.1f} {kernel[:100]}")


def _host_and_gpu(fn: Callable[[], object], timer: harness.Timer) -> tuple[float, float]:
    fn()
    return statistics.median(harness.host_us(fn, calls=STEPS) for _ in range(5)), timer.median_us(fn)


def sort_sizes(timer: harness.Timer, items: list[int], look_backs: list[int]) -> None:
    """sort_rows timed at each (radix_sort.cu's ITEMS: keys per thread per tile, LOOK_BACK)."""
    from reference_kernels import launch

    shapes = [(count, back) for count in items for back in look_backs]
    print(f"keys, bits | torch.sort host, GPU | sort_rows host, GPU (µs) at (ITEMS, LOOK_BACK) {shapes} | same")
    for rows in (4_000_000, 40_000_000):
        for n in SORT_SIZES:
            keys = torch.randint(0, rows, (n,), device=harness.DEV, dtype=torch.int32)
            th, tg = _host_and_gpu(lambda: torch.sort(keys, stable=True), timer)
            theirs = torch.sort(keys, stable=True)
            line, same = [], True
            for count, back in shapes:
                forced = {"RADIX_MIN_KEYS": 1, "RADIX_ITEMS": count, "RADIX_SMALL_BELOW": 0, "RADIX_LOOK_BACK": back}
                with mock.patch.multiple(launch, **forced):
                    oh, og = _host_and_gpu(lambda: launch.sort_rows(keys, rows), timer)
                    ours = launch.sort_rows(keys, rows)
                line.append(f"{oh:7.1f} {og:7.1f}")
                same = same and torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
            print(f"{n:>9d} {rows.bit_length():>2d} | {th:7.1f} {tg:7.1f} | {' | '.join(line)} | {same}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=DEFAULT_CASES, help="training-suite case names")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sort-sizes", action="store_true", help="also the sort alone at several key counts")
    parser.add_argument("--timeline", action="store_true", help="one step's kernels per variant (round 0)")
    parser.add_argument("--variants", nargs="+", default=[], help="only these variants (default: all)")
    parser.add_argument("--radix-items", type=int, nargs="+", default=[12],
                        help="--sort-sizes: radix_sort.cu's ITEMS values to time")
    parser.add_argument("--radix-look-back", type=int, nargs="+", default=[8],
                        help="--sort-sizes: radix_sort.cu's LOOK_BACK values to time")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("step_host needs a CUDA GPU")
        return 2
    timer = harness.Timer(reps=STEPS)
    if args.sort_sizes:
        sort_sizes(timer, args.radix_items, args.radix_look_back)
    for name in args.only:
        run_case(name, args.rounds, timer, args.timeline, args.variants)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
