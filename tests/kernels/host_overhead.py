"""Host time per eager call of ``reference_kernels.embedding_bag`` on a machine WITHOUT a GPU.

The Python path of a call runs for real (argument checks, dispatch, autograd, the plan cache,
argument packing, cuda-bindings' cuLaunchKernel); only what needs a GPU is replaced: the
tensors live on the CPU and their CUDA check is skipped, the device is a described H200-like
part, kernel lookup returns a fake function, the current device and stream are constants
(torch.cuda's Stream objects of earlier versions are left out: a conservative baseline), and
libcuda is a stub library whose entry points return success (compiled here with ``cc``; the
process runs again with it on LD_LIBRARY_PATH; without a compiler the launch itself is mocked
in Python). The figures are a lower bound of the GPU machine's (no CUDA caching allocator, no
driver work, a faster host), comparable between two versions of the package run here.

    PYTHONPATH=$PWD python3 -m tests.kernels.host_overhead [--calls 2000] [--profile]
    PYTHONPATH=$PWD python3 -m tests.kernels.host_overhead --gpu   # on a GPU: ours and torch's
    PYTHONPATH=$PWD python3 -m tests.kernels.host_overhead --gpu --breakdown   # the call's parts alone
    PYTHONPATH=$PWD python3 -m tests.kernels.host_overhead --training   # one training step's host work

The case is the issue's: a 1M x 128 float32 table, 2048 CSR bags of 20, sum; with no index check
(``check_indices=False``) and with the default one (``"deferred"``: its check pass and the
device's error ledger run too, the ledger's words on the CPU, its pinned flags from the stub's
cuMemHostAlloc); without and with a weight that requires a gradient (forward only, no backward).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from reference_kernels.plan import DeviceProps

DEVICE = DeviceProps(sms=132, arch=90, max_threads_per_sm=2048, max_blocks_per_sm=32, regs_per_sm=65536,
                     smem_per_sm=228 << 10, smem_reserved_per_block=1 << 10)
STUB_ENV = "REFERENCE_KERNELS_STUB_LIBCUDA"  # set in the re-run: the stub is on LD_LIBRARY_PATH
CHECK_ENV = ("REFERENCE_KERNELS_INDEX_CHECK", "REFERENCE_KERNELS_SKIP_INDEX_CHECK")  # unset while measuring
CASES = ((False, False), (False, True), (True, False), (True, True))  # (check, grad)
# libcuda's entry points that cuda-bindings resolves, the launch and the ledger's pinned flags call,
# each a success (cuMemHostAlloc: plain zeroed memory, its "device pointer" the same address).
STUB_SOURCE = r"""
#include <stdlib.h>
#include <string.h>
int cuMemHostAlloc(void **p, size_t size, unsigned flags) { *p = calloc(1, size); return *p ? 0 : 2; }
int cuMemHostGetDevicePointer(unsigned long long *d, void *p, unsigned flags) {
  *d = (unsigned long long)p; return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) { return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
int cuInit(unsigned flags) { return 0; }
int cuGetProcAddress_v2(const char *symbol, void **fn, int version, unsigned long long flags, int *status) {
  if (status) *status = 0;
  if (strcmp(symbol, "cuLaunchKernel") == 0) { *fn = (void *)cuLaunchKernel; return 0; }
  if (strcmp(symbol, "cuDriverGetVersion") == 0) { *fn = (void *)cuDriverGetVersion; return 0; }
  if (strcmp(symbol, "cuInit") == 0) { *fn = (void *)cuInit; return 0; }
  if (strcmp(symbol, "cuMemHostAlloc") == 0) { *fn = (void *)cuMemHostAlloc; return 0; }
  if (strcmp(symbol, "cuMemHostGetDevicePointer") == 0) { *fn = (void *)cuMemHostGetDevicePointer; return 0; }
  *fn = 0;
  if (status) *status = 1;
  return 0;
}
int cuGetProcAddress(const char *symbol, void **fn, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, fn, version, flags, 0);
}
"""


def stub_libcuda(directory: Path) -> Path | None:
    """``directory/libcuda.so.1``: the stub driver (None: no C compiler here)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    source, library = directory / "stub.c", directory / "libcuda.so.1"
    source.write_text(STUB_SOURCE)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True)
    return library


class _CpuIndex:
    """The current device, as a CPU tensor's index compares to it: versions pass ``.device.index``
    (None) or ``get_device()`` (-1); either is the current device, so no device guard is taken."""

    def __eq__(self, other: object) -> bool:
        return other is None or other == -1

    __hash__ = None  # type: ignore[assignment]


CPU_INDEX = _CpuIndex()


def _patch(saved: list[tuple[Any, str, Any]], owner: Any, name: str, value: Any) -> None:
    if hasattr(owner, name):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)


@contextlib.contextmanager
def without_gpu(stubbed: bool) -> Iterator[None]:
    """Replace the parts of a call that need a GPU (works with this and earlier versions);
    ``stubbed``: libcuda is the stub, so cuda-bindings' launch runs for real."""
    import torch
    from cuda.bindings import driver  # type: ignore[import-untyped]

    from reference_kernels import api, launch, nvrtc, ops

    saved: list[tuple[Any, str, Any]] = []
    _patch(saved, api, "_require_cuda", lambda fn, *args, **kwargs: None)
    _patch(saved, launch, "device_props", lambda device: DEVICE)
    _patch(saved, nvrtc, "get_function", lambda *args: driver.CUfunction(0x1000))
    _patch(saved, nvrtc, "resident_blocks", lambda fn, block: 8)
    stream = SimpleNamespace(cuda_stream=0)  # earlier versions: torch.cuda's stream objects
    _patch(saved, torch.cuda, "current_device", lambda: None)
    _patch(saved, torch.cuda, "current_stream", lambda device=None: stream)
    _patch(saved, launch, "_current_device", lambda: CPU_INDEX)  # this version: raw device and stream
    _patch(saved, launch, "_raw_stream", lambda index: 0)
    if hasattr(launch, "_on_gpu"):  # this version: the backward's own sort on the CPU stand-ins
        _patch(saved, launch, "_on_gpu", lambda t: True)
    if not stubbed:
        _patch(saved, driver, "cuLaunchKernel", lambda *args: (driver.CUresult.CUDA_SUCCESS,))
        if hasattr(nvrtc, "_cu_launch_kernel"):
            nvrtc._cu_launch_kernel.cache_clear()
    _without_gpu_ledger(saved, stubbed)
    if not hasattr(ops, "EmbeddingBagFunction"):  # earlier versions: grad calls go through the op,
        with contextlib.suppress(Exception):  # here run on the CPU tensors (for the rest of the process)
            torch.library.register_kernel("reference_kernels::embedding_bag", "cpu", ops.embedding_bag_impl)
    launch.clear_plans()
    environment = {name: os.environ.pop(name) for name in CHECK_ENV if name in os.environ}  # the default mode
    try:
        yield
    finally:
        os.environ.update(environment)
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        if hasattr(nvrtc, "_cu_launch_kernel"):
            nvrtc._cu_launch_kernel.cache_clear()
        launch.clear_plans()


def _without_gpu_ledger(saved: list[tuple[Any, str, Any]], stubbed: bool) -> None:
    """The deferred check's ledger without a GPU: its words on the CPU (torch.zeros on a CUDA
    device gives a CPU tensor meanwhile), no graph capture, the pinned flags from the stub
    libcuda's cuMemHostAlloc (without the stub: Python stand-ins). The process's ledgers and
    flags are put back afterwards."""
    import ctypes

    import torch
    from cuda.bindings import driver

    from reference_kernels import index_check, launch

    zeros = torch.zeros

    def zeros_on_the_cpu(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        return zeros(*args, device="cpu" if str(device).startswith("cuda") else device, **kwargs)

    _patch(saved, torch, "zeros", zeros_on_the_cpu)
    _patch(saved, torch.cuda, "is_current_stream_capturing", lambda: False)
    _patch(saved, launch, "_device_props", lambda index: DEVICE)
    for name in ("FLAGS", "_FLAGS_DEVICE_PTR", "_LEDGERS"):
        _patch(saved, index_check, name, getattr(index_check, name))
    index_check._LEDGERS = {}
    if not stubbed:  # the lambda keeps the buffer alive while FLAGS points into it
        flags = ctypes.create_string_buffer(8 * index_check.MAX_DEVICES)
        _patch(saved, driver, "cuMemHostAlloc", lambda size, kind: (driver.CUresult.CUDA_SUCCESS,
                                                                    ctypes.addressof(flags)))
        _patch(saved, driver, "cuMemHostGetDevicePointer", lambda host, kind: (driver.CUresult.CUDA_SUCCESS, host))


def issue_case(requires_grad: bool, check: bool) -> Callable[[], Any]:
    """The issue's call: 1M x 128 float32, 2048 CSR bags of 20 (int64), sum; ``check``: the
    default index check (deferred), else none."""
    import torch

    import reference_kernels as rk

    weight = torch.empty(1_000_000, 128).requires_grad_(requires_grad)
    indices = torch.randint(0, 1_000_000, (2048 * 20,))
    offsets = torch.arange(0, 2048 * 20, 20)
    if check:
        return lambda: rk.embedding_bag(indices, weight, offsets, mode="sum")
    return lambda: rk.embedding_bag(indices, weight, offsets, mode="sum", check_indices=False)


def per_call_us(call: Callable[[], Any], calls: int, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean wall time per call of ``calls`` calls."""
    for _ in range(50):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def case_name(check: bool, grad: bool) -> str:
    return f"check={'deferred' if check else 'ignore'} grad={grad}"


def measure(calls: int, profile: bool = False) -> dict[str, float]:
    """Host µs per call without and with the default index check, without and with a weight
    that requires a gradient."""
    import torch

    results = {}
    with without_gpu(os.environ.get(STUB_ENV) == "1"):
        for check, grad in CASES:
            call = issue_case(grad, check)
            with torch.enable_grad():
                results[case_name(check, grad)] = per_call_us(call, calls)
                if profile:
                    import cProfile
                    import pstats

                    profiler = cProfile.Profile()
                    profiler.enable()
                    for _ in range(300):
                        call()
                    profiler.disable()
                    print(f"--- {case_name(check, grad)}")
                    pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
    return results


# The training step's case (issue 37): TableBatchedEmbeddingBag, 4 tables x 1000 rows x 128,
# float32, 64 CSR bags of 4 per table (small: the CPU's own work on the tensors stays negligible
# beside the host path's), the default index check; forward, backward and fused update.
TRAINING_CASES = ("sgd sum", "rowwise_adagrad sum", "rowwise_adagrad mean", "sgd sum psw")


@dataclass
class StepWork:
    """The host work of one training step: the torch operations dispatched (aten names, in order)
    and our kernel launches (entry names, in order)."""

    ops: list[str]
    launches: list[str]


def training_case(name: str) -> Callable[[], Any]:
    """One training step of the named TRAINING_CASES case (CPU tensors, under ``without_gpu``)."""
    import torch

    from reference_kernels import optim
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    kind, mode, *extra = name.split()
    spec = optim.SGD(lr=0.1) if kind == "sgd" else optim.RowWiseAdagrad(lr=0.1)
    tables, bags, length, dim = 4, 64, 4, 128
    module = TableBatchedEmbeddingBag([1000] * tables, dim, mode=mode, optimizer=spec)
    gen = torch.Generator().manual_seed(0)
    indices = torch.randint(0, 1000, (tables * bags * length,), generator=gen)
    offsets = torch.arange(0, tables * bags * length + 1, length)
    psw = torch.rand(indices.numel(), generator=gen) if extra else None
    grad = torch.randn(bags, tables * dim, generator=gen)
    return lambda: module(indices, offsets, psw).backward(grad)


def step_work(step: Callable[[], Any]) -> StepWork:
    """What one call of ``step`` dispatches and launches (run under ``without_gpu``; the kernels'
    names from a recording kernel lookup, nothing launched)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from reference_kernels import index_check, launch, nvrtc

    work = StepWork([], [])

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            work.ops.append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    saved = nvrtc.get_function, launch._launch_packed, dict(index_check._FUNCTIONS)
    nvrtc.get_function = lambda filename, name, *args: name  # type: ignore[assignment]
    launch._launch_packed = lambda index, fn, *args: work.launches.append(fn)  # type: ignore[assignment,misc]
    launch.clear_plans()
    index_check._FUNCTIONS.clear()  # the check pass's compiled functions: the recording lookup's names
    try:
        step()  # planned, compiled (the names), the optimizer's state made
        work.launches.clear()
        with Recorder():
            step()
    finally:
        nvrtc.get_function, launch._launch_packed = saved[0], saved[1]  # type: ignore[assignment]
        index_check._FUNCTIONS.clear()
        index_check._FUNCTIONS.update(saved[2])
        launch.clear_plans()
    return work


def measure_training(calls: int) -> dict[str, tuple[float, StepWork]]:
    """Per TRAINING_CASES case: host µs per step (CPU lower bound) and the step's work."""
    import torch

    results = {}
    with without_gpu(os.environ.get(STUB_ENV) == "1"), torch.enable_grad():
        for name in TRAINING_CASES:
            work = step_work(training_case(name))
            results[name] = (per_call_us(training_case(name), calls), work)
    return results


def measure_on_gpu(calls: int) -> dict[str, float]:
    """The same call on a GPU, ours and torch's: host µs per call while the GPU is held busy
    (a sleep kernel enqueued first, longer than the calls take), so that calls only enqueue."""
    import torch
    import torch.nn.functional as F

    import reference_kernels as rk

    weight = torch.randn(1_000_000, 128, device="cuda")
    indices = torch.randint(0, 1_000_000, (2048 * 20,), device="cuda")
    offsets = torch.arange(0, 2048 * 20, 20, device="cuda")
    results = {}
    for grad in (False, True):
        w = weight.detach().clone().requires_grad_(grad)
        cases = {"ours": lambda w=w: rk.embedding_bag(indices, w, offsets, mode="sum", check_indices=False),
                 "ours check=deferred": lambda w=w: rk.embedding_bag(indices, w, offsets, mode="sum",
                                                                     check_indices="deferred"),
                 "torch": lambda w=w: F.embedding_bag(indices, w, offsets, mode="sum")}
        for name, call in cases.items():
            for _ in range(50):
                call()
            times = []
            for _ in range(5):
                torch.cuda.synchronize()
                torch.cuda._sleep(calls * 400_000)  # ~200 µs per call at 2 GHz: longer than the host needs
                start = time.perf_counter()
                for _ in range(calls):
                    call()
                times.append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
            results[f"{name} grad={grad}"] = statistics.median(times)
    return results


def breakdown_on_gpu(calls: int, rounds: int = 9) -> dict[str, tuple[float, float]]:
    """Where the GPU machine's host time of the call goes: its parts timed alone (a call's
    allocations, its launch, our launch layer, the index check pass, torch's one-launch op for
    scale) beside the whole calls, ``calls`` per repeat while the GPU sleeps, the parts taking
    turns for ``rounds`` rounds (a drifting shared host shifts a whole round). Returns, per
    part, its median µs and its paired median ratio to torch's call."""
    import torch
    import torch.nn.functional as F

    import reference_kernels as rk
    from reference_kernels import index_check, launch, nvrtc

    weight = torch.randn(1_000_000, 128, device="cuda")
    indices = torch.randint(0, 1_000_000, (2048 * 20,), device="cuda")
    offsets = torch.arange(0, 2048 * 20, 20, device="cuda")
    out = weight.new_empty((2048, 128))
    ours = lambda: rk.embedding_bag(indices, weight, offsets, mode="sum", check_indices=False)  # noqa: E731
    checked = lambda: rk.embedding_bag(indices, weight, offsets, mode="sum")  # noqa: E731
    ours(), checked()  # compiles, plans, makes the ledger
    plan, fn, grid, signature, pack = next(p for plans in launch._PLANS.values() for p in plans.values()
                                           if p[0].entry.startswith("embedding_bag_forward"))
    stream = torch.cuda.current_stream().cuda_stream
    values = pack(weight.data_ptr(), indices, offsets, None, -1, None, out.data_ptr(), None, launch._NO_CHECK)
    parts: dict[str, Callable[[], object]] = {
        "torch F.embedding_bag": lambda: F.embedding_bag(indices, weight, offsets, mode="sum"),
        "ours, no check": ours,
        "ours, deferred check": checked,
        "bag_forward (launch layer)": lambda: launch.bag_forward(
            weight, indices, offsets, num_bags=2048, per_sample_weights=None, mode="sum", padding_idx=-1,
            need_argmax=False),
        "run_check (deferred)": lambda: index_check.run_check(
            indices, offsets, num_rows=1_000_000, table_sizes=None, bags_per_table=1, mode="deferred",
            op="embedding_bag"),
        "cuLaunchKernel (packed)": lambda: nvrtc.launch_packed(fn, grid, plan.block, stream, signature, values),
        "weight.new_empty([2048, 128])": lambda: weight.new_empty((2048, 128)),
        "torch.empty_like(indices, int32)": lambda: torch.empty_like(indices, dtype=torch.int32),
        "out.zero_() (one torch launch)": out.zero_,
    }
    samples: dict[str, list[float]] = {name: [] for name in parts}
    with torch.no_grad():
        for _ in range(rounds):
            for name, call in parts.items():
                call()
                torch.cuda.synchronize()
                torch.cuda._sleep(calls * 400_000)  # ~200 µs per call at 2 GHz: longer than the host needs
                start = time.perf_counter()
                for _ in range(calls):
                    call()
                samples[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    torch_us = samples["torch F.embedding_bag"]
    return {name: (statistics.median(values), statistics.median(v / t for v, t in zip(values, torch_us, strict=True)))
            for name, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="calls per repeat (default 2000; 400 on a GPU, "
                        "as the benchmark's --host: more could fill the launch queue)")
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions")
    parser.add_argument("--gpu", action="store_true", help="on a GPU instead: ours and torch's, nothing replaced")
    parser.add_argument("--breakdown", action="store_true", help="with --gpu: the call's parts timed alone")
    parser.add_argument("--training", action="store_true", help="instead: one TableBatchedEmbeddingBag training "
                        "step (forward, backward, fused update): host us, torch ops and launches per step")
    args = parser.parse_args()
    if args.gpu and args.breakdown:
        for part, (us, ratio) in breakdown_on_gpu(args.calls or 400).items():
            print(f"host per call on the GPU machine, {part:34s} {us:7.2f} us  {ratio:5.2f}x torch's call "
                  f"(paired median)")
        return 0
    if args.gpu:
        for case, us in measure_on_gpu(args.calls or 400).items():
            print(f"host per call on the GPU machine, {case}: {us:6.1f} us")
        return 0
    if STUB_ENV not in os.environ:  # run again with the stub driver, where one can be built
        with tempfile.TemporaryDirectory() as tmp:
            stub = stub_libcuda(Path(tmp))
            env = {**os.environ, STUB_ENV: "1" if stub else "0"}
            if stub is not None:
                env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [tmp, os.environ.get("LD_LIBRARY_PATH")]))
            return subprocess.run([sys.executable, "-m", "tests.kernels.host_overhead", *sys.argv[1:]],
                                  env=env, check=False).returncode
    stubbed = os.environ[STUB_ENV] == "1"
    print(f"driver: {'stub libcuda (cuda-bindings runs)' if stubbed else 'launch mocked in Python (no cc)'}")
    if args.training:
        for case, (us, work) in measure_training(args.calls or 500).items():
            print(f"host per training step, ours, CPU lower bound, {case}: {us:6.1f} us, {len(work.ops)} torch ops "
                  f"({' '.join(work.ops)}), {len(work.launches)} launches ({' '.join(work.launches)})")
        return 0
    for case, us in measure(args.calls or 2000, args.profile).items():
        print(f"host per call, ours, CPU lower bound, {case}: {us:6.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
