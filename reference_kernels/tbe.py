"""Table-batched embedding bags: many tables, one weight buffer, one kernel launch.

Layout (as FBGEMM's TBE): table t owns rows ``table_rows[t] .. table_rows[t] + rows[t]``
of one ``[sum(rows), dim]`` weight; ``indices`` concatenates every table's indices
(relative to the table), and ``offsets`` (length T * B + 1, i.e. include_last_offset)
delimits the T * B bags in table-major order. The result is ``[B, T * dim]``: sample
b's pooled rows of all tables side by side, the input of DLRM's interaction layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from . import api, launch, ops, sparse_update
from .api import MODES
from .errors import CheckMode
from .host import LOADED as _HOST_PATH
from .index_check import resolve_mode
from .optim import OptimizerSpec, check_spec


def check_tables(indices: Tensor, offsets: Tensor, table_sizes: Tensor, max_rows: int,
                 mode: CheckMode) -> tuple[Tensor, Tensor]:
    """The indices and offsets the lookup reads under check mode ``mode``: one pass checks each
    index against its own table's rows (``table_sizes``) and the offsets (index_check.cu)."""
    bags_per_table = (offsets.numel() - 1) // table_sizes.numel()
    # no bags: no index is looked up, so each is only kept inside the weight (no per-table check)
    clean, clean_offsets = ops.checked(indices, offsets, max_rows, mode, "TableBatchedEmbeddingBag",
                                        table_sizes=table_sizes if bags_per_table else None,
                                        bags_per_table=bags_per_table or 1)
    assert clean_offsets is not None
    return clean, clean_offsets


def tbe_forward_impl(weight: Tensor, table_rows: Tensor, table_sizes: Tensor, indices: Tensor, offsets: Tensor,
                     per_sample_weights: Optional[Tensor], mode: str) -> Tensor:
    """The lookup itself (the op's CUDA implementation; eager calls take it directly)."""
    tables = table_rows.numel()
    bags_per_table = (offsets.numel() - 1) // tables
    out, _ = launch.bag_forward(weight, indices, offsets, num_bags=tables * bags_per_table,
                                 per_sample_weights=per_sample_weights, mode=mode, padding_idx=-1, need_argmax=False,
                                 table_rows=table_rows)
    return out


tbe_forward_op = torch.library.custom_op("reference_kernels::tbe_forward", tbe_forward_impl, mutates_args=(),
                                         device_types="cuda")


@tbe_forward_op.register_fake
def _(weight: Tensor, table_rows: Tensor, table_sizes: Tensor, indices: Tensor, offsets: Tensor,
      per_sample_weights: Optional[Tensor], mode: str) -> Tensor:
    tables = table_rows.shape[0]
    return weight.new_empty(((offsets.shape[0] - 1) // tables, tables * weight.shape[1]))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    weight, table_rows, _, indices, offsets, psw, mode = inputs
    ctx.mode, ctx.num_weights = mode, weight.shape[0]
    ctx.save_for_backward(table_rows, indices, offsets, psw)


def tbe_lookups(table_rows: Tensor, indices: Tensor, offsets: Tensor, mode: str,
                psw: Optional[Tensor]) -> sparse_update.Lookups:
    """Where each position's gradient goes: global row = index + table start; output rows
    b * T + t of grad_out [B, T*dim] viewed as [B*T, dim]; mean's bag scale in that numbering.
    In torch operations (about 25 launches): what torch.compile traces, and the reference of
    ``prepared_lookups`` (one kernel) in the tests."""
    tables = table_rows.numel()
    bags = offsets.numel() - 1
    bags_per_table = bags // tables
    bag = ops.bag_of_positions(indices, offsets, True)
    table = torch.div(bag, bags_per_table, rounding_mode="floor").clamp(min=0)
    rows = indices.to(torch.int64) + table_rows[table]
    grad_row = torch.where(bag >= 0, (bag % bags_per_table) * tables + table, -1)
    scale = ops._bag_scale(indices, grad_row, bags, -1) if mode == "mean" else None
    return sparse_update.Lookups(rows, grad_row, 0, psw, scale, 1.0, -1)


def prepared_lookups(table_rows: Tensor, indices: Tensor, offsets: Tensor, mode: str, psw: Optional[Tensor],
                     num_rows: int, sentinel: bool = True) -> sparse_update.Lookups:
    """``tbe_lookups`` in one kernel (launch.prepare_table_lookups, lookup_prepare.cu), with the
    rows already the sort keys: ``sentinel``: positions in no bag get the row ``num_rows``
    (skipped by the sparse and fused backwards), else their index (the dense backward's row)."""
    keys, grad_row, scale = launch.prepare_table_lookups(indices, offsets, table_rows, num_rows=num_rows,
                                                         mean=mode == "mean", sentinel=num_rows if sentinel else -1)
    return sparse_update.Lookups(keys, grad_row, 0, psw, scale, 1.0, -1, sentinel)


def _traced(t: Tensor) -> bool:
    """A backward being traced (torch.compile: fake or functional tensors) takes torch operations."""
    return type(t) is not Tensor or torch.compiler.is_compiling()


def _backward(ctx: Any, grad_out: Tensor) -> tuple[Optional[Tensor], ...]:
    """Weight gradient with the deterministic sort-based kernel (positions as tbe_lookups)."""
    if ctx.mode == "max":
        raise NotImplementedError("table-batched max: no backward (use EmbeddingBag per table)")
    table_rows, indices, offsets, psw = ctx.saved_tensors
    dim = grad_out.shape[1] // table_rows.numel()
    grad = grad_out.contiguous().view(-1, dim)
    if _traced(grad_out):
        lk = tbe_lookups(table_rows, indices, offsets, ctx.mode, psw)
        grad_weight = ops.embedding_bag_backward_op(grad, lk.rows, lk.bag_of, 0, ctx.num_weights, psw, lk.bag_scale,
                                                     -1)
        return grad_weight, None, None, None, None, None, None
    # eager: one preparation kernel, and the op's implementation without its Python dispatch
    lk = prepared_lookups(table_rows, indices, offsets, ctx.mode, psw, ctx.num_weights, sentinel=False)
    grad_weight = launch.bag_backward(grad, lk.rows, lk.bag_of, bag_size=0, num_weights=ctx.num_weights,
                                      per_sample_weights=psw, bag_scale=lk.bag_scale, padding_idx=-1)
    return grad_weight, None, None, None, None, None, None


class _SavedTables:
    """What ``_setup`` saves on an autograd context, for ``_backward`` outside one."""

    mode: str
    num_weights: int
    saved_tensors: tuple[Optional[Tensor], ...]


def host_path_backward(grad_out: Tensor, table_rows: Tensor, indices: Tensor, offsets: Tensor,
                       per_sample_weights: Optional[Tensor], mode: str, num_weights: int) -> tuple[Optional[Tensor]]:
    """The backward of a call the compiled host path served (csrc/host_path.cpp,
    TableBatchedBackward): ``_backward`` on what ``_setup`` would have saved; (weight's gradient,)."""
    ctx = _SavedTables()
    ctx.mode, ctx.num_weights = mode, num_weights
    ctx.saved_tensors = (table_rows, indices, offsets, per_sample_weights)
    return (_backward(ctx, grad_out)[0],)


class SparseTBE(torch.autograd.Function):
    """Table-batched lookup with a sparse gradient or a fused optimizer (sum and mean)."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, table_rows: Tensor, table_sizes: Tensor, indices: Tensor,
                offsets: Tensor, psw: Optional[Tensor], mode: str,
                fused: Optional[sparse_update.FusedState]) -> Tensor:
        ctx.mode, ctx.fused = mode, fused
        ctx.save_for_backward(weight, table_rows, indices, offsets, psw)
        if torch.compiler.is_compiling():  # traced: the registered op
            traced: Tensor = tbe_forward_op(weight, table_rows, table_sizes, indices, offsets, psw, mode)
            return traced
        # eager: the op's implementation without the custom op's Python dispatch (host time per step)
        return tbe_forward_impl(weight, table_rows, table_sizes, indices, offsets, psw, mode)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Optional[Tensor], ...]:
        weight, table_rows, indices, offsets, psw = ctx.saved_tensors
        lk = prepared_lookups(table_rows, indices, offsets, ctx.mode, psw, weight.shape[0])
        grad = grad_out.contiguous().view(-1, weight.shape[1])
        return (sparse_update.sparse_or_fused_backward(grad, lk, weight, ctx.fused),
                None, None, None, None, None, None, None)


tbe_forward_op.register_autograd(_backward, setup_context=_setup)


class TBEFunction(torch.autograd.Function):
    """Eager autograd of the table-batched lookup: the op's own ``_setup`` and ``_backward``
    around ``tbe_forward_impl``, without the custom op's Python dispatch (as
    ``ops.EmbeddingBagFunction``; torch.compile traces the op). ``apply(weight,
    per_sample_weights, rest)``: the op's tensors that may require a gradient are the node's
    inputs (per-sample weights get none, as from the op), the other arguments travel in ``rest``."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, per_sample_weights: Optional[Tensor], rest: tuple[Any, ...]) -> Tensor:
        table_rows, table_sizes, indices, offsets, mode = rest
        inputs = (weight, table_rows, table_sizes, indices, offsets, per_sample_weights, mode)
        out = tbe_forward_impl(*inputs)
        _setup(ctx, inputs, out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Optional[Tensor], None, None]:
        return _backward(ctx, grad_out)[0], None, None


class TableBatchedEmbeddingBag(sparse_update.FusedOptimizerMixin, torch.nn.Module):
    """T tables of equal ``embedding_dim`` in one parameter; ``forward(indices, offsets,
    per_sample_weights=None) -> [B, T * dim]`` in one launch (see the module docstring).
    ``sparse=True``: the weight's gradient is torch's sparse COO tensor; ``optimizer``
    (``reference_kernels.optim.SGD``, ``RowWiseAdagrad``, ``Adam``): the backward updates the
    looked-up rows and their state in place and leaves ``weight.grad`` None."""

    def __init__(self, num_embeddings: Sequence[int], embedding_dim: int, mode: str = "sum",
                 dtype: torch.dtype = torch.float32, device: Any = None, sparse: bool = False,
                 optimizer: Optional[OptimizerSpec] = None) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "max" and (sparse or optimizer is not None):
            raise ValueError("table-batched max mode has no backward: no sparse gradient or fused optimizer")
        self.sparse = sparse
        self.optimizer = None if optimizer is None else check_spec(optimizer)
        if any(rows < 1 for rows in num_embeddings):
            raise ValueError(f"every table needs at least one row, got num_embeddings={list(num_embeddings)}")
        sizes = torch.tensor(list(num_embeddings), dtype=torch.int64, device=device)
        self.mode = mode
        self.max_rows = max(num_embeddings, default=0)  # the checked copy's dtype, without reading sizes
        # the index check's mode, as the functions' check_indices (None: from the environment)
        self.check_indices: bool | str | None = None
        self.weight = torch.nn.Parameter(torch.empty(sum(num_embeddings), embedding_dim, dtype=dtype, device=device))
        torch.nn.init.normal_(self.weight)
        self.register_buffer("table_rows", torch.cumsum(sizes, 0) - sizes, persistent=False)
        self.register_buffer("table_sizes", sizes, persistent=False)
        self.table_rows: Tensor
        self.table_sizes: Tensor

    def table(self, t: int) -> Tensor:
        """Table t's rows (a view into the shared weight)."""
        start = int(self.table_rows[t])
        return self.weight[start:start + int(self.table_sizes[t])]

    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor] = None) -> Tensor:
        if _HOST_PATH and not _HOST_PATH[1]():  # the compiled host path (host.py): the usual call, or None
            # the parameter and buffers from their dicts: Module.__getattr__ costs ~0.3 µs a name
            params, buffers = self._parameters, self._buffers
            served: Tensor | None = _HOST_PATH[3](
                params["weight"], buffers["table_rows"], buffers["table_sizes"], indices, offsets, per_sample_weights,
                self.mode, self.check_indices, self.max_rows, self.sparse or self.optimizer is not None)
            if served is not None:
                return served
        tables = self.table_rows.numel()
        if offsets.dim() != 1 or (offsets.numel() - 1) % tables:
            raise ValueError(f"offsets must be 1-D with T * B + 1 entries (T = {tables}), got {tuple(offsets.shape)}")
        if per_sample_weights is not None and self.mode != "sum":
            raise NotImplementedError("per_sample_weights is only supported for mode='sum'")
        if offsets.dtype != indices.dtype:
            indices, offsets = indices.to(torch.int64), offsets.to(torch.int64)
        check = resolve_mode(self.check_indices)
        api.surface_errors(self.weight)
        indices, offsets = check_tables(indices.contiguous(), offsets.contiguous(), self.table_sizes, self.max_rows,
                                        check)
        psw = None if per_sample_weights is None else per_sample_weights.contiguous()
        fused = self.fused_state(self.weight)
        if (self.sparse or fused is not None) and torch.is_grad_enabled() and self.weight.requires_grad:
            pooled: Tensor = SparseTBE.apply(  # type: ignore[no-untyped-call]
                self.weight, self.table_rows, self.table_sizes, indices, offsets, psw, self.mode, fused)
            return pooled
        out: Tensor
        if torch.compiler.is_compiling():  # traced: the registered op
            out = tbe_forward_op(self.weight, self.table_rows, self.table_sizes, indices, offsets, psw, self.mode)
        elif api._needs_grad(self.weight, psw):
            out = TBEFunction.apply(  # type: ignore[no-untyped-call]
                self.weight, psw, (self.table_rows, self.table_sizes, indices, offsets, self.mode))
        else:
            out = tbe_forward_impl(self.weight, self.table_rows, self.table_sizes, indices, offsets, psw, self.mode)
        return out
