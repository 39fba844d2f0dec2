"""Per-kernel GPU time of one training step, ours against FBGEMM, on the training suite's cases.

    python3 -m benchmarks training_kernels --fbgemm DIR --tools DIR [--only TEXT ...] [--ncu]

Issue 37 item 3 asks for counters before changes: what FBGEMM does for hot rows that we do
not. For each case (default: the quick suite's 4M x 128 B6912 L100 cases, uniform and Zipf
1.05, SGD and row-wise Adagrad; float32), both modules are built from the same weights and
inputs (benchmarks/training_suite.py), warmed up, and then:

- without ``--ncu``: five steps of each under torch.profiler; one line per CUDA kernel with its
  mean time per step and its share of the step, so the step's time is split by kernel;
- with ``--ncu``: one step of each between cudaProfilerStart/Stop (``== case / library`` lines
  printed before each), for ``ncu --profile-from-start off --csv --metrics ...``;
  ``python3 -m benchmarks ncu_table`` renders the CSV.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Callable

import torch

from benchmarks import harness, training_suite

STEPS = 5


def kernel_split(step: Callable[[], None]) -> list[tuple[str, float, int]]:
    """(kernel name, mean µs per step, launches per step), slowest first."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            total[event.name] += event.device_time
            count[event.name] += 1
    rows = [(name, total[name] / STEPS, count[name] // STEPS) for name in total]
    return sorted(rows, key=lambda row: -row[1])


def print_split(library: str, rows: list[tuple[str, float, int]]) -> None:
    step_us = sum(us for _, us, _ in rows)
    print(f"-- {library}: {step_us:.1f} µs of kernels per step, {sum(n for *_, n in rows)} launches")
    for name, us, launches in rows:
        print(f"   {us:8.1f} µs {100 * us / step_us:5.1f} % x{launches:<3d} {name[:150]}")


def run(case: training_suite.Case, ncu: bool) -> None:
    gen = torch.Generator(device=harness.DEV).manual_seed(0)
    inputs = training_suite.make_inputs(case, gen)
    ours = training_suite.ours_module(case, "none")
    theirs = training_suite.fbgemm_module(case, "none", ours.weight.detach(), inputs.starts)
    psw = () if inputs.psw is None else (inputs.psw,)

    def ours_step() -> None:
        ours(inputs.indices, inputs.offsets, *psw).backward(inputs.grad)

    def fbgemm_step() -> None:
        theirs(inputs.indices, inputs.offsets, *psw).backward(inputs.grad)

    for step in (ours_step, fbgemm_step):
        for _ in range(3):
            step()
    torch.cuda.synchronize()
    print(f"== {case.name} ({inputs.indices.numel()} lookups)", flush=True)
    for library, step in (("ours", ours_step), ("fbgemm", fbgemm_step)):
        if ncu:
            print(f"== {case.name} / {library}", flush=True)
            torch.cuda.profiler.start()
            step()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        else:
            print_split(library, kernel_split(step))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fbgemm", required=True, help="the unpacked FBGEMM training pack")
    parser.add_argument("--tools", default=None, help="the folder holding fbgemm_training.py")
    parser.add_argument("--only", nargs="+", default=["4Mx128 B6912 L100"],
                        help="run cases whose name contains one of these")
    parser.add_argument("--ncu", action="store_true")
    args = parser.parse_args(argv)
    reason = training_suite.load_fbgemm(args.fbgemm, args.tools)
    if reason:
        print(reason)
        return 1
    picked = [c for c in training_suite.all_cases()
              if any(text in c.name for text in args.only) and c.weights == "fp32" and not c.psw]
    for case in picked:
        run(case, args.ncu)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
