"""Torch side of a case: inputs, guarded buffers, the float64 reference, the comparison.

Imported only inside the kernel subprocess. Every tensor handed to a kernel is
a fresh copy that lives inside a larger buffer whose guard bands hold NaN
(floats) or an out-of-range index: a kernel that reads past the table picks up
NaN, and any write outside its output (or into its inputs) is seen by comparing
the whole buffers byte for byte with pristine copies afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from compliance.verify.backward import backward_inputs, lookups
from compliance.verify.case_inputs import DTYPES, CaseInputs, absolute_rows, table_of_lookup
from compliance.verify.cases import Case
from compliance.verify.quantized import INT8_OUTPUT_RANGE
from compliance.verify.tolerance import ACCUMULATION_ROUNDOFF, Bound, int8_output_bound, pooled_bound
from compliance.verify.vocabulary import UNIT_ROUNDOFF

GUARD = 64
"""Guard elements on each side of every buffer (keeps 16-byte alignment for any dtype)."""
MAX_POSITIONS = 5
"""Mismatching positions reported per case."""



@dataclass
class Guarded:
    """A tensor inside a buffer with guard bands, plus a pristine copy of the whole buffer."""

    buffer: torch.Tensor
    """GUARD + numel + GUARD elements."""
    view: torch.Tensor
    """The part the kernel gets, shaped."""
    pristine: torch.Tensor | None
    """Byte copy of ``buffer`` before the call (None: the buffer is too large to copy)."""

    def changed(self) -> bool:
        """True when any byte of the buffer differs from the pristine copy."""
        if self.pristine is None:
            return False
        return not torch.equal(_bytes(self.buffer), self.pristine)

    def guards_changed(self) -> bool:
        """True when a guard band differs from its pristine bytes."""
        if self.pristine is None:
            return False
        size = self.buffer.element_size()
        now, before = _bytes(self.buffer), self.pristine
        head, tail = GUARD * size, (GUARD + self.view.numel()) * size
        return not (torch.equal(now[:head], before[:head]) and torch.equal(now[tail:], before[tail:]))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


SENTINELS: Mapping[torch.dtype, tuple[torch.dtype, int]] = {
    torch.float32: (torch.int32, 0x7FC0DEAD), torch.float16: (torch.int16, 0x7E5B),
    torch.bfloat16: (torch.int16, 0x7FDB), torch.int8: (torch.int8, -128)}
"""A quiet NaN with a payload per dtype: an output element that still holds exactly these bits was
never written, while a NaN the kernel computed (0/0 has the default payload) is a wrong value. An int8
output (quantized) has no NaN: its poison is -128, a value a saturated result may have too, so an
element left unwritten is a mismatch wherever -128 is outside its bound, never reported as unwritten."""


def sentinel(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of ``shape`` filled with the sentinel NaN of ``dtype``."""
    int_type, bits = SENTINELS[dtype]
    return torch.full(shape, bits, dtype=int_type).view(dtype)


def unwritten(out: torch.Tensor) -> torch.Tensor:
    """Mask of elements that still hold the sentinel bits."""
    int_type, bits = SENTINELS[out.dtype]
    return out.detach().to("cpu").contiguous().view(int_type) == bits


def guarded_output(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Guarded:
    """A sentinel-filled output between sentinel guard bands."""
    values = sentinel(shape, dtype)
    buffer = sentinel((values.numel() + 2 * GUARD,), dtype).to(device)
    view = buffer[GUARD:GUARD + values.numel()].view(shape)
    return Guarded(buffer, view, _bytes(buffer).clone())


def guarded(values: torch.Tensor, fill: float, device: torch.device, keep: bool = True) -> Guarded:
    """A copy of ``values`` on ``device`` between guard bands of ``fill``."""
    n = values.numel()
    buffer = torch.empty(n + 2 * GUARD, dtype=values.dtype, device=device)
    buffer[:GUARD] = fill
    buffer[GUARD + n:] = fill
    view = buffer[GUARD:GUARD + n].view(values.shape)
    view.copy_(values)
    return Guarded(buffer, view, _bytes(buffer).clone() if keep else None)


def _indices(case: Case, gen: torch.Generator) -> torch.Tensor:
    """Indices as the kernel gets them (relative to their table unless declared absolute)."""
    n = case.num_indices
    table = table_of_lookup(case)
    sizes = torch.tensor(case.table_rows or (case.num_embeddings,), dtype=torch.int64)[table]
    flat = torch.randint(0, 2**62, (n,), generator=gen, dtype=torch.int64) % sizes
    for t in range(case.num_tables):
        mine = (table == t).nonzero().flatten()
        rows = int(sizes[mine[0]]) if mine.numel() else 0
        if case.duplicates and mine.numel():
            flat[mine] = int(flat[mine[0]])
        elif mine.numel() >= 2:  # the first and the last row of every table
            picks = mine[torch.randperm(mine.numel(), generator=gen)[:2]]
            flat[picks[0]], flat[picks[1]] = 0, rows - 1
            if t == 0 and n >= 4 and case.num_tables == 1:
                flat[-1] = flat[-2]
    if case.padding_idx is not None and n:
        hit = torch.rand(n, generator=gen) < 0.3
        flat[hit] = case.padding_idx
        if case.layout == "csr":  # one non-empty bag made only of padding
            lengths = list(case.bag_lengths)
            b = next((i for i, length in enumerate(lengths) if length), None)
            if b is not None:
                start = sum(lengths[:b])
                flat[start:start + lengths[b]] = case.padding_idx
    if case.absolute_indices:
        flat = flat + torch.tensor(case.row_offsets, dtype=torch.int64)[table]
    dtype = DTYPES[case.index_dtype]
    if case.layout in ("fixed", "batched"):
        return flat.view(case.batch_size, case.num_tables * case.pooling).to(dtype)
    return flat.to(dtype)


def _offsets(case: Case) -> torch.Tensor | None:
    if case.layout != "csr":
        return None
    starts = [0]
    for length in case.bag_lengths:
        starts.append(starts[-1] + length)
    values = starts if case.include_last_offset else starts[:-1]
    return torch.tensor(values, dtype=DTYPES[case.index_dtype])


def _table(case: Case, gen: torch.Generator, rows: torch.Tensor) -> torch.Tensor:
    """The table; for the large case only the rows the indices reference (``rows``, in order), which
    the kernel's process writes into a table of 2^31 elements (``large_table``)."""
    dtype = DTYPES[case.weight_dtype]
    if not case.large:
        return torch.randn(case.num_embeddings, case.dim, generator=gen).to(dtype)
    return torch.randn(rows.numel(), case.dim, generator=gen).to(dtype)


def large_table(case: Case, rows: torch.Tensor, values: torch.Tensor, device: torch.device) -> torch.Tensor:
    """The table of the large case on ``device``, between NaN guard bands: ``values`` in ``rows``.

    Only the referenced rows are written: the rest of the table stays as the allocator gave it
    (zero pages on the CPU, zeros on the GPU), so a table of 2^31 elements costs only the pages
    that are touched."""
    dtype = DTYPES[case.weight_dtype]
    numel = case.num_embeddings * case.dim
    buffer = (torch.empty(numel + 2 * GUARD, dtype=dtype, device=device) if device.type == "cpu"
              else torch.zeros(numel + 2 * GUARD, dtype=dtype, device=device))
    buffer[:GUARD] = math.nan
    buffer[GUARD + numel:] = math.nan
    table = buffer[GUARD:GUARD + numel].view(case.num_embeddings, case.dim)
    table[rows.to(device)] = values.to(device)
    return table


def make_inputs(case: Case, bound: Bound) -> CaseInputs:
    """Random inputs of ``case`` (from its seed), with reference and bound, on the CPU (for the
    large case ``weight`` holds only the referenced rows: see ``large_table``)."""
    gen = torch.Generator().manual_seed(case.seed)
    indices = _indices(case, gen)
    offsets = _offsets(case)
    rows = torch.unique(absolute_rows(case, indices))
    if case.quantization is not None:
        return _quantized_inputs(case, bound, gen, indices, offsets, rows)
    weight = _table(case, gen, rows)
    psw = None
    if case.per_sample_weights:
        psw = (torch.randn(indices.shape, generator=gen) * 2).to(DTYPES[case.weight_dtype])
    extra = {"table_offsets": torch.tensor(case.row_offsets, dtype=torch.int64),
             "weights_offsets": torch.tensor(case.row_offsets[:-1], dtype=torch.int64) * case.dim}
    if case.backward:
        inputs = backward_inputs(case, gen, weight, indices, offsets, psw, rows, bound)
        inputs.extra.update(extra)
        return inputs
    reference, err_bound, shape = _reference(case, weight, indices, offsets, psw, rows, bound)
    return CaseInputs(weight, indices, offsets, psw, rows, reference, err_bound, shape, extra=extra)


def _quantized_inputs(case: Case, bound: Bound, gen: torch.Generator, indices: torch.Tensor,
                      offsets: torch.Tensor | None, rows: torch.Tensor) -> CaseInputs:
    """A quantized table's inputs (compliance.verify.quantized): codes and scales for the kernel, the
    reference pooled over the rows dequantized in float64; an int8 output's reference and bound in
    values (codes / inverse scale), saturation included (tolerance.int8_output_bound)."""
    from compliance.verify.quantized import output_columns, output_inverse_scales, quantized_table

    table = quantized_table(case, gen)
    psw = (torch.randn(indices.shape, generator=gen) * 2).to(torch.float32) if case.per_sample_weights else None
    extra = {"table_offsets": torch.tensor(case.row_offsets, dtype=torch.int64),
             "weights_offsets": torch.tensor(case.row_offsets[:-1], dtype=torch.int64) * case.row_bytes}
    if table.scales is not None:
        extra["weight_scales"] = table.scales
    as_float = replace(case, output_dtype="float32") if case.out_dtype == "int8" else case
    ref, err, shape = _reference(as_float, table.values, indices, offsets, psw, rows, bound,
                                 extra_terms=table.dequantization_roundings)
    if case.out_dtype != "int8":
        return CaseInputs(table.weight, indices, offsets, psw, rows, ref, err, shape, extra=extra)
    inverse = output_inverse_scales(case)
    extra["output_inverse_scales"] = inverse
    per_element = output_columns(case, inverse).reshape(ref.shape)
    low, high = INT8_OUTPUT_RANGE
    saturated = (ref * per_element).clamp(low, high) / per_element
    err = int8_output_bound(err, ref, per_element)
    return CaseInputs(table.weight, indices, offsets, psw, rows, saturated, err, shape, extra=extra,
                      dequantize=1.0 / per_element)


def as_single_table(case: Case, indices: torch.Tensor,
                    offsets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The case as one lookup over the stacked buffer: absolute indices, bags in the kernel's order."""
    abs_rows = absolute_rows(case, indices)
    if case.layout in ("fixed", "batched"):
        if case.op == "embedding_bag":
            return abs_rows.view(case.num_bags, case.pooling), offsets
        return abs_rows.view(indices.shape), offsets
    return abs_rows, offsets


def to_output_order(case: Case, ref: torch.Tensor) -> torch.Tensor:
    """Pooled results from the kernel's bag order to the output's: [B, T * D] for table-batched bags
    (csr bags come table-major, t * B + b, as FBGEMM orders them)."""
    if case.num_tables == 1 or case.op != "embedding_bag":
        return ref
    tables, batch = case.num_tables, case.batch_size
    if case.layout == "csr":
        ref = ref.view(tables, batch, -1).transpose(0, 1)
    return ref.reshape(batch, tables * case.dim)


def _reference(case: Case, weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor | None,
               psw: torch.Tensor | None, rows: torch.Tensor, bound: Bound,
               extra_terms: int = 0) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """float64 reference computed by torch on the CPU over the referenced rows only. ``extra_terms``:
    roundings per pooled term before the sum (a quantized row's bias), counted as further additions."""
    sub = (weight if case.large else weight[rows]).to(torch.float64)
    abs_idx, offsets = as_single_table(case, indices, offsets)
    local = torch.searchsorted(rows, abs_idx.reshape(-1)).view(abs_idx.shape)
    if case.op == "embedding":
        ref = F.embedding(local, sub)
        return ref, conversion_bound(case, ref, bound), tuple(ref.shape)
    pad = None
    if case.padding_idx is not None:
        hit = (rows == case.padding_idx).nonzero()
        pad = int(hit[0, 0]) if hit.numel() else None  # unreferenced: nothing to exclude
    off = None if offsets is None else offsets.to(torch.int64)
    p64 = None if psw is None else psw.to(torch.float64).reshape(local.shape)
    kw: dict[str, Any] = {"offsets": off, "include_last_offset": case.include_last_offset,
                         "padding_idx": pad}
    ref = F.embedding_bag(local, sub, mode=case.mode, per_sample_weights=p64, **kw)
    if case.mode == "max":
        ref = to_output_order(case, ref)
        err = conversion_bound(case, ref, bound)
        if extra_terms:  # the kernel's dequantized value itself is rounded once
            err = err + extra_terms * bound.unit_roundoff_multiplier * ACCUMULATION_ROUNDOFF * ref.abs()
        return ref, err, tuple(ref.shape)
    abs_sum = F.embedding_bag(local, sub.abs(), mode="sum",
                              per_sample_weights=None if p64 is None else p64.abs(), **kw)
    ones = torch.ones(sub.shape[0], 1, dtype=torch.float64)
    count = F.embedding_bag(local, ones, mode="sum", **kw)
    if extra_terms and case.mode == "mean":  # mean's bound counts one term; a rounded term adds u * A
        abs_sum = abs_sum * (1 + extra_terms)
    err = pooled_bound(case.mode, ref, abs_sum, count + extra_terms, UNIT_ROUNDOFF[case.out_dtype], bound)
    ref, err = to_output_order(case, ref), to_output_order(case, err)
    return ref, err, tuple(ref.shape)


def half_accumulation(case: Case, inputs: CaseInputs) -> torch.Tensor | None:
    """What a kernel that sums each bag in order in the 16-bit weight or output dtype would output (None
    when both are float32, or for anything but a pooled sum or mean): the diagnosis of
    verify-accumulation-precision. Each term and each partial sum is rounded to that dtype."""
    half = [d for d in (case.weight_dtype, case.out_dtype) if d != "float32"]
    if not half or case.op != "embedding_bag" or case.mode not in ("sum", "mean") or case.backward or case.large \
            or case.quantization is not None:
        return None
    dtype = DTYPES[max(half, key=lambda d: UNIT_ROUNDOFF[d])]
    lk = lookups(case, inputs.indices, inputs.psw)
    rows_out = int(inputs.reference.numel() // case.dim)
    per_bag = torch.zeros(rows_out, dtype=torch.int64).index_add_(0, lk.out_rows, torch.ones_like(lk.out_rows))
    start = torch.cumsum(per_bag, 0) - per_bag
    order = torch.argsort(lk.out_rows, stable=True)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel()) - start[lk.out_rows[order]]
    weight = inputs.weight.to(torch.float64)
    psw = torch.ones(lk.rows.numel(), dtype=torch.float64) if inputs.psw is None else \
        inputs.psw.reshape(-1).to(torch.float64)
    acc = torch.zeros(rows_out, case.dim, dtype=torch.float64)
    for step in range(int(per_bag.max()) if per_bag.numel() else 0):
        k = (rank == step).nonzero().flatten()
        term = (weight[lk.rows[k]] * psw[k, None]).to(dtype).to(torch.float64)
        acc[lk.out_rows[k]] = (acc[lk.out_rows[k]] + term).to(dtype).to(torch.float64)
    if case.mode == "mean":
        acc = (acc / per_bag.clamp_min(1)[:, None]).to(dtype).to(torch.float64)
    return acc.reshape(inputs.reference.shape)


def conversion_bound(case: Case, ref: torch.Tensor, bound: Bound) -> torch.Tensor:
    """A copy is exact, unless the output dtype is narrower than the table's: then one rounding."""
    if UNIT_ROUNDOFF[case.out_dtype] <= UNIT_ROUNDOFF[case.weight_dtype]:
        return torch.zeros_like(ref)
    return bound.unit_roundoff_multiplier * UNIT_ROUNDOFF[case.out_dtype] * ref.abs() + bound.absolute_floor


@dataclass
class Comparison:
    """How one output compares with the reference."""

    unwritten: int = 0
    """Elements still NaN (never written)."""
    mismatched: int = 0
    """Elements outside their bound (unwritten ones included)."""
    nonfinite: int = 0
    """Written elements that are NaN or infinite."""
    max_error: float = 0.0
    """Largest |y - r| over written elements."""
    bound_at_max: float = 0.0
    """Bound at the element with the worst error/bound ratio."""
    worst_ratio: float = 0.0
    """Largest error/bound (inf where the bound is 0 and the error is not)."""
    positions: list[dict[str, Any]] = field(default_factory=list)
    """First mismatching positions: index, got, expected, bound."""
    bad: torch.Tensor | None = None
    """Mask of the elements outside their bound."""

    @property
    def ok(self) -> bool:
        """Everything written and within bound."""
        return self.mismatched == 0


def compare(out: torch.Tensor, reference: torch.Tensor, bound: torch.Tensor,
            prefilled: bool = True, dequantize: torch.Tensor | None = None) -> Comparison:
    """Element-wise check of ``out`` against ``reference`` +- ``bound`` (``prefilled``: the output
    started as sentinel NaNs, so still-sentinel elements count as unwritten; ``dequantize``: an int8
    output's codes times this are its values, which are compared)."""
    y = out.detach().to("cpu", torch.float64)
    if dequantize is not None:
        y = y.reshape(dequantize.shape) * dequantize
    never = unwritten(out).reshape(y.shape) if prefilled else torch.zeros(y.shape, dtype=torch.bool)
    nan = torch.isnan(y)
    err = (y - reference).abs()
    bad = nan | ~torch.isfinite(y) | (err > bound)
    if not out.is_floating_point():  # an int8 poison (-128) is also a value (saturated): a wrong one is a mismatch
        never = torch.zeros(y.shape, dtype=torch.bool)
    finite_err = torch.where(nan, torch.zeros_like(err), err)
    ratio = torch.where(bound > 0, finite_err / bound.clamp_min(1e-300),
                        torch.where(finite_err > 0, torch.full_like(err, math.inf), torch.zeros_like(err)))
    result = Comparison(unwritten=int(never.sum()), mismatched=int(bad.sum()),
                        nonfinite=int((~torch.isfinite(y) & ~never).sum()), bad=bad)
    if y.numel():
        worst = int(torch.argmax(ratio.reshape(-1)))
        result.max_error = float(finite_err.max())
        result.worst_ratio = float(ratio.reshape(-1)[worst])
        result.bound_at_max = float(bound.reshape(-1)[worst])
    for pos in bad.nonzero()[:MAX_POSITIONS].tolist():
        at = tuple(pos)
        result.positions.append({"index": list(at), "got": _num(y[at]), "expected": _num(reference[at]),
                                 "bound": _num(bound[at])})
    return result


def _num(t: torch.Tensor) -> float | str:
    value = float(t)
    return repr(value) if not math.isfinite(value) else value
