"""The verification subprocess: ``python -m compliance.verify.kernel_process JOB.json``.

One process per kernel, so a crash, an illegal memory access or a hang costs
only that kernel. The parent (``compliance.verify.driver``) passes a job file
and a pipe (``COMPLIANCE_VERIFY_EVENT_FD``); this process writes one JSON event
per line to it (build start/done/failed, case start/result, done) and leaves its
stdout/stderr (compiler output, kernel prints) to a log file the parent reads
for excerpts.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compliance.verify import specs as rules

EVENT_FD_VARIABLE = "COMPLIANCE_VERIFY_EVENT_FD"
REMEMBERED_OUTPUTS = 8
"""Returned outputs kept alive so that a kernel returning an old buffer is caught."""


class Events:
    """Writes JSON events to the parent's pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def emit(self, event: str, **fields: Any) -> None:
        """One event line."""
        data = (json.dumps({"event": event, **fields}, default=str) + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]


def _problem(rule: str, message: str, **details: Any) -> dict[str, Any]:
    return {"rule": rule, "message": message, "details": details}


def _run_once(backend: Any, case: Any, inputs: Any, large_table: Any,
              remembered: deque[Any]) -> tuple[Any, list[dict[str, Any]]]:
    """One call of the kernel on fresh copies; (output on the CPU or None, problems)."""
    import math

    import torch

    from compliance.verify.tensors import DTYPES, compare, guarded, guarded_output

    device = backend.device
    oob = case.num_embeddings + 12345
    weight = large_table if large_table is not None else guarded(inputs.weight, math.nan, device)
    given = {"weight": weight, "indices": guarded(inputs.indices, oob, device)}
    if inputs.offsets is not None:
        given["offsets"] = guarded(inputs.offsets, oob, device)
    if inputs.psw is not None:
        given["per_sample_weights"] = guarded(inputs.psw, math.nan, device)
    for name, tensor in inputs.extra.items():
        given[name] = guarded(tensor, math.nan if tensor.is_floating_point() else oob, device)
    fused = case.backward in FUSED
    returns = getattr(backend.spec, "returns_output", False) and not fused
    out = None if returns or fused else guarded_output(inputs.out_shape, DTYPES[case.out_dtype], device)
    tensors: dict[str, Any] = {k: g.view for k, g in given.items()}
    if out is not None:
        tensors["out"] = out.view
    problems: list[dict[str, Any]] = []
    result = backend.call(case, tensors)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if fused:
        from compliance.verify.updates import judge_update

        return judge_update(case, inputs, given)
    output = out.view if out is not None else _returned(result, inputs, case, given, remembered, problems)
    if output is None:
        return None, problems
    cmp = compare(output, inputs.reference, inputs.bound, prefilled=out is not None)
    if cmp.unwritten:
        problems.append(_problem(rules.UNWRITTEN.id, f"{cmp.unwritten} of {output.numel()} output elements "
                                 "were never written (still the NaN prefill)", positions=cmp.positions))
    if cmp.mismatched > cmp.unwritten:
        problems += _mismatch(case, inputs, output, cmp)
    changed = sorted(k for k, g in given.items() if g.changed())
    if large_table is not None and not torch.equal(large_table.view[inputs.rows.to(device)].cpu(), inputs.weight_rows):
        changed.append("weight")
    if changed:
        problems.append(_problem(rules.INPUT_MODIFIED.id, f"the kernel modified its input(s): {', '.join(changed)}",
                                 inputs=changed))
    if out is not None and out.guards_changed():
        problems.append(_problem(rules.OUT_OF_BOUNDS_WRITE.id,
                                 "the kernel wrote outside its output tensor (guard bytes changed)"))
    return {"output": output.detach().to("cpu").clone(), "cmp": cmp}, problems


FUSED = ("sgd", "rowwise_adagrad")
"""Backward kinds that update the table in place (compliance.verify.semantics.FUSED_KINDS)."""


def _mismatch(case: Any, inputs: Any, output: Any, cmp: Any) -> list[dict[str, Any]]:
    """verify-mismatch (naming the tables that are wrong for table-batched bags), and the diagnosis
    verify-accumulation-precision when every wrong element fits a 16-bit accumulation."""
    import torch

    from compliance.verify.vocabulary import UNIT_ROUNDOFF

    where = ""
    if case.num_tables > 1 and cmp.bad is not None:  # [B, T * D] pooled, [B, T * L, D] unpooled
        lookups = 1 if case.op == "embedding_bag" else case.pooling
        per_table = cmp.bad.reshape(case.batch_size, case.num_tables, lookups * case.dim).any(dim=2).any(dim=0)
        wrong = per_table.nonzero().flatten().tolist()
        where = f"; wrong in table(s) {wrong} of {case.num_tables}"
    found = [_problem(
        rules.MISMATCH.id, f"{cmp.mismatched - cmp.unwritten} of {output.numel()} elements outside the "
        f"error bound ({cmp.nonfinite} of them NaN or inf); largest finite error {cmp.max_error:.3g} "
        f"(worst error/bound {cmp.worst_ratio:.3g}){where}",
        positions=cmp.positions, max_error=cmp.max_error, worst_ratio=cmp.worst_ratio)]
    half = inputs.half_sum
    if half is not None and cmp.bad is not None and not cmp.nonfinite:
        y = output.detach().to("cpu", torch.float64).reshape(half.shape)
        u_half = max(UNIT_ROUNDOFF[case.weight_dtype], UNIT_ROUNDOFF[case.out_dtype])
        close = ((y - half).abs() <= 2 * u_half * half.abs() + inputs.bound.min()).reshape(cmp.bad.shape)
        # More than one 16-bit rounding of the exact result somewhere: not just a 16-bit temporary.
        beyond = ((y - inputs.reference.reshape(y.shape)).abs() > 2 * u_half * half.abs()).reshape(cmp.bad.shape)
        if bool(close[cmp.bad].all()) and bool(beyond[cmp.bad].any()):
            found.append(_problem(
                rules.ACCUMULATION_PRECISION.id, f"every element outside the float32 bound ({cmp.mismatched}) "
                f"equals, to one rounding, a sum in 16 bits ({case.weight_dtype} table, {case.out_dtype} "
                "output): the kernel accumulates in half precision"))
    return found


def _returned(result: Any, inputs: Any, case: Any, given: Mapping[str, Any], remembered: deque[Any],
              problems: list[dict[str, Any]]) -> Any:
    """Validate a returned output; None (with a problem) when unusable."""
    import torch

    if isinstance(result, (tuple, list)) and result:
        result = result[0]
    if not isinstance(result, torch.Tensor):
        problems.append(_problem(rules.OUTPUT_INVALID.id, f"the function returned {type(result).__name__}, "
                                 "not a tensor"))
        return None
    from compliance.verify.tensors import DTYPES

    want_dtype = DTYPES[case.out_dtype]
    if result.numel() == inputs.reference.numel() and result.is_contiguous() and result.dtype == want_dtype:
        result = result.view(inputs.out_shape)  # [B, T * D] and [B, T, D] are the same memory
    if tuple(result.shape) != inputs.out_shape or result.dtype != want_dtype:
        problems.append(_problem(rules.OUTPUT_INVALID.id, f"returned {tuple(result.shape)} {result.dtype}, "
                                 f"expected {inputs.out_shape} {want_dtype}"))
        return None
    storage = result.untyped_storage().data_ptr()
    aliases = sorted(k for k, g in given.items() if g.buffer.untyped_storage().data_ptr() == storage)
    if any(r.untyped_storage().data_ptr() == storage for r in remembered):
        aliases.append("the output of an earlier call")
    if aliases:
        problems.append(_problem(rules.OUTPUT_INVALID.id, "the returned tensor is the memory of "
                                 f"{', '.join(aliases)}, not a fresh output"))
        return None
    remembered.append(result)
    return result


def run_case(backend: Any, case: Any, bound: Any, remembered: deque[Any]) -> dict[str, Any]:
    """Both runs of one case; the result event's fields."""
    import torch

    from compliance.verify.tensors import Guarded, half_accumulation, make_inputs

    started = time.perf_counter()
    inputs = make_inputs(case, bound, backend.device)
    inputs.half_sum = half_accumulation(case, inputs)
    large_table = None
    if case.large:
        large_table = Guarded(inputs.weight, inputs.weight, None)
        inputs.weight_rows = inputs.weight[inputs.rows.to(inputs.weight.device)].cpu()
    runs, problems = [], []
    for _ in range(2):
        run, found = _run_once(backend, case, inputs, large_table, remembered)
        problems += [p for p in found if p not in problems]
        if run is not None:
            runs.append(run)
    if len(runs) == 2 and not torch.equal(_bytes(runs[0]["output"]), _bytes(runs[1]["output"])):
        problems.append(_problem(rules.NONDETERMINISTIC.id, "two runs on the same inputs gave different "
                                 "results"))
    worst = max(runs, key=lambda r: r["cmp"].worst_ratio)["cmp"] if runs else None
    return {"status": "fail" if problems else "pass", "problems": problems,
            "max_error": worst.max_error if worst else None, "bound": worst.bound_at_max if worst else None,
            "worst_ratio": worst.worst_ratio if worst else None, "seconds": time.perf_counter() - started}


def _bytes(t: Any) -> Any:
    import torch

    return t.contiguous().reshape(-1).view(torch.uint8)


def case_bound(case: Any, bounds: Mapping[str, Any]) -> Any:
    """The rule set's bound parameters for a case: those of the table's dtype for an in-place update,
    else of the narrower of the table and output dtypes (the last rounding is into it)."""
    from compliance.verify.vocabulary import ELEM_SIZE

    if case.backward in FUSED:
        return bounds[case.weight_dtype]
    return bounds[min((case.weight_dtype, case.out_dtype), key=lambda d: ELEM_SIZE[d])]


def _missing_runtime(kind: str) -> str | None:
    """Why the runtime of a build kind cannot be loaded here (None: it can)."""
    try:
        if kind == "nvrtc":
            from compliance.verify.nvrtc import bindings

            bindings()
        elif kind == "triton":
            import triton  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        return f"the {kind} runtime is not installed ({exc})"
    return None


def main(argv: list[str]) -> int:
    """Run one kernel's job; the exit status is 0 unless this process itself broke."""
    job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    events = Events(int(os.environ[EVENT_FD_VARIABLE]))
    try:
        return _main(job, events)
    except Exception as exc:  # noqa: BLE001  (the runner's own failure, reported rather than lost)
        events.emit("runner-error", message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return 3


def _main(job: dict[str, Any], events: Events) -> int:
    from compliance.verify.build import BuildError, parse_build
    from compliance.verify.cases import Case
    from compliance.verify.tolerance import Bound

    try:
        spec = parse_build(job["build"], language=job["language"], sources=job["sources"],
                           root=Path(job["root"]), manifest_rel_dir=job["manifest_dir"])
    except BuildError as exc:
        events.emit("invalid", message=str(exc))
        return 0
    try:
        import torch
    except ImportError as exc:
        events.emit("unavailable", message=f"torch is not installed ({exc}); pip install "
                    "'mlperf-kernel-compliance[kernels]'")
        return 0
    # The verifier's own tensors (inputs, float64 references, comparisons) are small: one intra-op
    # thread avoids the spin-waits of an oversubscribed pool, which on a busy CI machine made them
    # 30 times slower. It does not limit the kernel: a C++ kernel may still start threads of its own.
    torch.set_num_threads(1)
    if spec.device == "cuda" and not torch.cuda.is_available():
        events.emit("unavailable", message="this kernel needs an NVIDIA GPU and torch sees none")
        return 0
    missing = _missing_runtime(spec.kind)
    if missing:
        events.emit("unavailable", message=missing)
        return 0
    from compliance.verify.backends import BuildFailed, LaunchInvalid, make_backend

    backend = make_backend(spec, Path(job["build_root"]))
    events.emit("build-start")
    started = time.perf_counter()
    try:
        backend.build()
    except (BuildFailed, ImportError) as exc:
        events.emit("build-failed", message=str(exc))
        return 0
    events.emit("build-done", seconds=time.perf_counter() - started)
    bounds = {k: Bound(**v) for k, v in job["bounds"].items()}
    remembered: deque[Any] = deque(maxlen=REMEMBERED_OUTPUTS)
    for index, raw in enumerate(job["cases"]):
        case = Case.from_json(raw)
        events.emit("case-start", index=index, case=case.id, description=case.describe())
        try:
            result = run_case(backend, case, case_bound(case, bounds), remembered)
        except (BuildFailed, LaunchInvalid) as exc:
            rule = rules.BUILD_FAILED.id if isinstance(exc, BuildFailed) else rules.BUILD_INVALID.id
            result = {"status": "fail", "problems": [_problem(rule, str(exc))]}
        except Exception as exc:  # noqa: BLE001  (the kernel raised; on a GPU the context may be gone)
            message = f"the kernel call raised {type(exc).__name__}: {exc}"
            result = {"status": "fail", "problems": [_problem(rules.CRASH.id, message)]}
            events.emit("case-result", index=index, case=case.id, **result)
            if backend.device.type == "cuda" and index + 1 < len(job["cases"]):
                events.emit("aborted", message="stopped after a CUDA error; later cases were not run")
                return 0
            continue
        events.emit("case-result", index=index, case=case.id, **result)
    events.emit("done", compile_seconds=getattr(backend, "compile_seconds", None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
