"""Start N ranks of ``tests.distributed.worker`` as separate processes (gloo on CPU, NCCL on
GPUs), the way torchrun would: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment."""

from __future__ import annotations

import functools
import importlib.util
import multiprocessing
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(world: int, out: Path, device: str = "cpu", timeout: float = 120.0) -> list[dict[str, object]]:
    """Run the worker on ``world`` ranks; return each rank's saved results (rank order). Raises
    with the ranks' output when one fails or the run exceeds ``timeout`` seconds."""
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
               OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-m", "tests.distributed.worker", str(out), device],
                              env=dict(env, RANK=str(r)), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(world)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError("a rank failed:\n" + "\n".join(f"--- rank {r} (exit {p.returncode})\n{log}"
                                                        for r, (p, log) in enumerate(zip(procs, logs, strict=False))))
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]


def _forked_rank(rank: int, world: int, port: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank))
    torch.set_num_threads(1)  # no OpenMP region in a forked child (libgomp's pool does not survive fork)
    from tests.distributed.worker import run

    try:
        run(out, "cpu")
    except BaseException:
        traceback.print_exc()
        raise


def launch_forked(world: int, out: Path, timeout: float = 120.0) -> list[dict[str, object]]:
    """``launch`` on the CPU, the ranks forked from this process: they start with torch and its
    lazily imported parts already loaded (a fresh interpreter spends seconds importing them)."""
    codes = fork_ranks(world, _forked_rank, out, timeout=timeout)
    if any(codes):
        raise RuntimeError(f"a rank failed (exit codes {codes}; its traceback is on stderr)")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]


EXAMPLE = ROOT / "examples" / "dlrm" / "dlrm_sharded.py"


@functools.cache
def example_module() -> Any:
    """examples/dlrm/dlrm_sharded.py imported once in this process, so forked ranks have it loaded
    (with what DDP and the optimizers import on first use: seconds per rank otherwise)."""
    for name in ("torch._dynamo", "torch._inductor", "torch.distributed.nn", "torch.profiler"):
        importlib.import_module(name)
    spec = importlib.util.spec_from_file_location("dlrm_sharded_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _forked_example(rank: int, world: int, port: int, argv: list[str]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)  # as in launch_forked; also: every run's CPU GEMMs with one thread, the same bits
    try:
        code = example_module().main(argv)
    except BaseException:
        traceback.print_exc()
        raise
    sys.exit(code)


def run_example_forked(world: int, argv: list[str], timeout: float = 120.0) -> list[int | None]:
    """``torchrun --nproc_per_node=world examples/dlrm/dlrm_sharded.py argv`` on the CPU (gloo),
    the ranks forked from this process (no interpreter start-up); each rank's exit code."""
    example_module()
    return fork_ranks(world, _forked_example, argv, timeout=timeout)


def fork_ranks(world: int, target: Callable[[int, int, int, Any], None], arg: Any, timeout: float) -> list[int | None]:
    """``target(rank, world, port, arg)`` in ``world`` processes forked from this one; each one's
    exit code (-9: killed after ``timeout`` seconds)."""
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(r, world, port, arg)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    return [p.exitcode for p in procs]
