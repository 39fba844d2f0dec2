"""The case matrix: which inputs a kernel is run on, derived from the semantics it claims.

Cases are plain data (shapes, lengths, flags and a per-case seed); the runner
turns them into tensors. The matrix covers every declared combination of weight
dtype, index dtype, mode and layout, then the edge cases of the reference-kernel
issue: dims 1, 3, 4, 5, 127, 128, 129, 256; empty bags; L = 1 and L = 1000;
duplicate indices; indices 0 and num_embeddings - 1 (in every case);
padding_idx; include_last_offset; per_sample_weights; a batch of one; and a
table of more than 2^31 elements (32-bit offset overflow).

Beyond one forward table (compliance.semantics): every declared output
dtype; table-batched kernels get T tables of different sizes in one buffer
(each case's indices touch the first and last row of every table); backward
kernels get the same shapes with a gradient of the output and, for fused
updates, a learning rate. A declared ``domain`` bounds everything: cases are
mapped into it (the nearest supported dim, the longest bag that fits, the batch
rounded up to its multiple, the largest table it admits), never run outside it.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from compliance.manifest import Semantics
from compliance.semantics import Domain, Quantization
from compliance.verify.build import BuildError
from compliance.verify.vocabulary import ELEM_SIZE, MODE_CODES, WEIGHT_CODES

DIMS = (1, 3, 4, 5, 127, 128, 129, 256)
"""Row widths every kernel sees (vector tails, one warp, just over one warp)."""
LARGE_TABLE_ELEMENTS = 2**31 + 64
"""Elements of the large-table case: more than a signed 32-bit offset can address."""
LARGE_TABLE_DIM = 4
"""Row width of the large-table case (rows = LARGE_TABLE_ELEMENTS / dim)."""
LONG_BAG = 1000
"""Bag length of the long-bag case."""
DEFAULT_TABLES = (2, 5)
"""Range of the number of tables of a table-batched case when the domain does not fix it."""
MODES = ("sum", "mean", "max")
"""The pooling modes of torch.nn.functional.embedding_bag."""
UNDECLARED_MODE = "undeclared-mode"
"""Tag of a case in a mode the kernel does not declare but its call interface passes: the kernel must
refuse it (raise) or compute it right (``compliance.verify.driver`` judges it so)."""
_INTERFACE_KEYS = ("arguments", "defines", "grid", "block", "shared_memory", "constexprs")
"""Keys of a ``build:`` block whose expressions reach the kernel as arguments, defines or launch shape."""
_MODE_NAME = re.compile(r"(?<![\w.])mode(?!\w)")


class DomainError(BuildError):
    """The declared domain leaves no case to run (reported like an unusable build block)."""


@dataclass(frozen=True)
class Case:
    """One input configuration; the runner makes the tensors from ``seed``."""

    id: str
    """Readable, unique within a kernel, e.g. ``sum-csr-float16-int32-d129``."""
    op: str
    """``embedding_bag`` or ``embedding``."""
    mode: str
    """sum, mean or max; ``""`` for embedding."""
    layout: str
    """fixed or csr (embedding_bag); flat or batched (embedding)."""
    weight_dtype: str
    """float32, float16 or bfloat16."""
    index_dtype: str
    """int32 or int64."""
    num_embeddings: int
    """Table rows."""
    dim: int
    """Table columns."""
    num_bags: int
    """Bags (embedding_bag), samples (batched embedding) or indices (flat embedding)."""
    pooling: int
    """Indices per bag in the fixed layout / per sample (batched); 0 for csr, 1 for flat."""
    bag_lengths: tuple[int, ...] = ()
    """csr only: the length of every bag (0 for an empty bag)."""
    per_sample_weights: bool = False
    """Pass per_sample_weights (sum only)."""
    padding_idx: int | None = None
    """Row excluded from pooling, or None."""
    include_last_offset: bool = False
    """csr: offsets carries the trailing num_indices entry."""
    large: bool = False
    """Table of more than 2^31 elements; only the rows indexed are filled."""
    duplicates: bool = False
    """Every index of the case is the same row."""
    seed: int = 0
    """Seed of the case's random tensors."""
    tags: tuple[str, ...] = field(default=())
    """Edge cases this case stands for."""
    output_dtype: str = ""
    """Dtype of the output (and of grad_out / the gradient); empty: the weight dtype."""
    table_rows: tuple[int, ...] = ()
    """Table-batched: rows of each table (summing to num_embeddings); empty: one table."""
    absolute_indices: bool = False
    """Table-batched: indices already carry their table's row offset."""
    backward: str = ""
    """Empty (forward), grad-dense, grad-sparse, grad-sparse_coo, grad-rows, sgd or rowwise_adagrad."""
    learning_rate: float = 0.0
    """Fused updates: the step (a float32 number)."""
    eps: float = 0.0
    """rowwise_adagrad: the epsilon (a float32 number)."""
    grad_weight_dtype: str = ""
    """Backward: dtype of the returned weight gradient; empty: the output's (that of grad_out)."""
    quantization: Quantization | None = None
    """A quantized table (the weight holds codes; ``weight_dtype`` is then float32, the precision they are
    dequantized to); None: a float table."""
    scales: tuple[float, ...] = ()
    """Quantized table-wise: each table's scale (float32 numbers with a 15-bit significand, so that an
    int8 or fp8 code times its scale is exact in float32)."""
    output_scales: tuple[float, ...] = ()
    """Quantized int8 output: each table's inverse output scale (float32 numbers)."""

    @property
    def out_dtype(self) -> str:
        """The output dtype, resolved."""
        return self.output_dtype or self.weight_dtype

    @property
    def grad_dtype(self) -> str:
        """The returned gradient's dtype, resolved."""
        return self.grad_weight_dtype or self.out_dtype

    @property
    def num_tables(self) -> int:
        """Tables in the weight buffer."""
        return len(self.table_rows) or 1

    @property
    def batch_size(self) -> int:
        """Bags per table."""
        return self.num_bags // self.num_tables

    @property
    def row_offsets(self) -> tuple[int, ...]:
        """Row offset of every table, plus the total (num_tables + 1 entries)."""
        out = [0]
        for rows in self.table_rows or (self.num_embeddings,):
            out.append(out[-1] + rows)
        return tuple(out)

    @property
    def num_indices(self) -> int:
        """Total number of indices."""
        return sum(self.bag_lengths) if self.layout == "csr" else self.num_bags * self.pooling

    @property
    def num_offsets(self) -> int:
        """Entries in offsets (0 without offsets)."""
        if self.layout != "csr":
            return 0
        return self.num_bags + (1 if self.include_last_offset else 0)

    @property
    def row_bytes(self) -> int:
        """Bytes per row of the weight the kernel gets."""
        q = self.quantization
        if q is None:
            return self.dim * ELEM_SIZE[self.weight_dtype]
        if q.scales_in != "row":
            return self.dim
        codes = -(-self.dim // 2) if q.weight == "int4" else self.dim
        raw = 4 + codes  # fp16 scale and bias (FBGEMM's int8 / int4), or a float32 scale (fp8), then the codes
        return -(-raw // q.row_alignment) * q.row_alignment

    def scalars(self) -> dict[str, int]:
        """The integer vocabulary for this case (see ``vocabulary.SCALARS``)."""
        return {
            "num_embeddings": self.num_embeddings, "dim": self.dim, "num_bags": self.num_bags,
            "pooling": self.pooling, "num_indices": self.num_indices, "num_offsets": self.num_offsets,
            "padding_idx": -1 if self.padding_idx is None else self.padding_idx,
            "mode": MODE_CODES.get(self.mode, 0), "include_last_offset": int(self.include_last_offset),
            "has_per_sample_weights": int(self.per_sample_weights), "csr": int(self.layout == "csr"),
            "weight_dtype": WEIGHT_CODES[self.weight_dtype],
            "weight_elem_size": ELEM_SIZE[self.weight_dtype] if self.quantization is None else 1,
            "index_elem_size": ELEM_SIZE[self.index_dtype],
            "output_dtype": WEIGHT_CODES[self.out_dtype], "output_elem_size": ELEM_SIZE[self.out_dtype],
            "num_tables": self.num_tables, "batch_size": self.batch_size, "total_rows": self.num_embeddings,
            "row_bytes": self.row_bytes,
        }

    def floats(self) -> dict[str, float]:
        """The floating-point vocabulary (``vocabulary.FLOAT_SCALARS``)."""
        return {"learning_rate": self.learning_rate, "eps": self.eps,
                "weight_scale": self.scales[0] if self.scales else 0.0,
                "output_inverse_scale": self.output_scales[0] if self.output_scales else 0.0}

    def selectors(self) -> dict[str, str]:
        """The case variables ``defines`` may select on."""
        return {"weight_dtype": self.weight_dtype, "index_dtype": self.index_dtype,
                "mode": self.mode or "sum", "layout": self.layout, "output_dtype": self.out_dtype,
                "weight_format": self.weight_dtype if self.quantization is None else self.quantization.weight}

    def describe(self) -> str:
        """One line for progress output and findings."""
        batch = self.batch_size
        shape = (f"B={batch} bags={list(self.bag_lengths)}" if self.layout == "csr"
                 and len(self.bag_lengths) <= 8 else
                 f"B={batch} L={self.pooling}" if self.layout != "csr" else
                 f"B={batch} csr n={self.num_indices}")
        extras = [f"padding_idx={self.padding_idx}"] if self.padding_idx is not None else []
        extras += ["per_sample_weights"] * self.per_sample_weights
        extras += ["include_last_offset"] * self.include_last_offset
        if self.table_rows:
            extras.append(f"T={self.num_tables} tables rows={list(self.table_rows)}"[:80]
                          + (" absolute indices" if self.absolute_indices else ""))
        if self.output_dtype and self.output_dtype != self.weight_dtype:
            extras.append(f"out={self.output_dtype}")
        if self.grad_weight_dtype and self.grad_weight_dtype != self.out_dtype:
            extras.append(f"grad_weight={self.grad_weight_dtype}")
        if self.backward:
            extras.append(self.backward + (f" lr={self.learning_rate}" if self.learning_rate else ""))
        if self.quantization is not None:
            extras.append(f"quantized {self.quantization.label} scales in {self.quantization.scales_in}")
        return f"{self.id}: N={self.num_embeddings} D={self.dim} {shape}" + "".join(f" {e}" for e in extras)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        """Inverse of ``to_json``."""
        quantization = data.get("quantization")
        return cls(**{**data, "bag_lengths": tuple(data["bag_lengths"]), "tags": tuple(data["tags"]),
                      "table_rows": tuple(data.get("table_rows", ())),
                      "quantization": None if quantization is None else Quantization(**quantization),
                      "scales": tuple(data.get("scales", ())), "output_scales": tuple(data.get("output_scales", ()))})


def _csr_lengths(rng: random.Random, bags: int, mean: int) -> tuple[int, ...]:
    """Random bag lengths with empty bags at the start, the middle and the end."""
    lengths = [rng.randint(1, 2 * mean) for _ in range(bags)]
    for position in {0, bags // 2, bags - 1} if bags >= 3 else {0}:
        lengths[position] = 0
    if sum(lengths) < 2:
        lengths[-1] = 2
    return tuple(lengths)


class _Builder:
    """Accumulates cases with unique ids and per-case seeds, fitted to the semantics and domain."""

    def __init__(self, semantics: Semantics, seed: int) -> None:
        self.sem = semantics
        self.domain = semantics.domain
        self.rng = random.Random(seed)
        self.cases: list[Case] = []
        self.combos = dtype_combinations(semantics)

    @property
    def dims(self) -> tuple[int, ...]:
        """The dims sweep: the declared ones, the standard widths moved into a declared range and its
        ends, else ``DIMS``."""
        span = self.domain.dim_range
        if span is not None:
            return tuple(sorted({span.fit(d) for d in (*DIMS, span.low, span.high)}))
        return self.domain.dims or DIMS

    def out_for(self, wd: str, od: str = "") -> tuple[str, str]:
        """(output dtype, returned gradient dtype) of a case on a ``wd`` table: ``od`` if given, else the
        first declared combination's for that table dtype."""
        for w, o, g in self.combos:
            if w == wd and (not od or o == od):
                return o, g
        return od, ""

    def add(self, case: Case) -> None:
        """Fit ``case`` to the semantics and the domain, then append it under a unique id."""
        if self.sem.tables is not None:
            case = self._tabled(case)
        case = _into_domain(case, self.domain, self.rng)
        if self.sem.backward is not None:
            case = self._backward(case)
        if self.sem.quantization is not None:
            case = self._quantized(case, self.sem.quantization)
        ids = {c.id for c in self.cases}
        unique, n = case.id, 2
        while unique in ids:
            unique, n = f"{case.id}#{n}", n + 1
        self.cases.append(replace(case, id=unique, seed=self.rng.getrandbits(63)))

    def _tabled(self, case: Case) -> Case:
        """The same case over T tables of different sizes stacked in one buffer."""
        tables = self.domain.tables.clamp(self.rng.randint(*DEFAULT_TABLES))
        rows = tuple(self._rows() for _ in range(tables))
        if case.large:  # the big table first, so the later tables' offsets pass 2^31 elements too
            rows = (case.num_embeddings, *rows[1:])
        lengths = case.bag_lengths
        if case.layout == "csr":  # FBGEMM's order: bag (t, b) at t * B + b; table 0 keeps the case's bags
            lengths = lengths + tuple(self.rng.choice(lengths) for _ in range((tables - 1) * len(lengths)))
        return replace(case, num_embeddings=sum(rows), table_rows=rows, num_bags=case.num_bags * tables,
                       bag_lengths=lengths, padding_idx=None, absolute_indices=self._absolute())

    def _rows(self) -> int:
        return self.rng.randint(8, 400)

    def _absolute(self) -> bool:
        return self.sem.tables is not None and self.sem.tables.indices == "absolute"

    def _backward(self, case: Case) -> Case:
        back = self.sem.backward
        assert back is not None
        rate = self.rng.randint(1, 40) / 64 if back.fused else 0.0  # exact in float32, never 1
        eps = 2.0**-20 if back.kind == "rowwise_adagrad" else 0.0
        return replace(case, id=f"{back.label}-{case.id}", backward=back.label, learning_rate=rate, eps=eps)

    def _quantized(self, case: Case, q: Quantization) -> Case:
        """The case on a quantized table: its scales (table-wise) and inverse output scales (int8 output),
        drawn here so that a kernel may take them as scalar arguments."""
        scales = tuple(_short_float(self.rng, 2.0**-10, 2.0**-4) for _ in range(case.num_tables)) \
            if q.scale == "table" else ()
        outputs: tuple[float, ...] = ()
        if q.output == "int8":
            outputs = tuple(_inverse_output_scale(self.rng, case, scales[t] if scales else 2.0**-6)
                            for t in range(case.num_tables))
        name = f"{q.label}-{case.id}".replace("-float32-", "-", 1)  # the codes are dequantized in float32
        return replace(case, id=name, quantization=q, scales=scales, output_scales=outputs)

    def bag(self, mode: str, layout: str, wd: str, idt: str, dim: int, *, bags: int | None = None,
            mean_len: int | None = None, lengths: tuple[int, ...] | None = None, tag: str = "",
            od: str = "", **flags: Any) -> Case:
        bags = bags if bags is not None else self.rng.randint(3, 24)
        mean_len = mean_len if mean_len is not None else self.rng.randint(2, 16)
        ilo = flags.pop("include_last_offset", self.sem.include_last_offset[0])
        if layout == "csr":
            lengths = lengths if lengths is not None else _csr_lengths(self.rng, bags, mean_len)
            pooling = 0
        else:
            lengths, pooling = (), mean_len
        od, gd = self.out_for(wd, od)
        name = "-".join(p for p in (mode, layout, wd, f"to-{od}" if od and od != wd else "",
                                    f"grad-{gd}" if gd and gd != (od or wd) else "", idt, f"d{dim}", tag) if p)
        return Case(id=name, op="embedding_bag", mode=mode, layout=layout, weight_dtype=wd, index_dtype=idt,
                    num_embeddings=self.rng.randint(40, 1000), dim=dim, num_bags=bags, pooling=pooling,
                    bag_lengths=lengths, include_last_offset=bool(ilo and layout == "csr"),
                    tags=(tag,) if tag else (), output_dtype=od, grad_weight_dtype=gd, **flags)


def _short_float(rng: random.Random, low: float, high: float) -> float:
    """A float32 number in [low, high) with a 15-bit significand: its product with an 8-bit code is
    exact in float32."""
    value = 2.0 ** rng.uniform(math.log2(low), math.log2(high))
    step = 2.0 ** (math.floor(math.log2(value)) - 14)
    return float(round(value / step) * step)


def _inverse_output_scale(rng: random.Random, case: Case, scale: float) -> float:
    """An inverse output scale that puts a typical pooled value (codes of about 73 in magnitude) near
    60 codes, so that a few per cent saturate: both the rounding and the saturation are exercised."""
    lookups = max(1, case.pooling or round(sum(case.bag_lengths) / max(1, len(case.bag_lengths))))
    typical = 73 * scale * (math.sqrt(lookups) if case.mode == "sum" else 1 / math.sqrt(lookups))
    return _short_float(rng, 30 / typical, 60 / typical)


def _nearest(values: tuple[int, ...], value: int) -> int:
    return min(values, key=lambda v: (abs(v - value), v))


def _into_domain(case: Case, domain: Domain, rng: random.Random) -> Case:
    """``case`` with every shape moved into ``domain`` (the identity for an unrestricted domain)."""
    if domain.unrestricted:
        return case
    changes: dict[str, Any] = {}
    fitted = _nearest(domain.dims, case.dim) if domain.dims else \
        domain.dim_range.fit(case.dim) if domain.dim_range is not None else case.dim
    if fitted != case.dim:
        changes["dim"] = fitted
        changes["id"] = case.id.replace(f"-d{case.dim}", f"-d{fitted}")
    tables = case.num_tables
    batch = case.batch_size
    fitted_batch = max(1, -(-batch // domain.batch_multiple) * domain.batch_multiple)
    if case.layout == "csr":
        per_table = [list(case.bag_lengths[t * batch:(t + 1) * batch]) for t in range(tables)]
        for bags in per_table:
            while len(bags) < fitted_batch:
                bags.append(rng.choice(bags) if bags else 1)
        lengths = tuple(domain.lookups.clamp(n) for bags in per_table for n in bags)
        if sum(lengths) == 0:
            lengths = (1,) + lengths[1:]
        changes["bag_lengths"] = lengths
    elif case.op == "embedding_bag" or case.layout == "batched" or case.table_rows:
        changes["pooling"] = max(1, domain.lookups.clamp(case.pooling))
    changes["num_bags"] = fitted_batch * tables
    if domain.max_rows is not None:
        if case.table_rows:
            capped = tuple(min(r, domain.max_rows) for r in case.table_rows)
            changes.update(table_rows=capped, num_embeddings=sum(capped))
        else:
            changes["num_embeddings"] = min(case.num_embeddings, domain.max_rows)
    if case.large:
        dim = changes.get("dim", case.dim)
        big = -(-LARGE_TABLE_ELEMENTS // dim)
        if domain.max_rows is not None:
            big = min(big, domain.max_rows)
        if case.table_rows:
            table_rows = (big, *changes.get("table_rows", case.table_rows)[1:])
            changes.update(table_rows=table_rows, num_embeddings=sum(table_rows))
        else:
            changes["num_embeddings"] = big
    return replace(case, **changes)


def embedding_bag_cases(sem: Semantics, seed: int, large: bool = True) -> list[Case]:
    """Every case for an ``embedding_bag`` kernel claiming ``sem``."""
    b = _Builder(sem, seed)
    modes, layouts = sem.modes or ("sum",), sem.layouts or ("fixed",)
    if sem.backward is not None:  # the gradient of max is an argmax scatter: not a declared backward
        modes = tuple(m for m in modes if m != "max") or ("sum",)
    wd0, idt0 = sem.weight_dtypes[0], sem.index_dtypes[0]
    combos = itertools.product([(w, o) for w, o, _ in b.combos], sem.index_dtypes, modes, layouts)
    for i, ((wd, od), idt, mode, layout) in enumerate(combos):
        ilo = sem.include_last_offset[i % len(sem.include_last_offset)]
        b.add(b.bag(mode, layout, wd, idt, b.dims[i % len(b.dims)], include_last_offset=ilo, od=od))
    for dim in b.dims:
        b.add(b.bag(modes[0], layouts[0], wd0, idt0, dim, tag="dims"))
    for mode in modes:
        if "csr" in layouts:
            b.add(b.bag(mode, "csr", wd0, idt0, 16, bags=6, lengths=(0, 0, 3, 0, 1, 0), tag="empty-bags"))
            if True in sem.include_last_offset:
                b.add(b.bag(mode, "csr", wd0, idt0, 33, include_last_offset=True, tag="last-offset"))
            if False in sem.include_last_offset:
                b.add(b.bag(mode, "csr", wd0, idt0, 33, include_last_offset=False, tag="no-last-offset"))
        for layout in layouts:
            one = (1,) * 5 if layout == "csr" else None
            b.add(b.bag(mode, layout, wd0, idt0, 64, bags=5, mean_len=1, lengths=one, tag="L1"))
            b.add(b.bag(mode, layout, wd0, idt0, 128, bags=1, tag="batch1"))
            b.add(b.bag(mode, layout, wd0, idt0, 8, bags=4, duplicates=True, tag="duplicates"))
            if sem.padding_idx and sem.tables is None:
                b.add(b.bag(mode, layout, wd0, idt0, 20, padding_idx=b.rng.randint(0, 39), tag="padding"))
    for layout in layouts:
        for mode in [m for m in modes if m != "max"][:2]:
            lengths = (LONG_BAG, LONG_BAG - 1, 0, LONG_BAG + 1) if layout == "csr" else None
            for od in dict.fromkeys(o for w, o, _ in b.combos if w == wd0):
                b.add(b.bag(mode, layout, wd0, idt0, 64, bags=4, mean_len=LONG_BAG, lengths=lengths, od=od,
                            tag="L1000"))
        if sem.per_sample_weights and "sum" in modes:
            for wd in sem.weight_dtypes:
                b.add(b.bag("sum", layout, wd, idt0, 37, per_sample_weights=True, tag="psw"))
    if large and sem.backward is None and sem.quantization is None:
        b.add(_large_case(b, "embedding_bag", modes[0], layouts[0]))
    return b.cases


def embedding_cases(sem: Semantics, seed: int, large: bool = True) -> list[Case]:
    """Every case for an unpooled ``embedding`` kernel claiming ``sem``."""
    b = _Builder(sem, seed)
    layout = "batched" if sem.output_shape == "batched" or sem.tables is not None else "flat"

    def gather(wd: str, idt: str, dim: int, tag: str = "", bags: int | None = None,
               pooling: int | None = None, od: str = "", **flags: Any) -> Case:
        bags = bags if bags is not None else b.rng.randint(1, 40)
        pooling = pooling if pooling is not None else (b.rng.randint(1, 12) if layout == "batched" else 1)
        od, gd = b.out_for(wd, od)
        name = "-".join(p for p in ("gather", layout, wd, f"to-{od}" if od and od != wd else "",
                                    f"grad-{gd}" if gd and gd != (od or wd) else "", idt, f"d{dim}", tag) if p)
        return Case(id=name, op="embedding", mode="", layout=layout, weight_dtype=wd, index_dtype=idt,
                    num_embeddings=b.rng.randint(40, 1000), dim=dim, num_bags=bags, pooling=pooling,
                    tags=(tag,) if tag else (), output_dtype=od, grad_weight_dtype=gd, **flags)

    combos = itertools.product([(w, o) for w, o, _ in b.combos], sem.index_dtypes)
    for i, ((wd, od), idt) in enumerate(combos):
        b.add(gather(wd, idt, b.dims[(i + 4) % len(b.dims)], od=od))
    wd0, idt0 = sem.weight_dtypes[0], sem.index_dtypes[0]
    for dim in b.dims:
        b.add(gather(wd0, idt0, dim, tag="dims"))
    b.add(gather(wd0, idt0, 64, tag="one-index", bags=1, pooling=1))
    b.add(gather(wd0, idt0, 16, tag="duplicates", duplicates=True))
    if large and sem.backward is None and sem.quantization is None:
        b.add(_large_case(b, "embedding", "", layout))
    return b.cases


def _large_case(b: _Builder, op: str, mode: str, layout: str) -> Case:
    """The table of more than 2^31 elements (or the largest the domain admits), narrowest declared dtype."""
    wd = min(b.sem.weight_dtypes, key=lambda d: ELEM_SIZE[d])
    od = min((o for w, o, _ in b.combos if w == wd), key=lambda d: ELEM_SIZE[d or wd])
    idt = "int64" if "int64" in b.sem.index_dtypes else b.sem.index_dtypes[0]
    rows = -(-LARGE_TABLE_ELEMENTS // LARGE_TABLE_DIM)
    bags, pooling = 8, 4
    lengths = (4, 0, 4, 4, 4, 4, 4, 4) if layout == "csr" else ()
    return Case(id=f"large-table-{op}-{wd}-{idt}", op=op, mode=mode, layout=layout, weight_dtype=wd,
                index_dtype=idt, num_embeddings=rows, dim=LARGE_TABLE_DIM, num_bags=bags,
                pooling=0 if layout == "csr" else pooling, bag_lengths=lengths, large=True,
                tags=("large-table",), output_dtype=od)


def dtype_combinations(sem: Semantics) -> tuple[tuple[str, str, str], ...]:
    """(weight, output, returned gradient) dtypes to verify: the declared combinations, else every weight
    dtype with every output dtype (empty output or gradient dtype: the table's, the output's)."""
    if sem.quantization is not None:  # codes dequantized in float32; the outputs declared, or int8 codes
        outputs = ("int8",) if sem.quantization.output else sem.output_dtypes or ("float32",)
        return tuple(("float32", o, "") for o in outputs)
    if sem.dtypes:
        return tuple((c.weight, c.output, c.grad_weight) for c in sem.dtypes)
    return tuple((w, o, "") for w in sem.weight_dtypes for o in sem.output_dtypes or ("",))


def domain_problems(sem: Semantics) -> list[str]:
    """Why the declared domain admits no case (empty: it admits some)."""
    problems = sem.domain.problems()
    if sem.quantization is not None:
        problems += sem.quantization.problems()
        if sem.backward is not None:
            problems.append("semantics.quantization: a quantized table has no declared backward (inference)")
        if sem.quantization.scales_in == "argument" and sem.tables is not None:
            problems.append("semantics.quantization: scales_in argument passes one scale, for one table")
    if sem.tables is None and sem.domain.tables != type(sem.domain.tables)():
        problems.append("semantics.domain.tables: the kernel is not table-batched (no semantics.tables)")
    if sem.backward is not None and sem.op == "embedding_bag" and sem.modes and set(sem.modes) == {"max"}:
        problems.append("semantics.backward: only sum and mean have a declared backward")
    return problems


def interface_passes_mode(build: Mapping[str, Any]) -> bool:
    """The kernel's declared call interface hands it the pooling mode: ``mode`` among its arguments, in an
    expression of its arguments, defines or launch shape, or a define selected by mode. A kernel that gets
    the mode can be called with any mode, so the modes it does not declare are not out of its reach."""
    pending: list[Any] = [build.get(key) for key in _INTERFACE_KEYS]
    while pending:
        value = pending.pop()
        if isinstance(value, str) and _MODE_NAME.search(value):
            return True
        if isinstance(value, Mapping):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def undeclared_mode_cases(sem: Semantics, build: Mapping[str, Any], seed: int) -> list[Case]:
    """One case per pooling mode a forward bag kernel does not declare but is handed by its interface
    (``interface_passes_mode``), tagged ``UNDECLARED_MODE``; none when the interface cannot express a
    mode (then there is nothing the declaration hides). Backward kernels are left out: the gradient of
    max is no declared backward, and their modes are the forward's."""
    if sem.op != "embedding_bag" or sem.backward is not None or not interface_passes_mode(build):
        return []
    b = _Builder(sem, seed ^ 0x6D6F6465)  # a stream of its own: the declared cases stay as they were
    layout, wd, idt = (sem.layouts or ("fixed",))[0], sem.weight_dtypes[0], sem.index_dtypes[0]
    for n, mode in enumerate(m for m in MODES if m not in (sem.modes or ("sum",))):
        lengths = (3, 0, 5, 1, 2) if layout == "csr" else None  # an empty bag: mean and max of nothing are 0
        b.add(b.bag(mode, layout, wd, idt, (33, 129)[n % 2], bags=5, lengths=lengths, tag=UNDECLARED_MODE))
    return b.cases


def generate_cases(sem: Semantics, seed: int, large: bool = True) -> list[Case]:
    """The case matrix for a kernel claiming ``sem`` (reproducible from ``seed``); ``DomainError`` when
    the declared domain admits nothing."""
    problems = domain_problems(sem)
    if problems:
        raise DomainError(problems)
    if sem.op == "embedding":
        return embedding_cases(sem, seed, large)
    return embedding_bag_cases(sem, seed, large)

