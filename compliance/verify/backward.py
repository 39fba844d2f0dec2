"""Backward kernels (kernel subprocess only): the weight gradient and fused optimizer updates.

Every lookup k of a case contributes ``c_k = s_k * grad_out[o_k]`` to row ``r_k``
of the stacked table, where ``o_k`` is the output row of its bag and ``s_k`` its
scale (the per-sample weight, times 1/n for a mean over n rows; 0 for padding).
From that list, in float64:

* ``grad-dense``: ``G[r] = sum_k c_k`` over the lookups of row r; zeros elsewhere;
* ``grad-sparse``: torch's uncoalesced sparse gradient: row k of the values is ``c_k``;
* ``grad-sparse_coo`` / ``grad-rows``: ``G`` on the rows the batch references, in row order; the
  kernel's sparse COO tensor (or row ids and rows) is coalesced by the verifier and compared with it
  (``compliance.verify.sparse``);
* ``sgd``: ``W' = W - lr * G`` on the rows the batch references; every other row unchanged;
* ``rowwise_adagrad`` (FBGEMM's): ``s' = s + mean_d(G[r]^2)``,
  ``W' = W - lr * G[r] / (sqrt(s') + eps)`` on referenced rows; others unchanged.

Bounds (m and floor from the rule set, u_acc = 2^-24, u_w / u_out the unit
roundoff of the table / returned gradient dtype, n_r the lookups of row r and A_r the sum
of their |c_k|): the gradient ``m (n_r u_acc A_r + u_out |G|) + floor`` (coalesced by the verifier:
``m (n_r u_acc + u_out) A_r + floor``, each row rounded on its own); SGD
``m ((n_r + 1) u_acc (|W| + lr A_r) + u_w |W'|) + floor``, which covers any
order of the updates (atomics on the table included); Adagrad propagates the
same gradient error through the accumulator, the root and the division to first
order. Rows the batch does not reference must be bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from compliance.verify.case_inputs import DTYPES, CaseInputs, absolute_rows
from compliance.verify.cases import Case
from compliance.verify.tolerance import ACCUMULATION_ROUNDOFF, Bound
from compliance.verify.vocabulary import UNIT_ROUNDOFF

U = ACCUMULATION_ROUNDOFF


@dataclass(frozen=True)
class Lookups:
    """Every lookup of a case, in the order of the indices."""

    rows: torch.Tensor
    """Row of the stacked table (int64)."""
    out_rows: torch.Tensor
    """Row of the forward output ``[rows, D]`` its bag writes (int64)."""
    scale: torch.Tensor
    """Its factor in the output: per-sample weight / mean divisor; 0 for padding (float64)."""


def forward_shape(case: Case) -> tuple[int, ...]:
    """Shape of the forward output (and of grad_out)."""
    if case.op == "embedding":
        shape = (case.num_indices,) if case.layout == "flat" else (case.batch_size, case.num_tables * case.pooling)
        return (*shape, case.dim)
    if case.num_tables > 1:
        return (case.batch_size, case.num_tables * case.dim)
    return (case.num_bags, case.dim)


def lookups(case: Case, indices: torch.Tensor, psw: torch.Tensor | None) -> Lookups:
    """The lookup list of ``case`` (see the module docstring)."""
    n, tables, batch = case.num_indices, case.num_tables, case.batch_size
    rows = absolute_rows(case, indices)
    position = torch.arange(n)
    if case.op == "embedding":
        out_rows, bag = position, position
    elif case.layout == "csr":
        bag = torch.repeat_interleave(torch.arange(len(case.bag_lengths)), torch.tensor(case.bag_lengths))
        out_rows = (bag % batch) * tables + bag // batch if tables > 1 else bag
    else:
        bag = position // case.pooling  # [B, T * L] viewed as B * T bags of L
        out_rows = bag
    live = torch.ones(n, dtype=torch.float64)
    if case.padding_idx is not None:
        live = (indices.reshape(-1).to(torch.int64) != case.padding_idx).to(torch.float64)
    scale = live.clone()
    if case.mode == "mean":
        count = torch.zeros(int(bag.max()) + 1 if n else 0, dtype=torch.float64).index_add_(0, bag, live)
        scale = live / count[bag].clamp_min(1.0)
    if psw is not None:
        scale = scale * psw.reshape(-1).to(torch.float64)
    return Lookups(rows, out_rows, scale)


def _gradient(case: Case, grad_out: torch.Tensor, lk: Lookups) -> tuple[torch.Tensor, ...]:
    """(contributions [n, D], dense G [N, D], A [N, D], lookups per row [N]) in float64."""
    contrib = grad_out.reshape(-1, case.dim).to(torch.float64)[lk.out_rows] * lk.scale[:, None]
    zeros = torch.zeros(case.num_embeddings, case.dim, dtype=torch.float64)
    dense = zeros.clone().index_add_(0, lk.rows, contrib)
    absolute = zeros.clone().index_add_(0, lk.rows, contrib.abs())
    count = torch.zeros(case.num_embeddings, dtype=torch.float64).index_add_(0, lk.rows, (lk.scale != 0).double())
    return contrib, dense, absolute, count


def backward_inputs(case: Case, gen: torch.Generator, weight: torch.Tensor, indices: torch.Tensor,
                    offsets: torch.Tensor | None, psw: torch.Tensor | None, rows: torch.Tensor,
                    bound: Bound) -> CaseInputs:
    """Inputs, reference and bound of a backward case."""
    grad_out = torch.randn(forward_shape(case), generator=gen).to(DTYPES[case.out_dtype])
    lk = lookups(case, indices, psw)
    contrib, dense, absolute, count = _gradient(case, grad_out, lk)
    m, floor, u_out = bound.unit_roundoff_multiplier, bound.absolute_floor, UNIT_ROUNDOFF[case.grad_dtype]
    extra: dict[str, torch.Tensor] = {"grad_out": grad_out}
    expected: dict[str, Any] = {}
    touched = count > 0
    if case.backward == "grad-sparse":
        reference = contrib
        err = m * (2 * U + u_out) * contrib.abs() + floor
    elif case.backward in ("grad-sparse_coo", "grad-rows"):
        rows_touched = touched.nonzero().flatten()
        reference = dense[rows_touched]
        err = m * (count[:, None] * U + u_out)[rows_touched] * absolute[rows_touched] + floor
        referenced = torch.zeros(case.num_embeddings, dtype=torch.bool)
        referenced[lk.rows] = True
        expected = {"rows": rows_touched, "referenced": referenced}
    elif case.backward == "grad-dense":
        reference = dense
        err = torch.where(touched[:, None], m * (count[:, None] * U * absolute + u_out * dense.abs()) + floor, 0.0)
    else:
        table = weight.to(torch.float64)
        reference, err, state = _fused(case, gen, table, dense, absolute, count, bound)
        err = torch.where(touched[:, None], err, 0.0)
        expected = {"touched": touched, "repeated": count > 1, **state}
        if "momentum" in state:
            extra["momentum"] = state["momentum_before"]
    shape = (case.num_embeddings, case.dim) if "rows" in expected else tuple(reference.shape)
    inputs = CaseInputs(weight, indices, offsets, psw, rows, reference, err, shape, extra=extra, expected=expected)
    return inputs


def _fused(case: Case, gen: torch.Generator, table: torch.Tensor, grad: torch.Tensor, absolute: torch.Tensor,
           count: torch.Tensor, bound: Bound) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """(updated table, its bound, optimizer state expectations) of a fused update."""
    m, floor, u_w = bound.unit_roundoff_multiplier, bound.absolute_floor, UNIT_ROUNDOFF[case.weight_dtype]
    rate = case.learning_rate
    touched = (count > 0)[:, None]
    if case.backward == "sgd":
        updated = torch.where(touched, table - rate * grad, table)
        err = m * ((count[:, None] + 1) * U * (table.abs() + rate * absolute) + u_w * updated.abs()) + floor
        return updated, err, {}
    before = (torch.rand(case.num_embeddings, generator=gen) + 0.1).to(torch.float32)
    state = before.to(torch.float64)
    d_grad = count[:, None] * U * absolute
    after = torch.where(count > 0, state + (grad * grad).mean(dim=1), state)
    d_state = (2 * grad.abs() * d_grad + d_grad * d_grad).mean(dim=1) + (case.dim + 1) * U * after
    root = after.sqrt()
    mult = rate / (root + case.eps)
    d_mult = rate / (root + case.eps) ** 2 * d_state / (2 * root) + 4 * U * mult
    updated = torch.where(touched, table - mult[:, None] * grad, table)
    d_w = (mult[:, None] * d_grad + grad.abs() * d_mult[:, None]
           + 2 * U * (table.abs() + mult[:, None] * grad.abs()) + u_w * updated.abs())
    return updated, m * d_w + floor, {"momentum": after, "momentum_bound": m * d_state + floor,
                                      "momentum_before": before}
