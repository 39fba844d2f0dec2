"""The kernel's process: ``python -m compliance.verify.kernel_process JOB.json``.

One process per kernel, so a crash, an illegal memory access or a hang costs
only that kernel. It is the only process that loads submission code, so it
computes nothing that decides a verdict: it builds the kernel, and for every
case reads the input buffers the verifier wrote (``in-<case>.pt`` in the job's
exchange directory), calls the kernel twice, each time on fresh copies, and
writes back what it has afterwards (``out-<case>-<run>.pt``): every buffer it was
given, guard bands included, whatever the function returned, and the addresses
of the returned memory and of the given buffers. The verifier's process
(``compliance.verify.judge``) judges those tensors. Progress goes to a pipe (its
number is in the job file, not in the environment, which holds nothing of the
verifier's) as JSON lines the parent reads for display, deadlines and failure
messages only: nothing on it can make a case pass. Around each call it sets the
marks of the verifier's preloaded probe (``compliance.verify.evidence``), which
records what ran on a pipe of its own. stdout/stderr (kernel prints) go to a
log the parent quotes. A torch extension arrives built (by the verifier, from
its private copy of the declared files); this process only loads it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections import deque
from pathlib import Path
from typing import Any

REMEMBERED_OUTPUTS = 8
"""Returned outputs kept alive so that a kernel returning an old buffer is caught."""


class Events:
    """Writes JSON progress events to the parent's pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def emit(self, event: str, **fields: Any) -> None:
        """One event line."""
        data = (json.dumps({"event": event, **fields}, default=str) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]


def input_path(exchange: Path, index: int) -> Path:
    """Where the verifier writes case ``index``'s input buffers."""
    return exchange / f"in-{index}.pt"


def result_path(exchange: Path, index: int, run: int) -> Path:
    """Where the kernel's process writes what run ``run`` of case ``index`` left."""
    return exchange / f"out-{index}-{run}.pt"


def _returned(result: Any) -> list[dict[str, Any]]:
    """What the function returned, as plain tensors on the CPU (sparse COO: its parts)."""
    import torch

    items = list(result) if isinstance(result, (tuple, list)) else [] if result is None else [result]
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, torch.Tensor) and item.layout == torch.sparse_coo:
            values = item._values()
            out.append({"kind": "sparse", "indices": item._indices().detach().cpu(),
                        "values": values.detach().cpu(), "size": list(item.shape),
                        "coalesced": bool(item.is_coalesced()), "storage": values.untyped_storage().data_ptr()})
        elif isinstance(item, torch.Tensor) and item.layout == torch.strided:
            out.append({"kind": "dense", "tensor": item.detach().cpu().clone(),
                        "storage": item.untyped_storage().data_ptr()})
        else:
            out.append({"kind": "other", "type": type(item).__name__})
    return out


def _keep(result: Any, remembered: deque[Any]) -> None:
    """Keep returned tensors alive, so that their memory cannot be handed out again as a 'fresh' output."""
    import torch

    for item in result if isinstance(result, (tuple, list)) else [result]:
        if isinstance(item, torch.Tensor):
            remembered.append(item._values() if item.layout == torch.sparse_coo else item)


def _probe_mark() -> Any:
    """The preloaded probe's mark function, or a no-op when there is no probe."""
    import ctypes

    try:
        mark = ctypes.CDLL(None).compliance_probe_mark
    except (OSError, AttributeError):
        return lambda index, run, begin: None
    mark.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    mark.restype = None
    return mark


PROBE_MARK: list[Any] = []


def _save(data: dict[str, Any], path: Path) -> None:
    import torch

    partial = path.with_suffix(".partial")
    torch.save(data, partial)
    os.replace(partial, path)


def _context_usable(torch: Any) -> bool:
    """After a kernel call raised on a GPU: True when the CUDA context still works (an exception such as a
    refused mode leaves it intact; an illegal address makes every later call fail)."""
    try:
        torch.cuda.synchronize()
        return bool(torch.ones(1, device="cuda").add_(1).item() == 2)
    except Exception:  # noqa: BLE001  (any failure means later cases cannot run)
        return False


def run_case(backend: Any, case: Any, exchange: Path, index: int, remembered: deque[Any]) -> bool:
    """Both runs of one case, results written; True when the process must stop (a CUDA error)."""
    import torch

    from compliance.verify.backends import BuildFailed, LaunchInvalid
    from compliance.verify.tensors import GUARD, large_table

    device = backend.device
    payload = torch.load(input_path(exchange, index), weights_only=True)
    shapes = payload["shapes"]
    table = None
    if "large" in payload:  # made once per case: it is 4-8 GiB
        table = large_table(case, payload["large"]["rows"], payload["large"]["values"], device)
    for run in range(2):
        buffers = {name: b.to(device, copy=True) for name, b in payload["buffers"].items()}
        tensors = {name: b[GUARD:GUARD + _numel(shapes[name])].view(shapes[name]) for name, b in buffers.items()}
        if table is not None:
            tensors["weight"] = table
        earlier = [t.untyped_storage().data_ptr() for t in remembered]
        started = time.perf_counter()
        mark = PROBE_MARK[0] if PROBE_MARK else _probe_mark()
        try:
            mark(index, run, 1)
            try:
                result = backend.call(case, tensors)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            finally:
                mark(index, run, 0)
        except (BuildFailed, LaunchInvalid) as exc:
            kind = "build-failed" if isinstance(exc, BuildFailed) else "launch-invalid"
            _save({"error": {"kind": kind, "message": str(exc)}}, result_path(exchange, index, run))
            return False
        except Exception as exc:  # noqa: BLE001  (the kernel raised; on a GPU the context may be gone)
            message = f"the kernel call raised {type(exc).__name__}: {exc}"
            _save({"error": {"kind": "raised", "message": message}}, result_path(exchange, index, run))
            return bool(device.type == "cuda") and not _context_usable(torch)
        data: dict[str, Any] = {
            "seconds": time.perf_counter() - started, "returned": _returned(result),
            "buffers": {name: b.cpu() for name, b in buffers.items()},
            "given_storage": {name: b.untyped_storage().data_ptr() for name, b in buffers.items()},
            "earlier_storage": earlier}
        if table is not None:
            rows = payload["large"]["rows"].to(device)
            data["large_rows"] = table[rows].cpu()
            data["given_storage"]["weight"] = table.untyped_storage().data_ptr()
        _keep(result, remembered)
        _save(data, result_path(exchange, index, run))
    return False


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def main(argv: list[str]) -> int:
    """Run one kernel's job; the exit status is 0 unless this process itself broke."""
    import faulthandler

    faulthandler.enable()  # a fatal signal prints the Python stack into the log the crash finding quotes
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    events = Events(int(job["event_fd"]))
    os.set_inheritable(events.fd, False)  # a process the kernel forks does not keep the pipe open
    PROBE_MARK.append(_probe_mark())
    try:
        return _main(job, events)
    except Exception as exc:  # noqa: BLE001  (the runner's own failure, reported rather than lost)
        events.emit("runner-error", message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return 3


def _main(job: dict[str, Any], events: Events) -> int:
    from compliance.verify.build import BuildError, parse_build
    from compliance.verify.cases import Case

    try:
        spec = parse_build(job["build"], language=job["language"], sources=job["sources"],
                           root=Path(job["staged_root"]), manifest_rel_dir=job["manifest_dir"])
    except BuildError as exc:
        events.emit("invalid", message=str(exc))
        return 0
    import torch

    # The kernel's process copies buffers and little else: one intra-op thread avoids the spin-waits of
    # an oversubscribed pool on a busy CI machine. A C++ kernel may still start threads of its own.
    torch.set_num_threads(1)
    from compliance.verify.backends import BuildFailed, make_backend

    backend = make_backend(spec, Path(job["cache_dir"]), job.get("module"))
    events.emit("build-start")
    started = time.perf_counter()
    try:
        backend.build()
    except (BuildFailed, ImportError) as exc:
        events.emit("build-failed", message=str(exc))
        return 0
    events.emit("build-done", seconds=time.perf_counter() - started)
    remembered: deque[Any] = deque(maxlen=REMEMBERED_OUTPUTS)
    exchange = Path(job["exchange"])
    for index, raw in enumerate(job["cases"]):
        if index < int(job.get("start", 0)):  # run by an earlier process of this kernel
            continue
        events.emit("case-start", index=index)
        stop = run_case(backend, Case.from_json(raw), exchange, index, remembered)
        events.emit("case-done", index=index)
        if stop and index + 1 < len(job["cases"]):
            events.emit("aborted", message="stopped after a CUDA error; later cases were not run")
            return 0
    events.emit("done", compile_seconds=getattr(backend, "compile_seconds", None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
