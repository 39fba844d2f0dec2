"""``ShardedTableBatchedEmbeddingBag``: embedding tables sharded over a ``torch.distributed``
process group (NCCL on GPUs, gloo on CPUs), table-wise or row-wise per table (``planner``).

One step on every rank, with a fixed local batch ``B`` per rank (global batch = the ranks'
local batches in rank order):

1. **input exchange**: the local batch's bags are laid out as ``max_bag_size`` slots per bag
   (-1 where empty), so every size is known from the plan; one ``all_to_all_single`` sends each
   rank the slots of the tables it holds (row-wise tables: to every rank).
2. **local lookups** of every shard for the global batch (``lookup.KernelShards`` on CUDA: our
   table-batched kernel; ``lookup.TorchShards`` elsewhere), row-wise shards keeping only their rows.
3. **output exchange**: one ``all_to_all_single`` returns each rank its samples' pooled rows
   ``[B, sum(dims)]``; the row-wise tables' partial sums from every rank are added in rank order
   (a reduce-scatter done as all-to-all + a fixed-order sum: deterministic).
4. **backward**: the output gradient travels back by the reverse all-to-all; each shard's fused
   optimizer (SGD, row-wise Adagrad) updates its rows and their state in place. No dense
   gradient of any table exists, and nothing is read to the host (no ``.item()``, no
   ``nonzero``): the collectives are the only synchronisation.

Checkpoints: ``state_dict()`` holds this rank's shards under names that say which rows they are
(``shards.<table>.<row_start>-<row_end>.weight`` and ``.optimizer_state``), whatever the local
layout; ``load_state_dict`` takes one rank's dict back, or the union of every rank's dicts saved
on any number of ranks (resharding N -> M). ``shard_state_dict()`` / ``load_shard_state_dicts``
are the same as lists of pieces; ``merge_shard_state_dicts`` rebuilds whole tables (a gather for
one process).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..optim import SGD, RowWiseAdagrad
from ..plan import width_groups
from .lookup import KernelShards, TorchShards
from .planner import ROW_WISE, TABLE_WISE, Shard, ShardingPlan

CHECKPOINT_FORMAT = 1
SHARD_KEYS = "shards."  # state_dict(): shards.<table>.<row_start>-<row_end>.{weight,optimizer_state}
INIT_CHUNK = 1 << 18  # rows per generator draw of the default initialisation


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` whose backward is the reverse exchange of the gradient."""

    @staticmethod
    def forward(ctx: Any, send: Tensor, send_splits: list[int], recv_splits: list[int],
                group: dist.ProcessGroup | None) -> Tensor:
        ctx.splits, ctx.group = (send_splits, recv_splits), group
        recv = send.new_empty(sum(recv_splits))
        dist.all_to_all_single(recv, send, recv_splits, send_splits, group=group)
        return recv

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None]:
        send_splits, recv_splits = ctx.splits
        back = grad.new_empty(sum(send_splits))
        dist.all_to_all_single(back, grad.contiguous(), send_splits, recv_splits, group=ctx.group)
        return back, None, None, None


def local_layout(plan: ShardingPlan, rank: int, weight_per_shard: bool = False,
                 group_as: ShardingPlan | None = None) -> list[list[Shard]]:
    """Rank ``rank``'s shards grouped by embedding dim (one weight per group), groups in order of
    first appearance; the local output's columns are the groups' shards in this order.
    ``weight_per_shard``: every shard a group of its own (plan order). ``group_as``: group by
    (the rank ``group_as`` puts the table on, dim), so that one process holds exactly the weights
    that the ranks of ``group_as`` hold (its row-wise tables: a group of their own each)."""
    shards = plan.shards_on(rank)
    if weight_per_shard:
        return [[shard] for shard in shards]
    if group_as is None:
        return [[shards[i] for i in group]
                for group in width_groups([plan.tables[s.table].embedding_dim for s in shards])]
    groups: dict[tuple[int, int], list[Shard]] = {}
    for shard in shards:
        place = group_as.placements[shard.table]
        owner = place.rank if place.rank is not None else -1 - shard.table
        groups.setdefault((owner, plan.tables[shard.table].embedding_dim), []).append(shard)
    return list(groups.values())


def check_optimizer(optimizer: Any) -> SGD | RowWiseAdagrad:
    if not isinstance(optimizer, SGD | RowWiseAdagrad):
        raise TypeError(f"sharded tables support optim.SGD and optim.RowWiseAdagrad, got {type(optimizer).__name__}")
    if optimizer.stochastic_rounding:
        raise ValueError("stochastic rounding draws its bits per row of a weight, which sharding renumbers: "
                         "not supported on sharded tables")
    return optimizer


class ShardedTableBatchedEmbeddingBag(nn.Module):
    """The tables of ``plan`` sharded over ``group`` (default: a new group of all ranks, so the
    embedding exchanges never interleave with DDP's all-reduces); created on every rank.

    ``forward(indices, offsets) -> [B, sum(dims)]`` takes this rank's local batch of ``batch_size``
    samples in ``TableBatchedEmbeddingBag``'s layout (indices relative to their table, offsets
    with T * B + 1 entries, table-major) and pools with sum; columns in table order.
    ``lookup``: "auto" (our kernels on CUDA, torch elsewhere), "kernels" or "torch".

    ``weight_per_shard``: each shard in a weight (and, on CUDA, a ``TableBatchedEmbeddingBag``)
    of its own instead of one per embedding dim. The kernels' backward sums a row's gradient in
    chunks of a fixed number of *sorted positions of the whole weight*, so with shared weights
    a row's summation order depends on how many lookups the other tables of its weight received;
    alone in its weight, a table-wise table is summed exactly as on one GPU holding it alone, bit
    for bit (docs/sharding.md, "Bit equality"). It costs a lookup and a backward launch series
    per shard instead of per dim.

    ``group_as``: another plan of the same tables (usually for N ranks, given to a one-process
    module): this module's weights then group the tables as that plan's ranks group theirs, one
    weight per (rank, dim). Each weight then sorts and chunks the same lookup positions as the
    rank's weight does, so one GPU reproduces N GPUs' table-wise updates bit for bit in the default
    layout (docs/sharding.md, "Bit equality"); on the CPU it changes nothing but the layout.
    """

    def __init__(self, plan: ShardingPlan, batch_size: int, optimizer: SGD | RowWiseAdagrad, device: Any = None,
                 dtype: torch.dtype = torch.float32, group: dist.ProcessGroup | None = None, lookup: str = "auto",
                 seed: int = 0, weight_per_shard: bool = False, group_as: ShardingPlan | None = None) -> None:
        super().__init__()
        if group_as is not None and group_as.tables != plan.tables:
            raise ValueError("group_as must be a plan of the same tables")
        self.weight_per_shard, self.group_as = weight_per_shard, group_as
        distributed = dist.is_available() and dist.is_initialized()
        world = dist.get_world_size(group) if distributed else 1
        if world != plan.world_size:
            raise ValueError(f"the plan is for {plan.world_size} rank(s), the process group has {world}")
        if distributed and world > 1 and group is None:
            group = dist.new_group(list(range(world)))
        self.group = group if world > 1 else None
        self.rank = dist.get_rank(group) if distributed else 0
        self.plan, self.batch_size, self.world_size = plan, batch_size, world
        self.optimizer = check_optimizer(optimizer)
        device = torch.device("cpu") if device is None else torch.device(device)
        use_kernels = device.type == "cuda" if lookup == "auto" else lookup == "kernels"
        if lookup not in ("auto", "kernels", "torch"):
            raise ValueError(f"lookup must be 'auto', 'kernels' or 'torch', got {lookup!r}")
        self._build_input_exchange(device)
        self.groups = local_layout(plan, self.rank, weight_per_shard, group_as)
        make = KernelShards if use_kernels else TorchShards
        shards: list[KernelShards | TorchShards] = [
            make([s.rows for s in g], plan.tables[g[0].table].embedding_dim, self.optimizer, dtype, device)
            for g in self.groups]
        self.lookups = nn.ModuleList(shards)
        self.shard_lookups = shards  # the same modules, typed
        self._build_output_exchange(device)
        self.register_buffer("dropped_lookups", torch.zeros((), dtype=torch.int64, device=device))
        self.dropped_lookups: Tensor
        self.reset_parameters(seed)
        self.register_state_dict_post_hook(_shards_into_state_dict)  # type: ignore[no-untyped-call]
        self.register_load_state_dict_pre_hook(_shards_from_state_dict)  # type: ignore[no-untyped-call]

    # ----------------------------------------------------------------------------- layout
    def _build_input_exchange(self, device: torch.device) -> None:
        """Slot layout of a local batch (table t's [B, max_bag_size] block at B * cap_start[t])
        and which slots go to which rank."""
        tables, batch = self.plan.tables, self.batch_size
        caps = [t.max_bag_size for t in tables]
        self.cap_start = [sum(caps[:t]) for t in range(len(tables))]
        self.slots = batch * sum(caps)
        held_by = [[t for t, p in enumerate(self.plan.placements) if p.kind == ROW_WISE or p.rank == r]
                   for r in range(self.world_size)]
        gather = [torch.arange(batch * self.cap_start[t], batch * (self.cap_start[t] + caps[t]))
                  for r in range(self.world_size) for t in held_by[r]]
        self.register_buffer("input_gather", torch.cat(gather).to(device) if gather else
                             torch.zeros(0, dtype=torch.int64, device=device), persistent=False)
        self.input_gather: Tensor
        self.input_send_splits = [batch * sum(caps[t] for t in held) for held in held_by]
        mine = held_by[self.rank]
        self.input_recv_splits = [self.input_send_splits[self.rank]] * self.world_size
        # where each held table's slots start inside one source rank's block
        self.held_slot_start = {t: batch * sum(caps[u] for u in mine[:i]) for i, t in enumerate(mine)}
        self.register_buffer("slot_cap", torch.tensor(caps, dtype=torch.int64, device=device), persistent=False)
        self.register_buffer("slot_start", torch.tensor(self.cap_start, dtype=torch.int64, device=device) * batch,
                             persistent=False)
        self.slot_cap: Tensor
        self.slot_start: Tensor

    def _build_output_exchange(self, device: torch.device) -> None:
        """Column maps from the received blocks (rank by rank, each rank's local columns) to the
        output's columns (table order); row-wise tables' partials summed in rank order."""
        plan, batch = self.plan, self.batch_size
        dims = [t.embedding_dim for t in plan.tables]
        width: list[int] = []
        where: dict[tuple[int, int], int] = {}  # (rank, table) -> first column in the received block
        base = 0
        for r in range(self.world_size):
            col = base
            for group in local_layout(plan, r, self.weight_per_shard, self.group_as):
                for shard in group:
                    where[(r, shard.table)] = col
                    col += dims[shard.table]
            width.append(col - base)
            base = col
        self.local_width = width[self.rank]
        self.output_send_splits = [batch * width[self.rank]] * self.world_size
        self.output_recv_splits = [batch * w for w in width]
        received_width = base
        row_wise = [t for t, p in enumerate(plan.placements) if p.kind == ROW_WISE]
        rw_start = {t: sum(dims[u] for u in row_wise[:i]) for i, t in enumerate(row_wise)}

        def columns(start: int, dim: int) -> list[int]:
            return list(range(start, start + dim))

        partial_cols = [[c for t in row_wise for c in columns(where[(r, t)], dims[t])] for r in range(self.world_size)]
        final: list[int] = []
        for t, place in enumerate(plan.placements):
            if place.kind == TABLE_WISE:
                assert place.rank is not None
                final.extend(columns(where[(place.rank, t)], dims[t]))
            else:
                final.extend(columns(received_width + rw_start[t], dims[t]))
        self.has_row_wise = bool(row_wise)
        self.register_buffer("partial_cols", torch.tensor(partial_cols, dtype=torch.int64, device=device)
                             .reshape(self.world_size, -1), persistent=False)
        self.register_buffer("final_cols", torch.tensor(final, dtype=torch.int64, device=device), persistent=False)
        self.partial_cols: Tensor
        self.final_cols: Tensor

    # ----------------------------------------------------------------------------- step
    def to_slots(self, indices: Tensor, offsets: Tensor) -> Tensor:
        """The local batch as ``[slots]`` ids (table t's bags as [B, max_bag_size] at
        B * cap_start[t]; -1 in empty slots); lookups past a bag's slots are dropped and counted."""
        tables, batch = len(self.plan.tables), self.batch_size
        if offsets.dim() != 1 or offsets.numel() != tables * batch + 1:
            raise ValueError(f"offsets must have T * B + 1 = {tables * batch + 1} entries (the local batch size is "
                             f"fixed at {batch}), got {tuple(offsets.shape)}")
        indices, offsets = indices.to(torch.int64), offsets.to(torch.int64)
        pos = torch.arange(indices.numel(), device=indices.device)
        bag = torch.searchsorted(offsets[1:], pos, right=True).clamp(max=tables * batch - 1)
        slot = pos - offsets[bag]
        table = torch.div(bag, batch, rounding_mode="floor")
        cap = self.slot_cap[table]
        kept = (slot < cap) & (pos < offsets[-1])
        dest = torch.where(kept, self.slot_start[table] + (bag - table * batch) * cap + slot, self.slots)
        lengths = offsets[1:] - offsets[:-1]
        over = (lengths.view(tables, batch) - self.slot_cap.unsqueeze(1)).clamp(min=0).sum()
        self.dropped_lookups.add_(over)
        return indices.new_full((self.slots + 1,), -1).scatter_(0, dest, indices)[:self.slots]

    def exchange_inputs(self, slots: Tensor) -> Tensor:
        """Each rank's held tables' slots for the global batch (rank blocks in rank order)."""
        send = slots[self.input_gather]
        if self.world_size == 1:
            return send
        recv = send.new_empty(sum(self.input_recv_splits))
        dist.all_to_all_single(recv, send, self.input_recv_splits, self.input_send_splits, group=self.group)
        return recv

    def shard_ids(self, received: Tensor) -> list[list[Tensor]]:
        """Per group, per shard: [B_global, max_bag_size] row numbers inside the shard (-1: none)."""
        per_rank = received.view(self.world_size, -1)
        out: list[list[Tensor]] = []
        for group in self.groups:
            ids = []
            for shard in group:
                cap = self.plan.tables[shard.table].max_bag_size
                start = self.held_slot_start[shard.table]
                block = per_rank[:, start:start + self.batch_size * cap].reshape(-1, cap)
                if self.plan.placements[shard.table].kind == ROW_WISE:
                    mine = (block >= shard.row_start) & (block < shard.row_end)
                    block = torch.where(mine, block - shard.row_start, -1)
                ids.append(block)
            out.append(ids)
        return out

    def local_lookups(self, ids: list[list[Tensor]]) -> Tensor:
        """[B_global, local columns]: every local shard pooled for the global batch."""
        pooled = [lookup(group_ids) for lookup, group_ids in zip(self.shard_lookups, ids, strict=True)]
        if not pooled:  # no shard here: still a node of the graph, so the backward exchange runs
            return torch.zeros(self.batch_size * self.world_size, 0, device=self.dropped_lookups.device,
                               requires_grad=True)
        return pooled[0] if len(pooled) == 1 else torch.cat(pooled, 1)

    def exchange_outputs(self, local: Tensor) -> Tensor:
        """[B, sum(dims)] of this rank's samples in table order, from every rank's local columns."""
        flat = local.contiguous().view(-1)
        if self.world_size > 1:
            flat = _AllToAll.apply(flat, self.output_send_splits, self.output_recv_splits,  # type: ignore[no-untyped-call]
                                   self.group)
        blocks = torch.split(flat, self.output_recv_splits)
        received = torch.cat([b.view(self.batch_size, -1) for b in blocks], 1)
        if self.has_row_wise:
            partial = received[:, self.partial_cols[0]]
            for r in range(1, self.world_size):
                partial = partial + received[:, self.partial_cols[r]]
            received = torch.cat([received, partial], 1)
        return received[:, self.final_cols]

    def forward(self, indices: Tensor, offsets: Tensor) -> Tensor:
        received = self.exchange_inputs(self.to_slots(indices, offsets))
        return self.exchange_outputs(self.local_lookups(self.shard_ids(received)))

    # ----------------------------------------------------------------------------- weights
    def local_shards(self) -> list[tuple[Shard, Tensor, Tensor]]:
        """(shard, weight rows, optimizer state rows) of every shard on this rank (views; the
        state is empty for SGD)."""
        out = []
        for group, lookup in zip(self.groups, self.shard_lookups, strict=True):
            weight, state = lookup.weight, lookup.optimizer_state()
            start = 0
            for shard in group:
                rows = slice(start, start + shard.rows)
                out.append((shard, weight.data[rows], state[rows] if state.numel() else state))
                start += shard.rows
        return out

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """Uniform(+-1/sqrt(rows)) per table (TorchRec's default), drawn in chunks of INIT_CHUNK
        rows, chunk c of table t from a generator seeded by (seed, t, c): the same weights whatever
        the plan and the number of ranks. Optimizer state to its initial value."""
        for shard, weight, state in self.local_shards():
            spec = self.plan.tables[shard.table]
            bound = spec.num_embeddings ** -0.5
            for chunk in range(shard.row_start // INIT_CHUNK, (shard.row_end - 1) // INIT_CHUNK + 1):
                gen = torch.Generator(device=weight.device).manual_seed(
                    (seed * 1_000_003 + shard.table) * 1_000_033 + chunk)
                first, last = chunk * INIT_CHUNK, min((chunk + 1) * INIT_CHUNK, spec.num_embeddings)
                values = torch.empty(last - first, spec.embedding_dim, dtype=weight.dtype, device=weight.device)
                values.uniform_(-bound, bound, generator=gen)
                lo, hi = max(first, shard.row_start), min(last, shard.row_end)
                weight[lo - shard.row_start:hi - shard.row_start] = values[lo - first:hi - first]
            if state.numel():
                state.fill_(self.optimizer.initial_accumulator_value if isinstance(self.optimizer, RowWiseAdagrad)
                            else 0.0)

    def shard_state_dict(self) -> dict[str, Any]:
        """This rank's shards: table name, rows [row_start, row_end), weight and optimizer state
        (detached views; ``torch.save`` copies them)."""
        shards = [{"table": self.plan.tables[s.table].name, "row_start": s.row_start, "row_end": s.row_end,
                   "weight": w, "optimizer_state": st} for s, w, st in self.local_shards()]
        return {"format": CHECKPOINT_FORMAT, "rank": self.rank, "world_size": self.world_size,
                "optimizer": type(self.optimizer).__name__, "shards": shards}

    @torch.no_grad()
    def load_shard_state_dicts(self, saved: Sequence[Mapping[str, Any]]) -> None:
        """Load this rank's rows from the shard dicts saved by any number of ranks (all of them:
        each local row must be covered). The optimizer state is loaded where both sides have one."""
        by_table: dict[str, list[Mapping[str, Any]]] = {}
        for checkpoint in saved:
            if checkpoint.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"not a sharded-tables checkpoint of format {CHECKPOINT_FORMAT}")
            for piece in checkpoint["shards"]:
                by_table.setdefault(piece["table"], []).append(piece)
        for shard, weight, state in self.local_shards():
            name = self.plan.tables[shard.table].name
            covered = 0
            for piece in by_table.get(name, []):
                lo, hi = max(shard.row_start, piece["row_start"]), min(shard.row_end, piece["row_end"])
                if lo >= hi:
                    continue
                src = slice(lo - piece["row_start"], hi - piece["row_start"])
                dst = slice(lo - shard.row_start, hi - shard.row_start)
                weight[dst] = piece["weight"][src].to(weight.device, weight.dtype)
                if state.numel() and piece["optimizer_state"].numel():
                    state[dst] = piece["optimizer_state"][src].to(state.device)
                covered += hi - lo
            if covered != shard.rows:
                raise ValueError(f"table {name!r}: the checkpoint covers {covered} of rows "
                                 f"[{shard.row_start}, {shard.row_end}) (expected each row once)")

    def load_tables(self, weights: Mapping[str, Tensor], states: Mapping[str, Tensor] | None = None) -> None:
        """Load whole tables (name -> [rows, dim], and optionally -> [rows] optimizer state)."""
        empty = torch.empty(0)
        pieces = [{"table": name, "row_start": 0, "row_end": w.shape[0], "weight": w,
                   "optimizer_state": states[name] if states is not None else empty} for name, w in weights.items()]
        self.load_shard_state_dicts([{"format": CHECKPOINT_FORMAT, "shards": pieces}])


def _shards_into_state_dict(module: ShardedTableBatchedEmbeddingBag, destination: dict[str, Any], prefix: str,
                            local_metadata: Any) -> None:
    """``state_dict()``'s post-hook: the local weights' entries (named by the layout: which
    shards share a weight) become one entry per shard named by table and rows. The fused
    optimizers' step count and seed are left out: SGD and row-wise Adagrad without stochastic
    rounding (the only ones allowed here) do not use them."""
    for key in [k for k in destination if k.startswith(prefix + "lookups.")]:
        del destination[key]
    for shard, weight, state in module.local_shards():
        base = f"{prefix}{SHARD_KEYS}{module.plan.tables[shard.table].name}.{shard.row_start}-{shard.row_end}."
        destination[base + "weight"] = weight
        if state.numel():
            destination[base + "optimizer_state"] = state


def _shards_from_state_dict(module: ShardedTableBatchedEmbeddingBag, state_dict: dict[str, Any], prefix: str,
                            local_metadata: Any, strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                            error_msgs: list[str]) -> None:
    """``load_state_dict``'s pre-hook: the shard entries (of one rank or the union of many) load
    this rank's rows (``load_shard_state_dicts``); the local weights' own entries are then filled
    in with what they now hold, so that ``nn.Module`` copies each onto itself."""
    pieces: dict[tuple[str, int, int], dict[str, Tensor]] = {}
    for key in [k for k in state_dict if k.startswith(prefix + SHARD_KEYS)]:
        table, rows, part = key[len(prefix + SHARD_KEYS):].rsplit(".", 2)
        start, _, end = rows.partition("-")
        pieces.setdefault((table, int(start), int(end)), {})[part] = state_dict.pop(key)
    if not pieces:
        return  # nothing of ours: nn.Module reports the weights as missing
    empty = torch.empty(0)
    shards = [{"table": table, "row_start": start, "row_end": end, "weight": parts["weight"],
               "optimizer_state": parts.get("optimizer_state", empty)} for (table, start, end), parts in pieces.items()]
    try:
        module.load_shard_state_dicts([{"format": CHECKPOINT_FORMAT, "shards": shards}])
    except (KeyError, ValueError) as error:
        error_msgs.append(str(error))
    state_dict.update(module.lookups.state_dict(prefix=prefix + "lookups.", keep_vars=True))


def merge_shard_state_dicts(saved: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Tensor]]:
    """Whole tables from the shard dicts of every rank: name -> {"weight", "optimizer_state"}
    (on the CPU; the state is empty for SGD)."""
    pieces: dict[str, list[Mapping[str, Any]]] = {}
    for checkpoint in saved:
        for piece in checkpoint["shards"]:
            pieces.setdefault(piece["table"], []).append(piece)
    out: dict[str, dict[str, Tensor]] = {}
    for name, parts in pieces.items():
        parts = sorted(parts, key=lambda p: int(p["row_start"]))
        ends = [p["row_start"] for p in parts[1:]] + [None]
        if parts[0]["row_start"] != 0 or any(p["row_end"] != e for p, e in zip(parts[:-1], ends[:-1], strict=True)):
            raise ValueError(f"table {name!r}: the shards do not tile its rows")
        weight = torch.cat([p["weight"].detach().cpu() for p in parts])
        states = [p["optimizer_state"].detach().cpu() for p in parts]
        state = torch.cat(states) if all(s.numel() for s in states) else torch.empty(0)
        out[name] = {"weight": weight, "optimizer_state": state}
    return out


def free_memory_per_rank(device: Any = None, group: dist.ProcessGroup | None = None) -> list[int]:
    """Each rank's free GPU memory in bytes (``torch.cuda.mem_get_info``), gathered to every rank
    (a setup step: reads to the host)."""
    free = torch.tensor([torch.cuda.mem_get_info(device)[0]], dtype=torch.int64,
                        device=device if device is not None else "cuda")
    if not (dist.is_available() and dist.is_initialized()):
        return [int(free)]
    gathered = [torch.zeros_like(free) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, free, group=group)
    return [int(g) for g in gathered]
