"""The sharding planner: where each table's rows live (TorchRec's planner idea, much smaller).

A plan is data: one placement per table, either **table-wise** (the whole table on one rank)
or **row-wise** (rows split into ``world_size`` contiguous blocks, block r on rank r). The
planner chooses it from the tables' sizes, dims and pooling factors and each rank's free
memory; an explicit plan may be written instead (``ShardingPlan.from_kinds``). Nothing here
imports torch: plans can be made and printed anywhere (``plan.describe()``).

Cost model (docs/sharding.md): a table costs ``rows * (dim * weight_bytes + state_bytes)``
of memory where it lives, and ``pooling_factor * dim`` units of lookup work per sample on the
rank that looks it up. Row-wise tables spread both over every rank but add
``world_size * dim`` values per local sample to the output exchange (a partial sum from every
rank) against ``dim`` for a table-wise one, so the planner keeps tables table-wise unless they are
too large: larger than ``row_wise_fraction`` of the smallest rank's budget, or not fitting anywhere.
Table-wise tables go, largest first, to the rank with the least lookup work among those with room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

TABLE_WISE: Literal["table_wise"] = "table_wise"
ROW_WISE: Literal["row_wise"] = "row_wise"
ShardingKind = Literal["table_wise", "row_wise"]


class PlanError(ValueError):
    """No placement fits the ranks' memory, or an explicit plan is inconsistent."""


@dataclass(frozen=True)
class TableSpec:
    """One embedding table: ``name``, ``num_embeddings`` rows of ``embedding_dim`` columns;
    ``pooling_factor``: the mean lookups per bag (the planner's work estimate);
    ``max_bag_size``: the most lookups one bag may have. The input exchange sends every bag as
    ``max_bag_size`` slots so that its size is known without reading the batch on the host;
    lookups beyond it are dropped and counted (``ShardedTableBatchedEmbeddingBag.dropped_lookups``)."""

    name: str
    num_embeddings: int
    embedding_dim: int
    pooling_factor: float = 1.0
    max_bag_size: int = 1

    def __post_init__(self) -> None:
        if self.num_embeddings < 1 or self.embedding_dim < 1 or self.max_bag_size < 1:
            raise ValueError(f"table {self.name!r}: num_embeddings, embedding_dim and max_bag_size must be >= 1")
        if not self.pooling_factor >= 0.0:
            raise ValueError(f"table {self.name!r}: pooling_factor must be >= 0")


@dataclass(frozen=True)
class Placement:
    """Where one table lives: ``kind`` table-wise on ``rank``, or row-wise over all ranks."""

    kind: ShardingKind
    rank: int | None = None


def row_blocks(num_rows: int, world_size: int) -> list[tuple[int, int]]:
    """The row range [start, end) of each rank's block of a row-wise table (even split; the
    first ``num_rows % world_size`` blocks one row longer)."""
    return [(num_rows * r // world_size, num_rows * (r + 1) // world_size) for r in range(world_size)]


@dataclass(frozen=True)
class Shard:
    """Rows [row_start, row_end) of table ``table`` (its index in the table list), on ``rank``."""

    table: int
    rank: int
    row_start: int
    row_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start


@dataclass(frozen=True)
class ShardingPlan:
    """One ``Placement`` per table (same order as ``tables``) over ``world_size`` ranks."""

    tables: tuple[TableSpec, ...]
    placements: tuple[Placement, ...]
    world_size: int
    weight_bytes: int = 4  # bytes per weight element (float32)
    state_bytes_per_row: int = 4  # row-wise Adagrad's float32 accumulator (0 for SGD)
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise PlanError(f"world_size must be >= 1, got {self.world_size}")
        if len(self.placements) != len(self.tables):
            raise PlanError(f"{len(self.placements)} placements for {len(self.tables)} tables")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise PlanError(f"table names must be unique, got {names}")
        for spec, place in zip(self.tables, self.placements, strict=True):
            if place.kind == TABLE_WISE and (place.rank is None or not 0 <= place.rank < self.world_size):
                raise PlanError(f"table {spec.name!r}: table-wise needs a rank in [0, {self.world_size}), "
                                f"got {place.rank}")
            if place.kind == ROW_WISE and place.rank is not None:
                raise PlanError(f"table {spec.name!r}: row-wise tables span every rank (rank must be None)")
            if place.kind == ROW_WISE and spec.num_embeddings < self.world_size:
                raise PlanError(f"table {spec.name!r}: {spec.num_embeddings} rows cannot be split over "
                                f"{self.world_size} ranks")

    @staticmethod
    def from_kinds(tables: Sequence[TableSpec], kinds: Sequence[ShardingKind | int], world_size: int,
                   weight_bytes: int = 4, state_bytes_per_row: int = 4) -> ShardingPlan:
        """An explicit plan: per table, a rank (table-wise there) or ``"row_wise"``."""
        placements = tuple(Placement(ROW_WISE) if k == ROW_WISE else Placement(TABLE_WISE, int(k)) for k in kinds)
        return ShardingPlan(tuple(tables), placements, world_size, weight_bytes, state_bytes_per_row)

    def shards(self) -> list[Shard]:
        """Every shard of every table, table order then rank order."""
        out: list[Shard] = []
        for t, (spec, place) in enumerate(zip(self.tables, self.placements, strict=True)):
            if place.kind == TABLE_WISE:
                assert place.rank is not None
                out.append(Shard(t, place.rank, 0, spec.num_embeddings))
            else:
                out.extend(Shard(t, r, a, b) for r, (a, b) in enumerate(row_blocks(spec.num_embeddings,
                                                                                    self.world_size)))
        return out

    def shards_on(self, rank: int) -> list[Shard]:
        return [s for s in self.shards() if s.rank == rank]

    def shard_bytes(self, shard: Shard) -> int:
        dim = self.tables[shard.table].embedding_dim
        return shard.rows * (dim * self.weight_bytes + self.state_bytes_per_row)

    def bytes_per_rank(self) -> list[int]:
        totals = [0] * self.world_size
        for s in self.shards():
            totals[s.rank] += self.shard_bytes(s)
        return totals

    def work_per_rank(self) -> list[float]:
        """Lookup work per global sample (pooling factor x dim, split evenly for row-wise)."""
        totals = [0.0] * self.world_size
        for s in self.shards():
            spec = self.tables[s.table]
            totals[s.rank] += spec.pooling_factor * spec.embedding_dim * s.rows / spec.num_embeddings
        return totals

    def describe(self) -> str:
        """The plan as a table: one line per table, then memory and lookup work per rank."""
        lines = [f"sharding plan over {self.world_size} rank(s)",
                 f"{'table':<12} {'rows':>12} {'dim':>5} {'pool':>6}  placement"]
        for spec, place in zip(self.tables, self.placements, strict=True):
            where = f"table-wise on rank {place.rank}" if place.kind == TABLE_WISE else (
                f"row-wise, ~{spec.num_embeddings // self.world_size} rows per rank")
            lines.append(f"{spec.name:<12} {spec.num_embeddings:>12} {spec.embedding_dim:>5} "
                         f"{spec.pooling_factor:>6.1f}  {where}")
        work = self.work_per_rank()
        for r, nbytes in enumerate(self.bytes_per_rank()):
            lines.append(f"rank {r}: {nbytes / 2**30:8.2f} GiB of weights + optimizer state, "
                         f"lookup work {work[r]:.0f} per sample")
        lines.extend(self.notes)
        return "\n".join(lines)


def plan_sharding(tables: Sequence[TableSpec], memory_per_rank: Sequence[int], weight_bytes: int = 4,
                  state_bytes_per_row: int = 4, row_wise_fraction: float = 0.2) -> ShardingPlan:
    """Choose table-wise or row-wise per table (see the module docstring); ``memory_per_rank``:
    the bytes each rank may spend on embeddings (e.g. ``free_memory_per_rank()`` less room for
    activations). Raises ``PlanError`` when the tables cannot fit."""
    world = len(memory_per_rank)
    if world < 1:
        raise PlanError("memory_per_rank must list at least one rank")
    specs = tuple(tables)
    row_bytes = [t.embedding_dim * weight_bytes + state_bytes_per_row for t in specs]
    limit = row_wise_fraction * min(memory_per_rank)
    kinds: list[ShardingKind | int] = [TABLE_WISE] * len(specs)
    free = list(memory_per_rank)
    work = [0.0] * world
    notes: list[str] = []
    # row-wise first: the tables too large for one rank (or above the fraction), spread evenly
    for t, spec in enumerate(specs):
        size = spec.num_embeddings * row_bytes[t]
        if world > 1 and spec.num_embeddings >= world and (size > limit or size > max(memory_per_rank)):
            kinds[t] = ROW_WISE
            for r, (a, b) in enumerate(row_blocks(spec.num_embeddings, world)):
                free[r] -= (b - a) * row_bytes[t]
                work[r] += spec.pooling_factor * spec.embedding_dim / world
    order = sorted((t for t in range(len(specs)) if kinds[t] == TABLE_WISE),
                   key=lambda t: specs[t].num_embeddings * row_bytes[t], reverse=True)
    for t in order:
        size = specs[t].num_embeddings * row_bytes[t]
        fits = [r for r in range(world) if free[r] >= size]
        if not fits:
            raise PlanError(f"table {specs[t].name!r} ({size / 2**30:.2f} GiB) fits on no rank "
                            f"(free: {[round(f / 2**30, 2) for f in free]} GiB)")
        rank = min(fits, key=lambda r: (work[r], -free[r], r))
        kinds[t] = rank
        free[rank] -= size
        work[rank] += specs[t].pooling_factor * specs[t].embedding_dim
    if min(free) < 0:
        raise PlanError(f"the row-wise tables alone exceed a rank's memory (left: {free})")
    notes.append(f"row-wise above {limit / 2**30:.2f} GiB per table ({row_wise_fraction:.0%} of the smallest "
                 "rank's budget)")
    plan = ShardingPlan.from_kinds(specs, kinds, world, weight_bytes, state_bytes_per_row)
    return ShardingPlan(plan.tables, plan.placements, world, weight_bytes, state_bytes_per_row, tuple(notes))
