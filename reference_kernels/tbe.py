"""Table-batched embedding bags: many tables, one weight buffer, one kernel launch.

Layout (as FBGEMM's TBE): table t owns rows ``table_rows[t] .. table_rows[t] + rows[t]``
of one ``[sum(rows), dim]`` weight; ``indices`` concatenates every table's indices
(relative to the table), and ``offsets`` (length T * B + 1, i.e. include_last_offset)
delimits the T * B bags in table-major order. The result is ``[B, T * dim]``: sample
b's pooled rows of all tables side by side, the input of DLRM's interaction layer.

Tables of mixed widths (``embedding_dim`` a sequence, as FBGEMM and TorchRec take them): the
result is ``[B, sum(dims)]``, table t's columns after those of tables 0 .. t-1. The tables of
one width share one weight (a ``_WidthGroup``), and each width is one launch that writes its
tables' columns of the one result in place (TABLE_COLS in embedding_bag_forward.cu), whatever
order the widths come in; the backward runs once per width on that width's columns of the
output gradient (docs/kernels.md, "Tables of mixed widths").
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from . import api, launch, ops, sparse_update
from .api import MODES
from .errors import CheckMode
from .host import LOADED as _HOST_PATH
from .index_check import FixedCheckMode
from .optim import OptimizerSpec, check_spec
from .plan import width_groups


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
    (skipped by the sparse and fused backwards), else their index (the dense backward's row).
    With ``sentinel``, where the backward's sort will be radix_sort.cu's, the sort begins here and
    the kernel counts its digit totals (``launch.radix_start``)."""
    sort = launch.radix_start(indices.numel(), num_rows, indices) if sentinel else None
    keys, grad_row, scale = launch.prepare_table_lookups(indices, offsets, table_rows, num_rows=num_rows,
                                                         mean=mode == "mean", sentinel=num_rows if sentinel else -1,
                                                         sort=sort)
    return sparse_update.Lookups(keys, grad_row, 0, psw, scale, 1.0, -1, sentinel, sort)


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
        return (_update(grad_out, weight, table_rows, indices, offsets, psw, ctx.mode, ctx.fused),
                None, None, None, None, None, None, None)


def _update(grad_out: Tensor, weight: Tensor, table_rows: Tensor, indices: Tensor, offsets: Tensor,
            psw: Optional[Tensor], mode: str, fused: Optional[sparse_update.FusedState]) -> Optional[Tensor]:
    """The backward of a module with a sparse gradient or a fused optimizer: the sparse gradient of
    ``weight``, or (``fused``) None after updating it in place."""
    lk = prepared_lookups(table_rows, indices, offsets, mode, psw, weight.shape[0])
    grad = grad_out.contiguous().view(-1, weight.shape[1])
    return sparse_update.sparse_or_fused_backward(grad, lk, weight, fused)


def host_path_update(grad_out: Tensor, weight: Tensor, table_rows: Tensor, indices: Tensor, offsets: Tensor,
                     per_sample_weights: Optional[Tensor], mode: str,
                     update: Any) -> tuple[Optional[Tensor]]:
    """The backward of a sparse or fused module's call that the compiled host path served
    (csrc/host_path.cpp, TableBatchedUpdate): SparseTBE's backward on what it would have saved;
    ``update``: the module's fused optimizer state, or True for a sparse gradient."""
    fused = None if update is True else update
    return (_update(grad_out, weight, table_rows, indices, offsets, per_sample_weights, mode, fused),)


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


MIN_WIDTH, MAX_WIDTH = 4, 1024  # the widths a sequence ``embedding_dim`` may hold (multiples of 4)


def table_widths(embedding_dim: int | Sequence[int], tables: int) -> list[int]:
    """Each table's width: one int, every table that wide (any width, as before mixed widths),
    or one width per table, each a multiple of 4 from MIN_WIDTH to MAX_WIDTH (ValueError)."""
    try:
        return [operator.index(embedding_dim)] * tables  # type: ignore[arg-type]
    except TypeError:
        pass
    widths = [operator.index(d) for d in embedding_dim]  # type: ignore[union-attr]
    if len(widths) != tables:
        raise ValueError(f"embedding_dim: one width per table, got {len(widths)} widths for {tables} tables")
    if not widths:
        raise ValueError("embedding_dim: a sequence of widths needs at least one table")
    bad = [d for d in widths if d % 4 or not MIN_WIDTH <= d <= MAX_WIDTH]
    if bad:
        raise ValueError(f"embedding_dim: every width must be a multiple of 4 from {MIN_WIDTH} to {MAX_WIDTH}, "
                         f"got {bad[0]} (widths {widths})")
    return widths


class _WidthGroup(sparse_update.FusedOptimizerMixin, torch.nn.Module):
    """The tables of one width of a mixed-width ``TableBatchedEmbeddingBag`` (``tables``: their
    numbers in the module, ascending): their rows in one ``weight`` [sum(rows), width] (table
    ``tables[k]`` from row ``row_starts[k]``), a fused optimizer's state beside it (the mixin's
    ``optimizer_state1`` ... entries of the state dict), and ``layout``, the lookup's TABLE_COLS
    layout (launch.bag_forward_columns): per table its first row, first output column and number."""

    def __init__(self, tables: list[int], rows: list[int], width: int, columns: list[int], out_width: int,
                 all_tables: int, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        starts = [sum(rows[:k]) for k in range(len(rows))]
        self.tables, self.row_starts, self.width, self.count = tables, starts, width, len(tables)
        self.out_width, self.all_tables = out_width, all_tables
        self.weight = torch.nn.Parameter(torch.empty(sum(rows), width, dtype=dtype, device=device))
        torch.nn.init.normal_(self.weight)
        triplets = [v for k in range(len(tables)) for v in (starts[k], columns[k], tables[k])]
        self.register_buffer("layout", torch.tensor(triplets, dtype=torch.int64, device=device), persistent=False)
        self.layout: Tensor
        # the largest power of two (in elements) dividing the output's row width and these columns'
        # starts: the lookup's vectors keep that alignment (in bytes at each call: .half() may follow)
        self.column_step = min(x & -x for x in (out_width, *columns) if x)
        # the output gradient's columns of these tables, side by side: one slice where they are
        # side by side in the output already, else their column numbers
        self.first_column = columns[0]
        side_by_side = columns == [columns[0] + k * width for k in range(len(columns))]
        self.register_buffer("grad_columns", None if side_by_side else torch.tensor(
            [c + i for c in columns for i in range(width)], dtype=torch.int64, device=device), persistent=False)
        self.grad_columns: Tensor | None


class TableBatchedEmbeddingBag(FixedCheckMode, sparse_update.FusedOptimizerMixin, torch.nn.Module):
    """T tables in one module; ``forward(indices, offsets, per_sample_weights=None)`` pools every
    table's bags (see the module docstring). ``embedding_dim``: one int, every table that wide, all
    rows in one ``weight`` [sum(rows), dim] and one launch, output ``[B, T * dim]``; or one width
    per table (multiples of 4 from 4 to 1024, mixed in any order), output ``[B, sum(dims)]`` in
    table order, the tables of each width in the ``weight`` of ``groups[g]`` (widths in order of
    first appearance), one launch per width (widths all equal: as one int). ``table(t)``: table
    t's rows, either way. ``sparse=True``: each weight's gradient is torch's sparse COO tensor;
    ``optimizer`` (``reference_kernels.optim.SGD``, ``RowWiseAdagrad``, ``Adam``): the backward
    updates the looked-up rows and their state in place and leaves the weights' ``.grad`` None
    (``optimizer_seed``, ``optimizer`` and their state apply to every width's weight).
    ``check_indices``: the index check's mode (``CheckMode``, its name, True for "sync", False for
    "ignore"; None: REFERENCE_KERNELS_INDEX_CHECK's, else "deferred"), resolved here, once."""

    def __init__(self, num_embeddings: Sequence[int], embedding_dim: int | Sequence[int], mode: str = "sum",
                 dtype: torch.dtype = torch.float32, device: Any = None, sparse: bool = False,
                 optimizer: Optional[OptimizerSpec] = None,
                 check_indices: CheckMode | str | bool | None = None) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "max" and (sparse or optimizer is not None):
            raise ValueError("table-batched max mode has no backward: no sparse gradient or fused optimizer")
        self.sparse = sparse
        self.optimizer = None if optimizer is None else check_spec(optimizer)
        if any(rows < 1 for rows in num_embeddings):
            raise ValueError(f"every table needs at least one row, got num_embeddings={list(num_embeddings)}")
        widths = table_widths(embedding_dim, len(num_embeddings))
        self.embedding_dims = widths
        sizes = torch.tensor(list(num_embeddings), dtype=torch.int64, device=device)
        self.mode = mode
        self.max_rows = max(num_embeddings, default=0)  # the checked copy's dtype, without reading sizes
        self.check_indices = check_indices  # resolved now (FixedCheckMode): None is the environment's default
        self.register_buffer("table_sizes", sizes, persistent=False)
        self.table_sizes: Tensor
        # mixed widths: the widths' groups (None: one width, one weight)
        self._width_groups: list[_WidthGroup] | None = None
        if len(set(widths)) > 1:
            self._init_widths(list(num_embeddings), widths, dtype, device)
            return
        dim = widths[0] if widths else operator.index(embedding_dim)  # type: ignore[arg-type]
        self.weight = torch.nn.Parameter(torch.empty(sum(num_embeddings), dim, dtype=dtype, device=device))
        torch.nn.init.normal_(self.weight)
        self.register_buffer("table_rows", torch.cumsum(sizes, 0) - sizes, persistent=False)
        self.table_rows: Tensor

    def _init_widths(self, rows: list[int], widths: list[int], dtype: torch.dtype, device: Any) -> None:
        """One ``_WidthGroup`` per width, and per table (``table_meta``, for the backward): its
        group, its first row in that group's weight, its place in the group, the group's tables."""
        columns = [sum(widths[:t]) for t in range(len(widths))]
        groups = [_WidthGroup(tables, [rows[t] for t in tables], widths[tables[0]], [columns[t] for t in tables],
                              sum(widths), len(widths), dtype, device) for tables in width_groups(widths)]
        self.groups = torch.nn.ModuleList(groups)
        self._width_groups = groups
        meta = [[0] * 4 for _ in widths]
        for g, group in enumerate(groups):
            for k, (t, start) in enumerate(zip(group.tables, group.row_starts, strict=True)):
                meta[t] = [g, start, k, len(group.tables)]
        self.register_buffer("table_meta", torch.tensor(meta, dtype=torch.int64, device=device).t().contiguous(),
                             persistent=False)
        self.table_meta: Tensor
        self._sync_groups()

    def _sync_groups(self) -> None:
        """The module's optimizer and seed on every width's weight (set on the module, any time)."""
        for group in self._width_groups or ():
            if group.optimizer is not self.optimizer:
                group.optimizer = self.optimizer
            if group.optimizer_seed != self.optimizer_seed:
                group.optimizer_seed = self.optimizer_seed

    def fused_states(self) -> list[sparse_update.FusedState]:
        """The fused optimizer's state of each weight (one; mixed widths: each width's, in the
        order of ``groups``), created now where none is yet, with the module's optimizer and
        ``optimizer_seed``; [] without an optimizer."""
        self._sync_groups()
        owners = self._width_groups if self._width_groups is not None else [self]
        states = [owner.fused_state(owner.weight) for owner in owners]
        return [state for state in states if state is not None]

    def table(self, t: int) -> Tensor:
        """Table t's rows (a view into the weight that holds them)."""
        if self._width_groups is not None:  # the group from the host's lists: no device read
            group = next((g for g in self._width_groups if t in g.tables), None)
            if group is None:
                raise IndexError(f"table {t} of {len(self.embedding_dims)} tables")
            start = group.row_starts[group.tables.index(t)]
            return group.weight[start:start + int(self.table_sizes[t])]
        start = int(self.table_rows[t])
        return self.weight[start:start + int(self.table_sizes[t])]

    # Mixed widths: the optimizer entries are the groups' (groups.<g>.optimizer_state1 ...), none of the module's.
    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        if self._width_groups is None:
            super()._save_to_state_dict(destination, prefix, keep_vars)
            return
        self._sync_groups()
        torch.nn.Module._save_to_state_dict(self, destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, local_metadata: dict[str, Any],
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        if self._width_groups is None:
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                          error_msgs)
            return
        self._sync_groups()
        torch.nn.Module._load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                                              unexpected_keys, error_msgs)

    def _checked_inputs(self, indices: Tensor, offsets: Tensor,
                        per_sample_weights: Optional[Tensor]) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """The inputs validated, index-checked and contiguous, as the lookup reads them."""
        tables = self.table_sizes.numel()
        if offsets.dim() != 1 or (offsets.numel() - 1) % tables:
            raise ValueError(f"offsets must be 1-D with T * B + 1 entries (T = {tables}), got {tuple(offsets.shape)}")
        if per_sample_weights is not None and self.mode != "sum":
            raise NotImplementedError("per_sample_weights is only supported for mode='sum'")
        if offsets.dtype != indices.dtype:
            indices, offsets = indices.to(torch.int64), offsets.to(torch.int64)
        api.surface_errors(self.table_sizes)
        indices, offsets = check_tables(indices.contiguous(), offsets.contiguous(), self.table_sizes, self.max_rows,
                                        self._check_mode)
        return indices, offsets, None if per_sample_weights is None else per_sample_weights.contiguous()

    def forward(self, indices: Tensor, offsets: Tensor, per_sample_weights: Optional[Tensor] = None) -> Tensor:
        if self._width_groups is not None:
            return self._forward_widths(self._width_groups, indices, offsets, per_sample_weights)
        if _HOST_PATH and not (host_path := _HOST_PATH[0]).is_compiling():  # the compiled host path (host.py)
            # the parameter and buffers from their dicts, not through Module.__getattr__ (slower a name)
            params, buffers = self._parameters, self._buffers
            # the backward a call with a gradient gets: the op's (False), else the module's own with
            # its fused optimizer's state, or True for a sparse gradient
            update: Any = False
            if self.optimizer is not None:
                update = self.fused_state(self.weight)
            elif self.sparse:
                update = True
            served: Tensor | None = host_path.tbe(
                params["weight"], buffers["table_rows"], buffers["table_sizes"], indices, offsets, per_sample_weights,
                self.mode, self._check_mode, self.max_rows, update)
            if served is not None:
                return served
        indices, offsets, psw = self._checked_inputs(indices, offsets, per_sample_weights)
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

    def _forward_widths(self, groups: list[_WidthGroup], indices: Tensor, offsets: Tensor,
                        per_sample_weights: Optional[Tensor]) -> Tensor:
        """Mixed widths: one launch per width into the one output (MixedWidthTBE for a backward)."""
        indices, offsets, psw = self._checked_inputs(indices, offsets, per_sample_weights)
        weights = [group.weight for group in groups]
        if not (torch.is_grad_enabled() and (any(w.requires_grad for w in weights)
                                             or (psw is not None and psw.requires_grad))):
            return widths_forward(groups, indices, offsets, psw, self.mode)
        fused = self.fused_states() if self.optimizer is not None else None
        pooled: Tensor = MixedWidthTBE.apply(  # type: ignore[no-untyped-call]
            self, indices, offsets, psw, fused, *weights)
        return pooled


def widths_forward(groups: list[_WidthGroup], indices: Tensor, offsets: Tensor, psw: Optional[Tensor],
                   mode: str) -> Tensor:
    """The lookup of a mixed-width module: ``[B, sum(dims)]``, each width's launch writing its
    tables' columns (inputs checked and contiguous)."""
    first = groups[0]
    tables = first.all_tables
    out = launch.new_output(((offsets.numel() - 1) // tables, first.out_width), first.weight)
    for group in groups:
        # from the dicts, as the module's forward, not through Module.__getattr__
        weight: Tensor = group._parameters["weight"]  # type: ignore[assignment]
        layout: Tensor = group._buffers["layout"]  # type: ignore[assignment]
        step = group.column_step * weight.element_size()  # bytes; a power of two
        launch.bag_forward_columns(weight, indices, offsets, tables=group.count, all_tables=tables,
                                   per_sample_weights=psw, mode=mode, layout=layout,
                                   columns_align=step if step < 16 else 0, out=out)
    return out


def widths_backward(module: TableBatchedEmbeddingBag, grad_out: Tensor, indices: Tensor, offsets: Tensor,
                    psw: Optional[Tensor], fused: Optional[list[sparse_update.FusedState]]) -> list[Optional[Tensor]]:
    """Each width's weight gradient (dense, or sparse with ``module.sparse``), or None after its
    fused update: the positions of all tables are numbered once (bag, table, the row in the
    table's weight, the row of the width's output gradient), then per width the other widths'
    positions are left out (no bag: skipped by every backward kernel, no gradient read) and the
    width's columns of ``grad_out`` are gathered side by side ([B * tables, width])."""
    groups = module._width_groups
    assert groups is not None
    tables = module.table_meta.shape[1]
    bags = offsets.numel() - 1
    per_table = max(1, bags // tables)
    bag = ops.bag_of_positions(indices, offsets, True)
    meta = module.table_meta.index_select(1, torch.div(bag, per_table, rounding_mode="floor").clamp(min=0))
    group_of = torch.where(bag >= 0, meta[0], -1)
    rows = indices.to(torch.int64) + meta[1]
    grad_row = (bag % per_table) * meta[3] + meta[2]
    scale = ops._bag_scale(indices, bag, bags, -1).view(tables, -1) if module.mode == "mean" else None
    grads: list[Optional[Tensor]] = []
    for g, group in enumerate(groups):
        weight, count = group.weight, len(group.tables)
        member = group_of == g
        bag_of = torch.where(member, grad_row, -1)
        rows_g = torch.where(member, rows, weight.shape[0])  # the others: the sentinel row past the weight
        grad = (grad_out.narrow(1, group.first_column, count * group.width) if group.grad_columns is None
                else grad_out.index_select(1, group.grad_columns)).contiguous().view(-1, group.width)
        bag_scale = None if scale is None else scale.index_select(0, group.layout[2::3]).t().reshape(-1)
        if fused is None and not module.sparse:
            # the sentinel row as padding: a spare row past the weight, dropped
            dense = ops.embedding_bag_backward_op(grad, rows_g, bag_of, 0, weight.shape[0] + 1, psw, bag_scale,
                                                  weight.shape[0])
            grads.append(dense[:weight.shape[0]])
            continue
        lookups = sparse_update.Lookups(rows_g, bag_of, 0, psw, bag_scale, 1.0, -1)
        grads.append(sparse_update.sparse_or_fused_backward(grad, lookups, weight,
                                                            None if fused is None else fused[g]))
    return grads


class MixedWidthTBE(torch.autograd.Function):
    """The lookup of a mixed-width module with its backward (widths_backward): dense or sparse
    gradients of each width's weight, or (``fused``: each width's state) the fused update."""

    @staticmethod
    def forward(ctx: Any, module: TableBatchedEmbeddingBag, indices: Tensor, offsets: Tensor, psw: Optional[Tensor],
                fused: Optional[list[sparse_update.FusedState]], *weights: Tensor) -> Tensor:
        groups = module._width_groups
        assert groups is not None
        ctx.module, ctx.fused = module, fused
        ctx.save_for_backward(indices, offsets, psw)
        return widths_forward(groups, indices, offsets, psw, module.mode)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Optional[Tensor], ...]:
        if ctx.module.mode == "max":
            raise NotImplementedError("table-batched max: no backward (use EmbeddingBag per table)")
        indices, offsets, psw = ctx.saved_tensors
        grads = widths_backward(ctx.module, grad_out, indices, offsets, psw, ctx.fused)
        return (None, None, None, None, None, *grads)
