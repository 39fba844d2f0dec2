"""What a verification must cover (the rule set's ``verification_coverage``) and what it did (no torch).

A rule set states, per kernel category, the least a kernel's verification must reach: embedding dims,
bag lengths, number of tables, the index range (rows of the largest table), pooling modes, dtypes.
Verification never leaves a kernel's declared domain, so a domain narrower than that minimum (``dims:
[4]``) means the kernel was verified only where it chose to be: ``verify-coverage-narrow``, an error
in rounds with a custom-kernel decision (the rule set's ``checks:``), a warning elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compliance.manifest import Semantics as KernelSemantics
    from compliance.verify.cases import Case


def _dim_admitted(semantics: KernelSemantics, dim: int) -> bool:
    domain = semantics.domain
    if domain.dims and dim in domain.dims:
        return True
    if domain.dim_range is not None:
        r = domain.dim_range
        return bool(r.low <= dim <= r.high and dim % r.multiple_of == 0)
    return not domain.dims


def missing(semantics: KernelSemantics, minimum: Mapping[str, Any]) -> list[str]:
    """What of ``minimum`` the kernel's declared semantics and domain leave out (empty: nothing)."""
    domain = semantics.domain
    out = [f"dim {d}" for d in minimum.get("dims", ()) if not _dim_admitted(semantics, d)]
    lookups = minimum.get("lookups", {}) if semantics.op == "embedding_bag" else {}  # pooling only
    for end in ("min", "max"):
        if end in lookups and not domain.lookups.contains(int(lookups[end])):
            out.append(f"bags of {lookups[end]} lookups")
    tables = minimum.get("tables")
    if tables is not None and semantics.tables is not None and not domain.tables.contains(int(tables)):
        out.append(f"{tables} tables in one call")
    rows = minimum.get("max_rows")
    if rows is not None and domain.max_rows is not None and domain.max_rows < int(rows):
        out.append(f"tables of {rows} rows")
    if semantics.op == "embedding_bag":
        out += [f"mode {m}" for m in minimum.get("modes", ()) if m not in semantics.modes]
    out += [f"{d} tables" for d in minimum.get("weight_dtypes", ()) if d not in semantics.weight_dtypes]
    out += [f"{d} indices" for d in minimum.get("index_dtypes", ()) if d not in semantics.index_dtypes]
    return out


def covered(cases: Sequence[Case]) -> str:
    """What the generated cases reached: ``dims 1..256 (9 distinct), bags of 0..1000 lookups, ...`` (the
    cases in undeclared modes are named apart: they test refusal, not coverage)."""
    from compliance.verify.cases import UNDECLARED_MODE

    probed = sorted({c.mode for c in cases if UNDECLARED_MODE in c.tags})
    cases = [c for c in cases if UNDECLARED_MODE not in c.tags]
    if not cases:
        return "nothing"
    dims = sorted({c.dim for c in cases})
    bags = [n for c in cases for n in (c.bag_lengths or (c.pooling,))]
    rows = max(c.num_embeddings for c in cases)
    parts = [f"dims {_span(dims)} ({len(dims)} distinct)", f"bags of {min(bags)}..{max(bags)} lookups",
             f"{_span(sorted({c.num_tables for c in cases}))} table(s)", f"up to {rows} rows"]
    for label, values in (("modes", {c.mode for c in cases if c.op == "embedding_bag"}),
                          ("tables in", {c.weight_dtype for c in cases}), ("indices", {c.index_dtype for c in cases})):
        if values:
            parts.append(f"{label} {', '.join(sorted(values))}")
    if probed:
        parts.append(f"undeclared modes called: {', '.join(probed)}")
    return "; ".join(parts)


def _span(values: Sequence[int]) -> str:
    return str(values[0]) if values[0] == values[-1] else f"{values[0]}..{values[-1]}"
