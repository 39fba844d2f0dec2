"""Judging a gradient returned as a sparse COO tensor or as (row ids, rows) (the verifier's process).

Both forms are coalesced here, in float64: rows that occur several times are summed
(a kernel may return one row per lookup, as an unpooled gather's gradient is, or one
row per distinct row). The coalesced row ids must equal, exactly, the rows the batch
references (table offsets included); the summed rows must lie within the bound of
the float64 gradient. The values may be the incoming gradient's memory (an
unpooled gather's gradient is ``grad_out`` itself), never an earlier call's output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from compliance.rulespecs import verify as rules
from compliance.verify.case_inputs import DTYPES, CaseInputs
from compliance.verify.cases import Case
from compliance.verify.tensors import Comparison, compare

LISTED_ROWS = 5
"""Row ids named in a message."""

Judged = tuple[torch.Tensor, Comparison]


def _problem(rule: str, message: str, **details: Any) -> dict[str, Any]:
    return {"rule": rule, "message": message, "details": details}


def _invalid(message: str) -> tuple[None, list[dict[str, Any]]]:
    return None, [_problem(rules.OUTPUT_INVALID.id, message)]


def _describe(entry: Mapping[str, Any]) -> str:
    if entry["kind"] == "sparse":
        return (f"a sparse tensor of size {list(entry['size'])} with indices {list(entry['indices'].shape)} "
                f"and values {list(entry['values'].shape)} {entry['values'].dtype}")
    if entry["kind"] == "dense":
        return f"a dense tensor {list(entry['tensor'].shape)} {entry['tensor'].dtype}"
    return str(entry.get("type"))


def _coo(case: Case, entries: list[Mapping[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, int] | str:
    """(row ids, values, storage of the values) of a returned sparse COO tensor, or why it is unusable."""
    want = DTYPES[case.grad_dtype]
    entry: Mapping[str, Any] = entries[0] if entries else {"kind": "other", "type": "None"}
    expected = f"a sparse COO tensor of size [{case.num_embeddings}, {case.dim}] with {want} values"
    if entry["kind"] != "sparse":
        return f"the function returned {_describe(entry)}, expected {expected}"
    indices, values = entry["indices"], entry["values"]
    if list(entry["size"]) != [case.num_embeddings, case.dim] or indices.dim() != 2 or indices.shape[0] != 1 \
            or tuple(values.shape) != (indices.shape[1], case.dim) or values.dtype != want:
        return f"the function returned {_describe(entry)}, expected {expected} (one sparse dimension)"
    return indices[0], values, int(entry["storage"])


def _rows(case: Case, entries: list[Mapping[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, int] | str:
    """(row ids, values, storage of the values) of a returned pair of tensors, or why it is unusable."""
    want = DTYPES[case.grad_dtype]
    dense = [e for e in entries if e["kind"] == "dense"]
    ids = [e["tensor"] for e in dense if not e["tensor"].is_floating_point()]
    rows = [e for e in dense if e["tensor"].is_floating_point()]
    what = ", ".join(_describe(e) for e in entries) or "nothing"
    expected = f"row ids [R] and rows [R, {case.dim}] {want}"
    if len(entries) != 2 or len(ids) != 1 or len(rows) != 1:
        return f"the function returned {what}, expected {expected}"
    values = rows[0]["tensor"]
    if ids[0].dim() != 1 or tuple(values.shape) != (ids[0].numel(), case.dim) or values.dtype != want:
        return f"the function returned {what}, expected {expected}"
    return ids[0], values, int(rows[0]["storage"])


def _tables(case: Case, rows: torch.Tensor) -> list[int]:
    """The tables the given stacked rows belong to."""
    offsets = torch.tensor(case.row_offsets, dtype=torch.int64)
    return sorted(set((torch.searchsorted(offsets, rows, right=True) - 1).tolist()))


def _listed(rows: torch.Tensor) -> str:
    shown = ", ".join(str(r) for r in rows[:LISTED_ROWS].tolist())
    return shown + (", ..." if rows.numel() > LISTED_ROWS else "")


def judge_sparse(case: Case, inputs: CaseInputs,
                 result: Mapping[str, Any]) -> tuple[Judged | None, list[dict[str, Any]]]:
    """((raw bytes for the determinism check, comparison of the coalesced rows) or None, problems)."""
    got = (_coo if case.backward == "grad-sparse_coo" else _rows)(case, list(result["returned"]))
    if isinstance(got, str):
        return _invalid(got)
    ids, values, storage = got
    given: Mapping[str, int] = result["given_storage"]
    if storage in result["earlier_storage"] and storage not in given.values():
        return _invalid("the returned values are the memory of an earlier call's output, not fresh")
    ids = ids.to(torch.int64)
    outside = (ids < 0) | (ids >= case.num_embeddings)
    if bool(outside.any()):
        return None, [_problem(rules.GRADIENT_ROWS.id, f"{int(outside.sum())} row id(s) outside the table "
                               f"(0..{case.num_embeddings - 1}): {_listed(ids[outside])}")]
    coalesced = torch.sparse_coo_tensor(ids[None], values.to(torch.float64), (case.num_embeddings, case.dim),
                                        check_invariants=True).coalesce()
    rows, sums = coalesced.indices()[0], coalesced.values()
    keep = _padding_rows_dropped(rows, sums, inputs)
    rows, sums = rows[keep], sums[keep]
    want: torch.Tensor = inputs.expected["rows"]
    if not torch.equal(rows, want):
        return None, [_rows_problem(case, rows, want)]
    raw = torch.cat([ids.contiguous().view(torch.uint8), values.contiguous().reshape(-1).view(torch.uint8)])
    return (raw, compare(sums, inputs.reference, inputs.bound, prefilled=False)), []


def _padding_rows_dropped(rows: torch.Tensor, sums: torch.Tensor, inputs: CaseInputs) -> torch.Tensor:
    """Mask of the rows to compare: a row only padding lookups reference may be returned with zeros."""
    touched = torch.zeros(inputs.expected["referenced"].shape[0], dtype=torch.bool)
    touched[inputs.expected["rows"]] = True
    padding_only: torch.Tensor = inputs.expected["referenced"][rows] & ~touched[rows] & (sums == 0).all(dim=1)
    return ~padding_only


def _rows_problem(case: Case, rows: torch.Tensor, want: torch.Tensor) -> dict[str, Any]:
    extra = rows[~torch.isin(rows, want)]
    missing = want[~torch.isin(want, rows)]
    parts = []
    if extra.numel():
        parts.append(f"{extra.numel()} row(s) no lookup references ({_listed(extra)})")
    if missing.numel():
        parts.append(f"{missing.numel()} referenced row(s) missing ({_listed(missing)})")
    where = ""
    if case.num_tables > 1:
        where = f"; wrong in table(s) {_tables(case, torch.cat([extra, missing]))} of {case.num_tables}"
    return _problem(rules.GRADIENT_ROWS.id, "the gradient's row ids differ from the rows the batch references: "
                    + "; ".join(parts) + where, extra=extra[:LISTED_ROWS].tolist(),
                    missing=missing[:LISTED_ROWS].tolist())
