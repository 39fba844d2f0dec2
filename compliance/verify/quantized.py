"""Quantized tables for verification: random codes and scales, the weight as the kernel gets it, and
the float64 dequantization the reference pools (docs/verification.md, "Quantized tables").

The verifier's own code, independent of ``reference_kernels``: a value is ``code * scale (+ bias)``,
computed in float64. Codes and scales are drawn so that a kernel that dequantizes in float32 does so
exactly (an 8-bit code times a scale with a 15-bit significand, or times an fp16 scale), except for
adding a row's bias (one rounding per term, which the bound counts as one more addition). Layouts:

* table-wise scale, scales in a tensor or an argument: the weight is int8 codes ``[rows, D]``
  (-127..127) or fp8 e4m3 codes (their bytes, as ``torch.uint8``), one float32 scale per table;
* row-wise scale in a tensor: the same codes, ``weight_scales`` float32 ``[rows, 2]`` (scale, bias)
  or ``[rows]`` (scale);
* row-wise scale in the row: the weight is uint8 ``[rows, row_bytes]``, padded to the row alignment.
  int8 and int4: FBGEMM's fused row (``IntNBitTableBatchedEmbeddingBagsCodegen``): an fp16 scale, an
  fp16 bias, then the codes, unsigned as FBGEMM's (int8 0..255, int4 0..15, two per byte with the
  low nibble first); fp8: a float32 scale, then the codes' bytes.

Imported only where torch is (the verifier's judging and the kernel's process).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compliance.semantics import Quantization
from compliance.verify.case_inputs import table_of_row
from compliance.verify.cases import Case

INT8_OUTPUT_RANGE = (-128.0, 127.0)
"""Saturation limits of an int8 output."""


@dataclass(frozen=True)
class QuantizedTable:
    """A quantized table: what the kernel gets and what the reference pools."""

    weight: torch.Tensor
    """The codes as the kernel gets them (int8, or uint8 for fp8 codes and fused rows)."""
    values: torch.Tensor
    """float64 [rows, D]: the dequantized table."""
    scales: torch.Tensor | None
    """``weight_scales`` (scales in a tensor), else None."""
    dequantization_roundings: int
    """Roundings per term a float32 dequantization may make (0, or 1 for adding a bias)."""


def _codes(q: Quantization, shape: tuple[int, int], gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(the codes' storage, their float64 values) for ``shape``."""
    if q.weight == "fp8_e4m3":
        bits = torch.randint(0, 256, shape, generator=gen, dtype=torch.int64).to(torch.uint8)
        bits[(bits & 0x7F) == 0x7F] = 0x3C  # no NaN (e4m3fn's only non-finite code): 1.5 instead
        return bits, bits.view(torch.float8_e4m3fn).to(torch.float64)
    if q.scales_in == "row":  # FBGEMM's unsigned codes
        top = 15 if q.weight == "int4" else 255
        codes = torch.randint(0, top + 1, shape, generator=gen, dtype=torch.int64)
        return codes.to(torch.uint8), codes.to(torch.float64)
    codes = torch.randint(-127, 128, shape, generator=gen, dtype=torch.int64)
    return codes.to(torch.int8), codes.to(torch.float64)


def _half_values(shape: tuple[int, ...], low: float, high: float, gen: torch.Generator,
                 signed: bool) -> torch.Tensor:
    """fp16-exact magnitudes in [low, high) (float32 tensor), random signs if ``signed``."""
    magnitude = torch.exp2(torch.empty(shape, dtype=torch.float64).uniform_(
        torch.log2(torch.tensor(low)).item(), torch.log2(torch.tensor(high)).item(), generator=gen))
    values = magnitude.to(torch.float16).to(torch.float32)
    if signed:
        values = torch.where(torch.rand(shape, generator=gen) < 0.5, -values, values)
    return values


def _row_params(case: Case, q: Quantization, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise (scale, bias) per row, float32 (the bias 0 without ``bias``): fp16-exact, except an fp8
    fused row's float32 scale, which has a 15-bit significand (times a 4-bit fp8 significand: exact)."""
    rows = case.num_embeddings
    scale = _half_values((rows,), 2.0**-9, 2.0**-5, gen, signed=False)
    if q.weight == "fp8_e4m3" and q.scales_in == "row":  # in [2^-9, 2^-4): 15 bits times 2^e
        significand = torch.randint(2**14, 2**15, (rows,), generator=gen).to(torch.float64)
        scale = (significand * torch.exp2(torch.randint(-23, -19, (rows,), generator=gen).to(torch.float64))).float()
    bias = _half_values((rows,), 2.0**-3, 1.0, gen, signed=True) if q.bias else torch.zeros(rows)
    return scale, bias


def _fused_rows(case: Case, q: Quantization, codes: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
    """FBGEMM's fused rows: fp16 scale, fp16 bias (with ``bias``), the codes, padding (zero bytes)."""
    rows, dim = codes.shape
    if q.weight == "fp8_e4m3":
        params = [scale.to(torch.float32).view(torch.uint8).reshape(rows, 4)]
    else:
        params = [scale.to(torch.float16).view(torch.uint8).reshape(rows, 2),
                  bias.to(torch.float16).view(torch.uint8).reshape(rows, 2)]
    if q.weight == "int4":
        padded = torch.zeros(rows, 2 * -(-dim // 2), dtype=torch.uint8)
        padded[:, :dim] = codes
        codes = padded[:, 0::2] | (padded[:, 1::2] << 4)  # element 2k in the low nibble of byte k
    body = torch.cat([*params, codes], dim=1)
    out = torch.zeros(rows, case.row_bytes, dtype=torch.uint8)
    out[:, :body.shape[1]] = body
    return out


def quantized_table(case: Case, gen: torch.Generator) -> QuantizedTable:
    """Random codes and scales for ``case`` (from ``gen``), as the kernel gets them and dequantized."""
    q = case.quantization
    assert q is not None
    codes, code_values = _codes(q, (case.num_embeddings, case.dim), gen)
    if q.scale == "table":
        per_table = torch.tensor(case.scales, dtype=torch.float64)
        values = code_values * per_table[table_of_row(case)][:, None]
        scales = per_table.to(torch.float32) if q.scales_in == "tensor" else None
        return QuantizedTable(codes, values, scales, 0)
    scale, bias = _row_params(case, q, gen)
    values = code_values * scale.to(torch.float64)[:, None] + bias.to(torch.float64)[:, None]
    roundings = 1 if q.bias else 0
    if q.scales_in == "row":
        return QuantizedTable(_fused_rows(case, q, codes, scale, bias), values, None, roundings)
    tensor = torch.stack([scale, bias], dim=1) if q.bias else scale
    return QuantizedTable(codes, values, tensor.contiguous(), roundings)


def output_inverse_scales(case: Case) -> torch.Tensor:
    """float32 [num_tables]: each table's inverse output scale (int8 output)."""
    return torch.tensor(case.output_scales, dtype=torch.float32)


def output_columns(case: Case, per_table: torch.Tensor) -> torch.Tensor:
    """A per-table value for every element of the pooled output ``[B, T * D]``."""
    return per_table.to(torch.float64).repeat_interleave(case.dim)[None, :].expand(case.batch_size, -1)
