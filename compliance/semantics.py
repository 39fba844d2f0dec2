"""The parts of a kernel's claimed semantics that only verification reads (plain data, no torch).

``semantics`` in a manifest says what a kernel computes; beyond the op, modes,
layouts and dtypes it may declare (docs/verification.md, "Semantics"):

* ``output_dtypes``: the dtype(s) the output is written in, when it differs from
  the table's (float32 tables written as float16; 16-bit tables written as float32);
* ``tables``: T tables in one weight buffer with per-table row offsets
  (table-batched lookups, FBGEMM's and NVIDIA's DLRM layout);
* ``backward``: the kernel is a backward pass: the weight gradient (dense or
  sparse) or a fused in-place optimizer update (SGD, row-wise Adagrad);
* ``dtypes``: the supported combinations of table, output, incoming and returned
  gradient dtypes, when crossing ``weight_dtypes`` with ``output_dtypes`` says too much;
* ``domain``: the shapes the kernel supports; cases are generated only inside it;
* ``quantization``: the table holds quantized codes (int8, int4, fp8 e4m3) with a row-wise or
  table-wise scale, kept in the row, in a tensor or in a scalar argument; the output may be
  int8 codes again (requantized with each table's inverse output scale).

The manifest schema guarantees the shape of the mapping; ``from_mapping``
helpers turn it into frozen records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BACKWARD_KINDS = ("gradient", "sgd", "rowwise_adagrad")
"""What a backward kernel computes: the weight gradient, or a fused optimizer step on the table."""
FUSED_KINDS = ("sgd", "rowwise_adagrad")
"""Backward kinds that update the table in place."""


@dataclass(frozen=True)
class Tables:
    """Table-batched lookups: T tables stacked in one ``[sum N_t, D]`` buffer."""

    indices: str = "relative"
    """``relative``: an index is a row of its table (the kernel adds ``table_offsets[t]``);
    ``absolute``: indices are already offset into the stacked buffer."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> Tables | None:
        """None when the kernel is not table-batched."""
        return None if data is None else cls(indices=str(data.get("indices", "relative")))


@dataclass(frozen=True)
class Backward:
    """A backward kernel."""

    kind: str
    """``gradient``, ``sgd`` or ``rowwise_adagrad``."""
    gradient: str = "dense"
    """For ``gradient``: ``dense`` ([rows, D], zeros for rows not referenced), ``sparse`` (a dense
    [num_indices, D]: one row per lookup, in the order of the indices), ``sparse_coo`` (a torch sparse
    COO tensor [rows, D], coalesced by the verifier) or ``rows`` (row ids and their rows)."""

    @property
    def fused(self) -> bool:
        """True for an in-place optimizer update."""
        return self.kind in FUSED_KINDS

    @property
    def label(self) -> str:
        """Short name for case ids: grad-dense, grad-sparse, grad-sparse_coo, grad-rows, sgd, rowwise_adagrad."""
        return f"grad-{self.gradient}" if self.kind == "gradient" else self.kind

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> Backward | None:
        """None for a forward kernel."""
        return None if data is None else cls(kind=str(data["kind"]), gradient=str(data.get("gradient", "dense")))


@dataclass(frozen=True)
class DtypeCombination:
    """One supported combination of dtypes (``semantics.dtypes``)."""

    weight: str
    """The table's."""
    output: str = ""
    """The forward output's, which is also the incoming gradient's (empty: the table's)."""
    grad_weight: str = ""
    """The returned weight gradient's (empty: the incoming gradient's)."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DtypeCombination:
        """``{weight, output | grad_output, grad_weight}``."""
        return cls(str(data["weight"]), str(data.get("grad_output", data.get("output", ""))),
                   str(data.get("grad_weight", "")))


@dataclass(frozen=True)
class DimRange:
    """Supported dims as ``{min, max, multiple_of}``."""

    low: int
    """Smallest dim."""
    high: int
    """Largest dim."""
    multiple_of: int = 1
    """Every supported dim is a multiple of this."""

    @property
    def values_exist(self) -> bool:
        """True when some multiple lies in the range."""
        return -(-self.low // self.multiple_of) * self.multiple_of <= self.high

    def fit(self, dim: int) -> int:
        """The supported dim nearest ``dim`` (ties: the smaller)."""
        m = self.multiple_of
        low, high = -(-self.low // m) * m, self.high // m * m
        below = max(low, min(high, dim // m * m))
        above = max(low, min(high, -(-dim // m) * m))
        return below if dim - below <= above - dim else above

    def describe(self) -> str:
        """``dim 4..1024, a multiple of 4``."""
        step = f", a multiple of {self.multiple_of}" if self.multiple_of > 1 else ""
        return f"dim {self.low}..{self.high}{step}"


@dataclass(frozen=True)
class Span:
    """An inclusive integer range; either end may be open (None)."""

    low: int | None = None
    """Smallest value, or None."""
    high: int | None = None
    """Largest value, or None."""

    def clamp(self, value: int) -> int:
        """``value`` moved into the range."""
        if self.low is not None:
            value = max(value, self.low)
        if self.high is not None:
            value = min(value, self.high)
        return value

    def contains(self, value: int) -> bool:
        """True when ``value`` lies in the range."""
        return self.clamp(value) == value

    def describe(self) -> str:
        """``1``, ``1..20`` or ``>= 2``."""
        if self.low is not None and self.low == self.high:
            return str(self.low)
        if self.low is not None and self.high is not None:
            return f"{self.low}..{self.high}"
        return f">= {self.low}" if self.low is not None else f"<= {self.high}"

    @classmethod
    def from_value(cls, data: Any) -> Span:
        """An integer (exactly that) or ``{min, max}``."""
        if isinstance(data, int):
            return cls(data, data)
        return cls(data.get("min"), data.get("max"))


@dataclass(frozen=True)
class Domain:
    """The shapes a kernel declares it supports; cases never leave it."""

    dims: tuple[int, ...] = ()
    """Supported embedding dims (empty: any, or ``dim_range``)."""
    lookups: Span = Span()
    """Lookups per bag (the fixed L; csr bag lengths); min 1 excludes empty bags."""
    batch_multiple: int = 1
    """The batch size (bags per table) is a multiple of this."""
    tables: Span = Span()
    """Number of tables (table-batched kernels)."""
    max_rows: int | None = None
    """Rows of the largest table it supports."""
    dim_range: DimRange | None = None
    """Supported dims as a range (None: ``dims``)."""

    @property
    def unrestricted(self) -> bool:
        """True when nothing is declared."""
        return self == Domain()

    def problems(self) -> list[str]:
        """Contradictions (a domain no case fits)."""
        out = []
        for name, span in (("lookups", self.lookups), ("tables", self.tables)):
            if span.low is not None and span.high is not None and span.low > span.high:
                out.append(f"semantics.domain.{name}: min {span.low} > max {span.high}")
        if self.tables.high is not None and self.tables.high < 1:
            out.append("semantics.domain.tables: at most 0 tables")
        if self.dim_range is not None and (self.dim_range.low > self.dim_range.high
                                           or not self.dim_range.values_exist):
            out.append(f"semantics.domain.dims: no multiple of {self.dim_range.multiple_of} in "
                       f"{self.dim_range.low}..{self.dim_range.high}")
        if self.lookups.high is not None and self.lookups.high < 1:
            out.append("semantics.domain.lookups: at most 0 lookups per bag (every bag empty)")
        return out

    def describe(self) -> str:
        """The report line: ``dim 128 only, 26 tables, 1 lookup per bag``; a note when unrestricted."""
        if self.unrestricted:
            return "unrestricted (no semantics.domain declared)"
        parts = []
        if self.dims:
            parts.append(f"dim {', '.join(map(str, self.dims))} only")
        if self.dim_range is not None:
            parts.append(self.dim_range.describe())
        if self.tables != Span():
            parts.append(f"{self.tables.describe()} tables")
        if self.lookups != Span():
            many = self.lookups.low != 1 or self.lookups.high != 1
            parts.append(f"{self.lookups.describe()} lookup{'s' if many else ''} per bag")
        if self.batch_multiple > 1:
            parts.append(f"batch a multiple of {self.batch_multiple}")
        if self.max_rows is not None:
            parts.append(f"tables of at most {self.max_rows} rows")
        return ", ".join(parts)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> Domain:
        """The unrestricted domain when absent."""
        if not data:
            return cls()
        dims = data.get("dims", ())
        dim_range = None
        if isinstance(dims, Mapping):
            dim_range = DimRange(int(dims.get("min", 1)), int(dims["max"]), int(dims.get("multiple_of", 1)))
            dims = ()
        return cls(dims=tuple(int(d) for d in dims), dim_range=dim_range,
                   lookups=Span.from_value(data.get("lookups", {})),
                   batch_multiple=int(data.get("batch_multiple", 1)),
                   tables=Span.from_value(data.get("tables", {})),
                   max_rows=data.get("max_rows"))


QUANTIZED_FORMATS = ("int8", "int4", "fp8_e4m3")
"""Code formats of a quantized table."""
SCALE_SCHEMES = ("row", "table")
"""Row-wise (a scale, and a bias where declared, per row) or table-wise (one scale per table)."""
SCALE_PLACES = ("row", "tensor", "argument")
"""Where the scales live: in the row's bytes (FBGEMM's fused row), a separate tensor, a scalar argument."""


@dataclass(frozen=True)
class Quantization:
    """A quantized table (docs/verification.md, "Quantized tables"): codes, their scale scheme and
    where the scales live, and whether the output is quantized too."""

    weight: str
    """``int8``, ``int4`` or ``fp8_e4m3``: the codes."""
    scale: str
    """``row`` (per row) or ``table`` (one per table)."""
    bias: bool = False
    """Row-wise only: a bias per row beside the scale (FBGEMM's scale + bias): value = code * scale + bias."""
    scales_in: str = "tensor"
    """``row``: in each row's bytes (FBGEMM's fused int8 / int4 row: fp16 scale, fp16 bias, then the
    codes; a fused fp8 row: a float32 scale, then the codes); ``tensor``: ``weight_scales``;
    ``argument``: the scalar ``weight_scale`` (one table)."""
    output: str = ""
    """``int8``: the output is int8 codes, round(pooled * inverse output scale) saturated to [-128, 127],
    with each table's inverse scale in ``output_inverse_scales`` (or the argument
    ``output_inverse_scale``, with ``scales_in: argument``); empty: a float output."""
    row_alignment: int = 1
    """``scales_in: row``: every row's bytes are padded to a multiple of this (FBGEMM's row_alignment)."""

    @property
    def label(self) -> str:
        """Short name for case ids: ``int8-table``, ``int4-row+bias``."""
        return f"{self.weight}-{self.scale}" + ("+bias" if self.bias else "")

    def problems(self) -> list[str]:
        """Combinations no kernel can have (the schema cannot say them)."""
        out = []
        if self.scales_in == "row" and self.scale != "row":
            out.append("semantics.quantization: scales_in row holds row-wise scales (scale: row)")
        if self.scales_in == "argument" and self.scale != "table":
            out.append("semantics.quantization: scales_in argument passes one table's scale (scale: table)")
        if self.bias and self.scale != "row":
            out.append("semantics.quantization: a bias is row-wise (scale: row)")
        if self.weight == "int4" and self.scales_in != "row":
            out.append("semantics.quantization: int4 codes come in FBGEMM's fused rows (scales_in: row)")
        if self.scales_in == "row" and self.weight != "fp8_e4m3" and not self.bias:
            out.append("semantics.quantization: FBGEMM's fused int8 and int4 rows carry a scale and a bias "
                       "(bias: true)")
        if self.scales_in == "row" and self.weight == "fp8_e4m3" and self.bias:
            out.append("semantics.quantization: a fused fp8 row carries a float32 scale, no bias")
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> Quantization | None:
        """None for a float table."""
        if data is None:
            return None
        return cls(weight=str(data["weight"]), scale=str(data["scale"]), bias=bool(data.get("bias", False)),
                   scales_in=str(data.get("scales_in", "row" if data["scale"] == "row" else "tensor")),
                   output=str(data.get("output", "")), row_alignment=int(data.get("row_alignment", 1)))
