"""Start N ranks of ``tests.distributed.worker`` as separate processes (gloo on CPU, NCCL on
GPUs), the way torchrun would: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path

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
    port = free_port()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_forked_rank, args=(r, world, port, out)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    if any(codes):
        raise RuntimeError(f"a rank failed (exit codes {codes}; its traceback is on stderr)")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]
