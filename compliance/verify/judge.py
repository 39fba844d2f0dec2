"""The verifier's side of a case (the parent process; submission code never runs here).

The kernel's process (``compliance.verify.kernel_process``) gets each case's input
buffers from a file this module writes, calls the kernel twice on fresh copies and
writes back what it has afterwards: every buffer it was given (guard bands
included) and whatever the function returned. Everything else happens here, in a
process that never loads the submission: the inputs and the float64 reference
are made here, and the comparison, the guard and input checks, the aliasing
checks and the verdict are computed here from those tensors. Nothing the kernel's
process says (on its event pipe or anywhere else) can make a case pass: a case
passes only when both result files hold tensors that this module judges correct.
docs/verification.md ("Trust model") states what that proves and what it cannot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from compliance.rulespecs import verify as rules
from compliance.semantics import FUSED_KINDS
from compliance.verify.case_inputs import DTYPES, CaseInputs
from compliance.verify.cases import Case
from compliance.verify.sparse import judge_sparse
from compliance.verify.tensors import (
    GUARD,
    Guarded,
    compare,
    guarded,
    guarded_output,
    half_accumulation,
    make_inputs,
)
from compliance.verify.tolerance import Bound
from compliance.verify.vocabulary import ELEM_SIZE, UNIT_ROUNDOFF

RUNS = 2
"""Calls per case, each on fresh copies of the inputs."""
STATE = ("weight", "momentum")
"""Buffers a fused update writes (every other buffer is an input that must come back unchanged)."""


def problem(rule: str, message: str, **details: Any) -> dict[str, Any]:
    """One problem of a case: rule id, message, details."""
    return {"rule": rule, "message": message, "details": details}


def fused(case: Case) -> bool:
    """True for an in-place optimizer update."""
    return case.backward in FUSED_KINDS


def sparse_gradient(case: Case) -> bool:
    """True for a gradient returned as a sparse COO tensor or as (row ids, rows)."""
    return case.backward in ("grad-sparse_coo", "grad-rows")


def case_bound(case: Case, bounds: Mapping[str, Bound]) -> Bound:
    """The rule set's bound parameters for a case: those of the table's dtype for an in-place update,
    else of the narrowest dtype among the table, the output and the returned gradient (the last
    rounding is into it)."""
    if fused(case):
        return bounds[case.weight_dtype]
    floats = [d for d in (case.weight_dtype, case.out_dtype, case.grad_dtype) if d in bounds]  # not int8 codes
    return bounds[min(floats, key=lambda d: ELEM_SIZE[d])]


@dataclass
class Prepared:
    """One case's inputs as sent to the kernel's process, with what judging needs."""

    case: Case
    """The case."""
    inputs: CaseInputs
    """Pristine inputs, reference and bound."""
    sent: dict[str, Guarded]
    """Every buffer sent, by vocabulary name (``out`` too when the kernel writes into one)."""
    large_rows: torch.Tensor | None = None
    """Large case: the referenced rows, which the kernel's process fills in its table."""


def prepare(case: Case, bound: Bound, returns_output: bool) -> Prepared:
    """Inputs of ``case`` inside guard bands, and the NaN-poisoned output when the kernel writes into one."""
    inputs = make_inputs(case, bound)
    inputs.half_sum = half_accumulation(case, inputs)
    oob = case.num_embeddings + 12345  # an index no table has: reading the guard band picks it up
    cpu = torch.device("cpu")
    sent: dict[str, Guarded] = {"indices": guarded(inputs.indices, oob, cpu)}
    if not case.large:
        sent["weight"] = guarded(inputs.weight, guard_fill(inputs.weight, oob), cpu)
    if inputs.offsets is not None:
        sent["offsets"] = guarded(inputs.offsets, oob, cpu)
    if inputs.psw is not None:
        sent["per_sample_weights"] = guarded(inputs.psw, math.nan, cpu)
    for name, tensor in inputs.extra.items():
        sent[name] = guarded(tensor, guard_fill(tensor, oob), cpu)
    if not (returns_output or fused(case)):
        sent["out"] = guarded_output(inputs.out_shape, DTYPES[case.out_dtype], cpu)
    return Prepared(case, inputs, sent, inputs.rows if case.large else None)


def guard_fill(tensor: torch.Tensor, index_fill: int) -> float:
    """What a buffer's guard bands hold: NaN around floats, ``index_fill`` (an index no table has) around
    indices; around quantized codes the byte 0x80 (int8 -128, a code the cases never use; fp8 -0) or 0xFF
    (uint8: an fp16 scale or bias of 0xFFFF in a fused row is NaN)."""
    if tensor.is_floating_point():
        return math.nan
    if tensor.dtype == torch.int8:
        return -128
    if tensor.dtype == torch.uint8:
        return 255
    return index_fill


def write_inputs(prepared: Prepared, path: Path) -> None:
    """The file the kernel's process reads: whole buffers (guards included) and the views' shapes."""
    payload: dict[str, Any] = {
        "buffers": {name: g.buffer for name, g in prepared.sent.items()},
        "shapes": {name: list(g.view.shape) for name, g in prepared.sent.items()}}
    if prepared.large_rows is not None:
        payload["large"] = {"rows": prepared.large_rows, "values": prepared.inputs.weight}
    torch.save(payload, path)


def read_result(path: Path) -> dict[str, Any] | str:
    """One run's result file, or why it is unusable (a file the kernel's process wrote: data only)."""
    try:
        data = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001  (anything in that file is the submission's doing)
        return f"its result file cannot be read as tensors ({type(exc).__name__})"
    return data if isinstance(data, dict) else f"its result file holds {type(data).__name__}, not a mapping"


def judge(prepared: Prepared, results: list[dict[str, Any] | str]) -> dict[str, Any]:
    """Both runs of one case judged: status, problems, worst error (the fields of a case outcome)."""
    problems: list[dict[str, Any]] = []
    outputs: list[tuple[torch.Tensor, Any]] = []
    seconds = 0.0
    for result in results:
        try:
            output, found = _judge_run(prepared, result)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
            output, found = None, [problem(rules.OUTPUT_INVALID.id, "the kernel's process sent back a malformed "
                                           f"result ({type(exc).__name__}: {str(exc)[:200]})")]
        problems += [p for p in found if p not in problems]
        if output is not None:
            outputs.append(output)
        if isinstance(result, dict) and isinstance(result.get("seconds"), float):
            seconds += result["seconds"]
    if len(outputs) == RUNS and not torch.equal(outputs[0][0], outputs[1][0]):
        problems.append(problem(rules.NONDETERMINISTIC.id, "two runs on the same inputs gave different results"))
    worst = max((o[1] for o in outputs), key=lambda c: c.worst_ratio) if outputs else None
    return {"status": "fail" if problems else "pass", "problems": problems,
            "max_error": worst.max_error if worst else None, "bound": worst.bound_at_max if worst else None,
            "worst_ratio": worst.worst_ratio if worst else None, "seconds": seconds}


ERROR_RULES = {"build-failed": rules.BUILD_FAILED.id, "launch-invalid": rules.BUILD_INVALID.id,
               "raised": rules.CRASH.id}
"""What a run that did not return means, by the kind the kernel's process gave."""


def _judge_run(prepared: Prepared, result: dict[str, Any] | str) -> tuple[Any, list[dict[str, Any]]]:
    """(output bytes and comparison, or None; problems) of one run."""
    if isinstance(result, str):
        return None, [problem(rules.OUTPUT_INVALID.id, result)]
    error = result.get("error")
    if error is not None:
        rule = ERROR_RULES.get(str(error.get("kind")), rules.CRASH.id)
        return None, [problem(rule, str(error.get("message", "the call failed"))[:2000])]
    case, inputs = prepared.case, prepared.inputs
    received = _received(prepared, result["buffers"])
    if fused(case):
        from compliance.verify.updates import judge_update

        run, found = judge_update(case, inputs, received)
        return (_bytes(run["output"]), run["cmp"]), found
    judged: tuple[torch.Tensor, Any] | None = None
    output: torch.Tensor | None = None
    if sparse_gradient(case):
        judged, problems = judge_sparse(case, inputs, result)
    else:
        problems = []
        output = received["out"].view if "out" in received else _returned(case, inputs, result, problems)
        if output is not None:
            judged = _bytes(output), compare(output, inputs.reference, inputs.bound, prefilled="out" in received,
                                             dequantize=inputs.dequantize)
    problems += _inputs_intact(prepared, received, result)
    if judged is None:
        return None, problems
    cmp = judged[1]
    if cmp.unwritten:
        problems.append(problem(rules.UNWRITTEN.id, f"{cmp.unwritten} of {inputs.reference.numel()} output "
                                "elements were never written (still the NaN poison)", positions=cmp.positions,
                                unwritten=cmp.unwritten, elements=inputs.reference.numel()))
    if cmp.mismatched > cmp.unwritten:
        problems += mismatch(case, inputs, output, cmp)
    return judged, problems


def _received(prepared: Prepared, buffers: Mapping[str, Any]) -> dict[str, Guarded]:
    """The buffers the kernel's process sent back, beside their pristine bytes."""
    out: dict[str, Guarded] = {}
    for name, sent in prepared.sent.items():
        buffer = buffers[name]
        if not isinstance(buffer, torch.Tensor) or buffer.dtype != sent.buffer.dtype \
                or buffer.shape != sent.buffer.shape:
            raise ValueError(f"buffer {name} came back changed in shape or dtype")
        view = buffer[GUARD:GUARD + sent.view.numel()].view(sent.view.shape)
        out[name] = Guarded(buffer, view, sent.pristine)
    return out


def _inputs_intact(prepared: Prepared, received: Mapping[str, Guarded],
                   result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """verify-input-modified and verify-out-of-bounds-write from the buffers that came back."""
    found = []
    changed = sorted(k for k, g in received.items() if k != "out" and g.changed())
    if prepared.large_rows is not None:
        after = result["large_rows"]
        if not isinstance(after, torch.Tensor) or not torch.equal(after, prepared.inputs.weight):
            changed.append("weight")
    if changed:
        found.append(problem(rules.INPUT_MODIFIED.id, f"the kernel modified its input(s): {', '.join(changed)}",
                             inputs=changed))
    if "out" in received and received["out"].guards_changed():
        found.append(problem(rules.OUT_OF_BOUNDS_WRITE.id,
                             "the kernel wrote outside its output tensor (guard bytes changed)"))
    return found


def _returned(case: Case, inputs: CaseInputs, result: Mapping[str, Any], problems: list[dict[str, Any]]) -> Any:
    """A returned dense output, checked for shape, dtype and freshness; None (with a problem) when unusable."""
    entries = result["returned"]
    entry: Mapping[str, Any] = entries[0] if entries else {"kind": "other", "type": "None"}
    if entry["kind"] != "dense":
        what = "a sparse tensor" if entry["kind"] == "sparse" else str(entry.get("type"))
        problems.append(problem(rules.OUTPUT_INVALID.id, f"the function returned {what}, not a dense tensor"))
        return None
    tensor = entry["tensor"]
    want = DTYPES[case.grad_dtype if case.backward else case.out_dtype]
    if tensor.numel() == inputs.reference.numel() and tensor.dtype == want:
        tensor = tensor.reshape(inputs.out_shape)  # [B, T * D] and [B, T, D] are the same memory
    if tuple(tensor.shape) != inputs.out_shape or tensor.dtype != want:
        problems.append(problem(rules.OUTPUT_INVALID.id, f"returned {tuple(tensor.shape)} {tensor.dtype}, "
                                f"expected {inputs.out_shape} {want}"))
        return None
    aliases = aliased(entry["storage"], result)
    if aliases:
        problems.append(problem(rules.OUTPUT_INVALID.id, "the returned tensor is the memory of "
                                f"{', '.join(aliases)}, not a fresh output"))
        return None
    return tensor


def aliased(storage: int, result: Mapping[str, Any]) -> list[str]:
    """What a returned tensor's memory is, besides a fresh allocation: inputs, or an earlier call's output."""
    given: Mapping[str, int] = result["given_storage"]
    names = sorted(k for k, ptr in given.items() if ptr == storage)
    if storage in result["earlier_storage"]:
        names.append("the output of an earlier call")
    return names


def mismatch(case: Case, inputs: CaseInputs, output: torch.Tensor | None, cmp: Any) -> list[dict[str, Any]]:
    """verify-mismatch (naming the tables that are wrong for table-batched bags), and the diagnosis
    verify-accumulation-precision when every wrong element fits a 16-bit accumulation."""
    where = ""
    if case.num_tables > 1 and cmp.bad is not None and output is not None and not case.backward:
        lookups = 1 if case.op == "embedding_bag" else case.pooling  # [B, T * D] pooled, [B, T * L, D] unpooled
        per_table = cmp.bad.reshape(case.batch_size, case.num_tables, lookups * case.dim).any(dim=2).any(dim=0)
        where = f"; wrong in table(s) {per_table.nonzero().flatten().tolist()} of {case.num_tables}"
    found = [problem(
        rules.MISMATCH.id, f"{cmp.mismatched - cmp.unwritten} of {cmp.bad.numel() if cmp.bad is not None else 0} "
        f"elements outside the error bound ({cmp.nonfinite} of them NaN or inf); largest finite error "
        f"{cmp.max_error:.3g} (worst error/bound {cmp.worst_ratio:.3g}){where}",
        positions=cmp.positions, max_error=cmp.max_error, worst_ratio=cmp.worst_ratio)]
    half = inputs.half_sum
    if half is not None and output is not None and cmp.bad is not None and not cmp.nonfinite:
        y = output.detach().to("cpu", torch.float64).reshape(half.shape)
        u_half = max(UNIT_ROUNDOFF[case.weight_dtype], UNIT_ROUNDOFF[case.out_dtype])
        close = ((y - half).abs() <= 2 * u_half * half.abs() + inputs.bound.min()).reshape(cmp.bad.shape)
        # More than one 16-bit rounding of the exact result somewhere: not just a 16-bit temporary.
        beyond = ((y - inputs.reference.reshape(y.shape)).abs() > 2 * u_half * half.abs()).reshape(cmp.bad.shape)
        if bool(close[cmp.bad].all()) and bool(beyond[cmp.bad].any()):
            found.append(problem(
                rules.ACCUMULATION_PRECISION.id, f"every element outside the float32 bound ({cmp.mismatched}) "
                f"equals, to one rounding, a sum in 16 bits ({case.weight_dtype} table, {case.out_dtype} "
                "output): the kernel accumulates in half precision"))
    return found


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)
