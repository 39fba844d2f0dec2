"""Quantized embedding tables: row formats, quantize / dequantize, FBGEMM's layout, and a float64
reference of the quantized table-batched lookup (pure torch: runs on the CPU and on the GPU).

Every table is one ``uint8`` tensor ``[rows, row_bytes]``; ``row_bytes`` is a multiple of 16 (rows
padded at the end, as FBGEMM's GPU TBE lays them out with its default ``row_alignment`` 16), so
each row starts 16-byte aligned. Formats (``FORMATS``) and the value of element j of a row:

============== =============================================== =================================
format         row bytes (before padding to 16)                element j (exact, as float64)
============== =============================================== =================================
fp32           dim float32                                     the float
fp16           dim float16                                     the half
int8           fp16 scale s, fp16 bias b, dim uint8 q          s * q[j] + b      (FBGEMM INT8)
int4           fp16 scale s, fp16 bias b, dim/2 bytes:         s * q[j] + b      (FBGEMM INT4)
               q[2k] the low nibble of byte k, q[2k+1] its high
fp8_rowwise    float32 scale s, dim e4m3 codes                 s * e4m3(q[j])
fp8_tablewise  dim e4m3 codes; one float32 scale s per table   s * e4m3(q[j])
int8_tablewise dim int8 q (two's complement); one float32      s * q[j]      (symmetric, the
               scale s per table                                            inference submissions')
============== =============================================== =================================

The ``int8`` and ``int4`` rows are byte for byte FBGEMM's ``IntNBitTableBatchedEmbeddingBagsCodegen``
rows (``SparseType.INT8`` / ``INT4``, qparams at the row's start: ``reverse_qparam=False``), and
``fp16`` / ``fp32`` its FP16 / FP32 rows, so ``to_fbgemm`` / ``from_fbgemm`` copy bytes. FBGEMM's
``FP8`` rows (its HFP8 with 4 exponent bits, bias 7, no scale) are ``fp8_tablewise`` rows with scale
1. e4m3 codes decode as FBGEMM's HFP8 does: the codes 0x7F / 0xFF, NaN in ``float8_e4m3fn``, are
±480 here; ``quantize`` never writes them (it saturates at ±448).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

FORMATS: tuple[str, ...] = ("fp32", "fp16", "int8", "int4", "fp8_rowwise", "fp8_tablewise", "int8_tablewise")
FORMAT_CODE = {name: code for code, name in enumerate(FORMATS)}  # the kernel's FMT numbering
ROW_ALIGN = 16
HEADER_BYTES = {"fp32": 0, "fp16": 0, "int8": 4, "int4": 4, "fp8_rowwise": 4, "fp8_tablewise": 0,
                "int8_tablewise": 0}
TABLE_SCALED = ("fp8_tablewise", "int8_tablewise")
E4M3_MAX = 448.0
# The kernel decodes e4m3 by moving its bits into a float32 and multiplying by scale * 2^120: the
# scale must stay below 2^8 (|values| below 2^8 * 448) for that product to be finite.
FP8_SCALE_LIMIT = 2.0**8
FBGEMM_TYPES = {"fp32": "FP32", "fp16": "FP16", "int8": "INT8", "int4": "INT4", "fp8_tablewise": "FP8"}
"""Our format -> FBGEMM's ``SparseType`` name, for the formats FBGEMM's inference TBE has."""


@dataclass(frozen=True)
class QuantizedTable:
    """One table in one of ``FORMATS``: ``data`` is ``uint8 [rows, row_bytes(format, dim)]``;
    ``scale`` is the table-wise scale (``fp8_tablewise``, ``int8_tablewise``; used as a float32),
    else None."""

    format: str
    dim: int
    data: Tensor
    scale: float | None = None

    @property
    def rows(self) -> int:
        return int(self.data.shape[0])

    def to(self, device: torch.device | str) -> QuantizedTable:
        return QuantizedTable(self.format, self.dim, self.data.to(device), self.scale)


def float32(x: float) -> float:
    """x rounded to float32: table-wise scales are float32 values (the kernel's arithmetic)."""
    return float(torch.tensor(x, dtype=torch.float32))


def check_format(fmt: str, dim: int) -> None:
    """ValueError unless ``fmt`` is one of FORMATS and ``dim`` a positive multiple of 4 (FBGEMM's
    rule; int4 packs two elements a byte)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown quantized format {fmt!r}; one of {', '.join(FORMATS)}")
    if dim <= 0 or dim % 4:
        raise ValueError(f"{fmt} rows need a width that is a positive multiple of 4, got {dim}")


def data_bytes(fmt: str, dim: int) -> int:
    """Bytes of a row's elements (without header and padding)."""
    return {"fp32": 4 * dim, "fp16": 2 * dim, "int4": dim // 2}.get(fmt, dim)


def row_bytes(fmt: str, dim: int) -> int:
    """Bytes of one stored row: header + elements, padded to a multiple of 16 (FBGEMM's
    ``rounded_row_size_in_bytes`` with row_alignment 16 for its formats)."""
    check_format(fmt, dim)
    raw = HEADER_BYTES[fmt] + data_bytes(fmt, dim)
    return -(-raw // ROW_ALIGN) * ROW_ALIGN


# ---------------------------------------------------------------- e4m3 codes

def _e4m3_table() -> Tensor:
    """float64 value of each of the 256 e4m3 codes, HFP8(4 exponent bits, bias 7) semantics."""
    codes = torch.arange(256, dtype=torch.int64)
    exponent, mantissa = (codes >> 3) & 0xF, (codes & 7).double()
    magnitude = torch.where(exponent == 0, mantissa / 8 * 2.0**-6,
                            (1 + mantissa / 8) * torch.pow(2.0, (exponent - 7).double()))
    return torch.where(codes >= 128, -magnitude, magnitude)


_E4M3: dict[str, Tensor] = {}


def e4m3_values(codes: Tensor) -> Tensor:
    """float64 values of uint8 e4m3 codes (0x7F / 0xFF: ±480, as FBGEMM's HFP8)."""
    key = str(codes.device)
    table = _E4M3.get(key)
    if table is None:
        table = _E4M3[key] = _e4m3_table().to(codes.device)
    return table[codes.long()]


def e4m3_codes(x: Tensor) -> Tensor:
    """uint8 e4m3 codes of ``x`` (float), rounded to nearest even, saturated at ±448."""
    clamped = x.float().clamp(-E4M3_MAX, E4M3_MAX)
    return clamped.to(torch.float8_e4m3fn).view(torch.uint8)


# ---------------------------------------------------------------- quantize / dequantize

def _as_fp16_bytes(x: Tensor) -> Tensor:
    return x.to(torch.float16).contiguous().view(torch.uint8).view(-1, 2)


def _rowwise_int(weight: Tensor, bits: int) -> tuple[Tensor, Tensor, Tensor]:
    """(q uint8 [rows, dim], scale fp16, bias fp16) of FBGEMM's row-wise asymmetric scheme:
    bias = the row's min, scale = range / (2^bits - 1), both rounded to fp16 first (the scale
    upwards) and q computed from the rounded pair (what the stored row decodes with)."""
    levels = (1 << bits) - 1
    w = weight.double()
    low, high = w.min(dim=1).values, w.max(dim=1).values
    bias = low.to(torch.float16)
    wanted = (high - bias.double()) / levels
    scale = wanted.to(torch.float16)
    # rounded up to the next half where rounding went down, so that the row's max never clamps
    up = (scale.view(torch.int16) + 1).view(torch.float16)
    scale = torch.where(scale.double() < wanted, up, scale)
    scale = torch.where(scale.double() > 0, scale, torch.ones_like(scale))  # constant rows: q = 0
    q = torch.round((w - bias.double()[:, None]) / scale.double()[:, None]).clamp(0, levels)
    return q.to(torch.uint8), scale, bias


def _pack(header: Tensor | None, body: Tensor, fmt: str, dim: int) -> Tensor:
    rows = body.shape[0]
    out = torch.zeros(rows, row_bytes(fmt, dim), dtype=torch.uint8, device=body.device)
    start = 0 if header is None else header.shape[1]
    if header is not None:
        out[:, :start] = header
    out[:, start:start + body.shape[1]] = body
    return out


def quantize(weight: Tensor, fmt: str, scale: float | None = None) -> QuantizedTable:
    """A float table ``[rows, dim]`` in format ``fmt`` (on the weight's device). ``scale``: the
    table-wise scale of ``fp8_tablewise`` / ``int8_tablewise`` (default: max |w| / 448, / 127)."""
    if weight.dim() != 2:
        raise ValueError(f"quantize takes a [rows, dim] table, got shape {tuple(weight.shape)}")
    rows, dim = weight.shape
    check_format(fmt, dim)
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("quantize: the table holds NaN or infinite values")
    w = weight.detach()
    if fmt in ("fp32", "fp16"):
        dtype = torch.float32 if fmt == "fp32" else torch.float16
        return QuantizedTable(fmt, dim, _pack(None, w.to(dtype).contiguous().view(torch.uint8), fmt, dim))
    if fmt in ("int8", "int4"):
        q, s, b = _rowwise_int(w, 8 if fmt == "int8" else 4)
        if fmt == "int4":
            q = q[:, 0::2] | (q[:, 1::2] << 4)
        header = torch.cat([_as_fp16_bytes(s), _as_fp16_bytes(b)], dim=1)
        return QuantizedTable(fmt, dim, _pack(header, q, fmt, dim))
    amax = w.abs().double().amax(dim=1) if fmt == "fp8_rowwise" else w.abs().double().max()
    if fmt == "int8_tablewise":
        step = float32(float(scale) if scale is not None else float(amax) / 127 or 1.0)
        codes = torch.round(w.double() / step).clamp(-127, 127).to(torch.int8).view(torch.uint8)
        return QuantizedTable(fmt, dim, _pack(None, codes, fmt, dim), step)
    if fmt == "fp8_tablewise":
        step = float32(float(scale) if scale is not None else float(amax) / E4M3_MAX or 1.0)
        _check_fp8_scale(torch.tensor([step]))
        return QuantizedTable(fmt, dim, _pack(None, e4m3_codes(w.double() / step), fmt, dim), step)
    row_scale = (amax / E4M3_MAX).float()
    row_scale = torch.where(row_scale > 0, row_scale, torch.ones_like(row_scale))
    _check_fp8_scale(row_scale)
    header = row_scale.contiguous().view(torch.uint8).view(rows, 4)
    codes = e4m3_codes(w.double() / row_scale.double()[:, None])
    return QuantizedTable(fmt, dim, _pack(header, codes, fmt, dim))


def _check_fp8_scale(scale: Tensor) -> None:
    if bool((scale.abs() >= FP8_SCALE_LIMIT).any()):
        raise ValueError(f"fp8 scales must stay below {FP8_SCALE_LIMIT:g} (values below "
                         f"{FP8_SCALE_LIMIT * E4M3_MAX:g} in magnitude)")


def dequantize(table: QuantizedTable, rows: Tensor | None = None, dtype: torch.dtype = torch.float64) -> Tensor:
    """The table's values ``[rows, dim]`` (or only the rows ``rows`` selects), computed exactly in
    float64 (the accuracy reference), then cast to ``dtype``."""
    data = table.data if rows is None else table.data[rows.long()]
    fmt, dim = table.format, table.dim
    if fmt in ("fp32", "fp16"):
        values = data[:, :data_bytes(fmt, dim)].contiguous()
        out = values.view(torch.float32 if fmt == "fp32" else torch.float16).double()
    elif fmt in ("int8", "int4"):
        s = data[:, 0:2].contiguous().view(torch.float16).double()
        b = data[:, 2:4].contiguous().view(torch.float16).double()
        body = data[:, 4:4 + data_bytes(fmt, dim)]
        if fmt == "int4":
            body = torch.stack([body & 0xF, body >> 4], dim=2).reshape(body.shape[0], dim)
        out = s * body.double() + b
    elif fmt == "fp8_rowwise":
        s = data[:, 0:4].contiguous().view(torch.float32).double()
        out = s * e4m3_values(data[:, 4:4 + dim])
    elif fmt == "fp8_tablewise":
        out = float32(table.scale or 1.0) * e4m3_values(data[:, :dim])
    else:
        out = float32(table.scale or 1.0) * data[:, :dim].contiguous().view(torch.int8).double()
    return out.to(dtype)


@dataclass(frozen=True)
class QuantizationError:
    """|dequantize(quantize(w)) - w| over a table: the largest and the mean, absolute and
    relative to max |w|."""

    max_abs: float
    mean_abs: float
    max_rel: float
    mean_rel: float


def quantization_error(weight: Tensor, table: QuantizedTable) -> QuantizationError:
    err = (dequantize(table) - weight.double()).abs()
    top = float(weight.double().abs().max()) or 1.0
    return QuantizationError(float(err.max()), float(err.mean()), float(err.max()) / top, float(err.mean()) / top)


# ---------------------------------------------------------------- FBGEMM's layout

def to_fbgemm(table: QuantizedTable) -> Tensor:
    """The table as FBGEMM's ``IntNBitTableBatchedEmbeddingBagsCodegen`` holds it:
    ``uint8 [rows, row_bytes]`` (what ``split_embedding_weights(split_scale_shifts=False)[t][0]``
    returns). ``fp8_tablewise`` only with scale 1 (FBGEMM's FP8 rows have no scale)."""
    if table.format not in FBGEMM_TYPES:
        raise ValueError(f"FBGEMM's inference TBE has no {table.format} rows (it has {', '.join(FBGEMM_TYPES)})")
    if table.format == "fp8_tablewise" and table.scale not in (None, 1.0):
        raise ValueError("FBGEMM's FP8 rows have no scale: only an fp8_tablewise table of scale 1 converts")
    return table.data.clone()


def from_fbgemm(weight: Tensor, dim: int, sparse_type: str, scale_shift: Tensor | None = None,
                bias: Tensor | None = None) -> QuantizedTable:
    """A table from FBGEMM's (or TorchRec's) quantized weights. ``sparse_type``: FBGEMM's name
    (``"INT8"``, ``"INT4"``, ``"FP8"``, ``"FP16"``, ``"FP32"``) or ours. ``weight``: whole rows
    ``uint8 [rows, row_bytes]`` (``split_scale_shifts=False``), or, for INT8/INT4, the elements
    without the qparams with ``scale_shift`` ``uint8 [rows, 4]`` (``split_embedding_weights()``'s
    pair), or with ``scale_shift`` the fp16 scales and ``bias`` the fp16 biases
    (``split_scale_bias_mode=2``, TorchRec's ``weight_qscale`` / ``weight_qbias``).
    FBGEMM's FP8 must have been written with its default exponent bits 4 and bias 7."""
    by_fbgemm = {v: k for k, v in FBGEMM_TYPES.items()}
    fmt = by_fbgemm.get(sparse_type.upper(), sparse_type)
    if fmt not in FBGEMM_TYPES:
        raise ValueError(f"from_fbgemm: no FBGEMM type {sparse_type!r} (one of {', '.join(by_fbgemm)})")
    stride = row_bytes(fmt, dim)
    if weight.dtype != torch.uint8 or weight.dim() != 2:
        raise ValueError(f"from_fbgemm: weights must be uint8 [rows, bytes], got {weight.dtype} {tuple(weight.shape)}")
    if scale_shift is not None:
        if fmt not in ("int8", "int4"):
            raise ValueError(f"from_fbgemm: {sparse_type} rows have no scale and bias")
        header = scale_shift if bias is None else torch.cat([_as_fp16_bytes(scale_shift.reshape(-1)),
                                                              _as_fp16_bytes(bias.reshape(-1))], dim=1)
        weight = torch.cat([header.reshape(-1, 4).to(torch.uint8), weight], dim=1)
    need = HEADER_BYTES[fmt] + data_bytes(fmt, dim)
    if weight.shape[1] < need or weight.shape[1] > stride:
        raise ValueError(f"from_fbgemm: {sparse_type} rows of width {dim} take {need}..{stride} bytes, "
                         f"got {weight.shape[1]}")
    data = torch.zeros(weight.shape[0], stride, dtype=torch.uint8, device=weight.device)
    data[:, :need] = weight[:, :need]
    return QuantizedTable(fmt, dim, data, 1.0 if fmt == "fp8_tablewise" else None)


# ---------------------------------------------------------------- the reference lookup

POOLINGS = ("sum", "mean", "none")
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.int8)


def reference_forward(tables: Sequence[QuantizedTable], indices: Tensor, offsets: Tensor, pooling: str = "sum",
                      per_sample_weights: Tensor | None = None, absolute: bool = False) -> Tensor:
    """The table-batched lookup in float64 over the dequantized rows (no output rounding).
    ``absolute``: pool |weight * element| instead (the error bound's A).

    ``offsets`` (T * B + 1, table-major bags, FBGEMM's layout) delimit ``indices`` (each relative
    to its table). ``pooling`` "sum" / "mean": ``[B, sum(dims)]``, table t's columns after those
    of tables before it; an empty bag gives zeros. "none": ``[len(indices), dim]``, row p the
    (weighted) row of position p (every table of one width)."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    count = len(tables)
    bags = offsets.numel() - 1
    batch = bags // count
    offs = offsets.long()
    lengths = offs[1:] - offs[:-1]
    positions = torch.arange(indices.numel(), device=indices.device)
    bag = torch.searchsorted(offs, positions, right=True) - 1  # positions outside every bag: -1 or bags
    inside = (bag >= 0) & (bag < bags) & (positions >= offs[0]) & (positions < offs[-1])
    table_of = torch.where(inside, bag // max(batch, 1), -1)
    weights = None if per_sample_weights is None else per_sample_weights.double()
    if absolute and weights is not None:
        weights = weights.abs()

    def rows_of(table: QuantizedTable, sel: Tensor) -> Tensor:
        rows = dequantize(table, indices[sel])
        return rows.abs() if absolute else rows
    if pooling == "none":
        dim = tables[0].dim
        out = torch.zeros(indices.numel(), dim, dtype=torch.float64, device=indices.device)
        for t, table in enumerate(tables):
            sel = (table_of == t).nonzero().flatten()
            rows = rows_of(table, sel)
            out[sel] = rows if weights is None else rows * weights[sel, None]
        return out
    dims = [t.dim for t in tables]
    out = torch.zeros(batch, sum(dims), dtype=torch.float64, device=indices.device)
    col = 0
    for t, table in enumerate(tables):
        sel = (table_of == t).nonzero().flatten()
        rows = rows_of(table, sel)
        if weights is not None:
            rows = rows * weights[sel, None]
        pooled = torch.zeros(batch, table.dim, dtype=torch.float64, device=indices.device)
        pooled.index_add_(0, bag[sel] - t * batch, rows)
        if pooling == "mean":
            n = lengths[t * batch:(t + 1) * batch].double().clamp(min=1)
            pooled = pooled / n[:, None]
        out[:, col:col + table.dim] = pooled
        col += table.dim
    return out


def round_output(pooled: Tensor, dtype: torch.dtype, inverse_scales: Sequence[float] | None = None,
                 dims: Sequence[int] | None = None) -> Tensor:
    """The float64 result rounded as the kernel's output: float32 / float16 once; int8 as
    ``clamp(round_half_even(x * inverse_scale[t]), -128, 127)`` for table t's columns."""
    if dtype != torch.int8:
        return pooled.to(dtype)
    if inverse_scales is None or dims is None:
        raise ValueError("int8 output needs one inverse scale per table")
    factors = torch.cat([torch.full((d,), float(s), dtype=torch.float64, device=pooled.device)
                         for s, d in zip(inverse_scales, dims, strict=True)])
    return torch.round(pooled * factors).clamp(-128, 127).to(torch.int8)
