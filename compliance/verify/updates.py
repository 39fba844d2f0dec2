"""Judging a fused in-place update (kernel subprocess only): every row of the table, touched and untouched.

The kernel ran on a guarded copy of the table (and of the optimizer state);
rows the batch references must lie within the bound of the float64 update
(``compliance.verify.backward``), every other row must be bit-identical to
its value before the call, the guard bands must be intact and every other
input unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from compliance.rulespecs import verify as rules
from compliance.verify.case_inputs import CaseInputs
from compliance.verify.cases import Case
from compliance.verify.tensors import Guarded, compare

STATE = ("weight", "momentum")
"""Buffers a fused update writes."""
LISTED_ROWS = 5
"""Rows named in a message."""


def _problem(rule: str, message: str, **details: Any) -> dict[str, Any]:
    return {"rule": rule, "message": message, "details": details}


def _changed_rows(after: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """Per row (first dimension): any byte differs."""
    a = after.contiguous().view(torch.uint8).reshape(after.shape[0], -1)
    b = before.contiguous().view(torch.uint8).reshape(before.shape[0], -1)
    return (a != b).any(dim=1)


def _rows_text(mask: torch.Tensor) -> str:
    rows = mask.nonzero().flatten()
    shown = ", ".join(str(r) for r in rows[:LISTED_ROWS].tolist())
    return shown + (", ..." if rows.numel() > LISTED_ROWS else "")


def judge_update(case: Case, inputs: CaseInputs,
                 given: Mapping[str, Guarded]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the updated table on the CPU and its comparison, problems) of one call."""
    problems: list[dict[str, Any]] = []
    touched, repeated = inputs.expected["touched"], inputs.expected["repeated"]
    after = given["weight"].view.detach().to("cpu")
    cmp = compare(after, inputs.reference, inputs.bound, prefilled=False)
    stray = _changed_rows(after, inputs.weight) & ~touched
    if "momentum" in inputs.expected:
        state = given["momentum"].view.detach().to("cpu")
        stray |= _changed_rows(state[:, None], inputs.expected["momentum_before"][:, None]) & ~touched
        state_cmp = compare(state, inputs.expected["momentum"], inputs.expected["momentum_bound"], prefilled=False)
        if state_cmp.bad is not None and bool((state_cmp.bad & touched).any()):
            problems.append(_problem(rules.UPDATE_MISMATCH.id, f"the row-wise Adagrad state of "
                                     f"{int((state_cmp.bad & touched).sum())} referenced row(s) is outside its "
                                     f"bound (rows {_rows_text(state_cmp.bad & touched)})",
                                     positions=state_cmp.positions))
    if bool(stray.any()):
        problems.append(_problem(rules.UNTOUCHED_MODIFIED.id, f"{int(stray.sum())} of {int((~touched).sum())} "
                                 f"rows no index references changed (rows {_rows_text(stray)})"))
    wrong = cmp.bad.any(dim=1) & touched if cmp.bad is not None else touched & False
    if bool(wrong.any()):
        once, several = touched & ~repeated, repeated
        problems.append(_problem(
            rules.UPDATE_MISMATCH.id, f"{int(wrong.sum())} of {int(touched.sum())} referenced rows outside the "
            f"bound of the float64 update: {int((wrong & once).sum())} of {int(once.sum())} rows referenced "
            f"once, {int((wrong & several).sum())} of {int(several.sum())} rows referenced several times; "
            f"worst error/bound {cmp.worst_ratio:.3g}", positions=cmp.positions, worst_ratio=cmp.worst_ratio))
    outside = sorted(k for k in STATE if k in given and given[k].guards_changed())
    if outside:
        problems.append(_problem(rules.OUT_OF_BOUNDS_WRITE.id, f"the update wrote outside {', '.join(outside)} "
                                 "(guard bytes changed)"))
    changed = sorted(k for k, g in given.items() if k not in STATE and g.changed())
    if changed:
        problems.append(_problem(rules.INPUT_MODIFIED.id, f"the kernel modified its input(s): {', '.join(changed)}",
                                 inputs=changed))
    return {"output": after.clone(), "cmp": cmp}, problems
