"""Quantized tables in the verifier (issue 54, item 4), without a build: every format and scale scheme
the vocabulary names, through the verifier's own inputs, reference and comparison. A float32 kernel
emulated here (decoding the weight's bytes itself) passes; kernels with the usual quantization bugs
(the bias ignored, the int4 nibbles swapped, the table scale of another table, truncation) fail; the
int8 output bound is exactly half a code wide where the float error vanishes; semantics no kernel can
have are refused. The fixtures' end-to-end runs are test_cpu_quantized.py (slow) and test_cuda.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from compliance.engine import build_context
from compliance.manifest import Semantics
from compliance.semantics import Quantization, Tables
from compliance.verify.case_inputs import CaseInputs
from compliance.verify.cases import Case, DomainError, generate_cases
from compliance.verify.judge import case_bound
from compliance.verify.tensors import compare, make_inputs
from compliance.verify.tolerance import DEFAULT_BOUNDS, int8_output_bound

from .conftest import CPU_QUANTIZED_TREE, CUDA_QUANTIZED_TREE

FORMATS = [
    Quantization("int8", "row", bias=True, scales_in="row"),  # FBGEMM's fused int8 rows
    Quantization("int4", "row", bias=True, scales_in="row", row_alignment=16),  # fused int4 rows, padded
    Quantization("fp8_e4m3", "row", scales_in="row"),
    Quantization("int8", "row", bias=True, scales_in="tensor"),
    Quantization("int8", "row", scales_in="tensor"),
    Quantization("fp8_e4m3", "table", scales_in="tensor"),
    Quantization("int8", "table", scales_in="argument"),
]


def _cases(q: Quantization, seed: int = 7, **semantics: Any) -> list[Case]:
    """The verifier's cases for a kernel claiming ``q`` (csr bags, sum and mean, per-sample weights)."""
    fields: dict[str, Any] = {"modes": ("sum", "mean"), "layouts": ("csr",), "index_dtypes": ("int64",),
                              "per_sample_weights": True, "quantization": q, **semantics}
    return generate_cases(Semantics(op="embedding_bag", **fields), seed)


def _inputs(case: Case) -> CaseInputs:
    return make_inputs(case, case_bound(case, DEFAULT_BOUNDS))


def _decode(case: Case, inputs: CaseInputs, flaw: str = "") -> torch.Tensor:
    """The table in float32 as a kernel decodes it from the bytes it gets (this test's own decoding)."""
    q = case.quantization
    assert q is not None
    weight, rows, dim = inputs.weight, case.num_embeddings, case.dim
    if q.scales_in == "row":
        if q.weight == "fp8_e4m3":  # a float32 scale, then the codes
            scale, bias = weight[:, 0:4].contiguous().view(torch.float32), torch.zeros(rows, 1)
        else:  # FBGEMM's: fp16 scale, fp16 bias, then the codes
            scale = weight[:, 0:2].contiguous().view(torch.float16).float()
            bias = weight[:, 2:4].contiguous().view(torch.float16).float()
        body = weight[:, 4:]
        if q.weight == "int4":
            low, high = (body >> 4, body & 15) if flaw == "nibbles" else (body & 15, body >> 4)
            codes = torch.stack([low, high], dim=2).reshape(rows, -1)[:, :dim].float()
        elif q.weight == "fp8_e4m3":
            codes = body[:, :dim].contiguous().view(torch.float8_e4m3fn).float()
        else:
            codes = body[:, :dim].float()
    else:
        codes = weight.view(torch.float8_e4m3fn).float() if q.weight == "fp8_e4m3" else weight.float()
        if q.scale == "table":
            table = torch.repeat_interleave(torch.arange(case.num_tables), torch.tensor(case.table_rows or (rows,)))
            scale = torch.tensor(case.scales, dtype=torch.float32)[table][:, None]
            bias = torch.zeros(rows, 1)
        else:
            params = inputs.extra["weight_scales"].reshape(rows, -1)
            scale = params[:, :1]
            bias = params[:, 1:2] if q.bias else torch.zeros(rows, 1)
    if flaw == "no-bias":
        bias = torch.zeros_like(bias)
    return codes * scale + bias


def _emulate(case: Case, inputs: CaseInputs, flaw: str = "") -> torch.Tensor:
    """A float32 kernel: each bag pooled in float32 from the decoded rows (one table)."""
    table = _decode(case, inputs, flaw)
    indices = inputs.indices.to(torch.int64)
    psw = None if inputs.psw is None else inputs.psw.float()
    offsets = None if inputs.offsets is None else inputs.offsets.to(torch.int64)
    return torch.nn.functional.embedding_bag(indices, table, offsets, mode=case.mode, per_sample_weights=psw,
                                             include_last_offset=case.include_last_offset)


@pytest.mark.parametrize("q", FORMATS, ids=lambda q: f"{q.label}-in-{q.scales_in}")
def test_a_float32_kernel_passes_every_case(q: Quantization) -> None:
    for case in _cases(q):
        inputs = _inputs(case)
        result = compare(_emulate(case, inputs), inputs.reference, inputs.bound, prefilled=False)
        assert result.ok, (case.describe(), result.positions)


@pytest.mark.parametrize(("q", "flaw"), [(FORMATS[0], "no-bias"), (FORMATS[1], "nibbles"), (FORMATS[3], "no-bias")],
                         ids=["int8-row-bias-ignored", "int4-nibbles-swapped", "int8-tensor-bias-ignored"])
def test_quantization_bugs_fail(q: Quantization, flaw: str) -> None:
    failing = 0
    cases = [c for c in _cases(q) if "dims" in c.tags]  # every width, 1 to 256
    for case in cases:
        inputs = _inputs(case)
        failing += not compare(_emulate(case, inputs, flaw), inputs.reference, inputs.bound, prefilled=False).ok
    assert failing >= len(cases) - 2, (failing, len(cases))  # (a dim-1 int4 row has no high nibble)


def test_fused_rows_have_fbgembs_layout() -> None:
    """fp16 scale, fp16 bias, the codes (int4: two a byte, the low nibble first), padding to the alignment."""
    case = next(c for c in _cases(FORMATS[1]) if c.dim == 5)
    inputs = _inputs(case)
    assert inputs.weight.dtype == torch.uint8 and inputs.weight.shape == (case.num_embeddings, 16)
    assert case.row_bytes == 16 and case.scalars()["row_bytes"] == 16  # 4 + 3 bytes of codes, padded to 16
    assert bool((inputs.weight[:, 7:] == 0).all())
    byte_offsets = inputs.extra["weights_offsets"]
    assert byte_offsets.tolist() == [r * 16 for r in case.row_offsets[:-1]]


def _int8_output_cases() -> list[Case]:
    q = Quantization("int8", "table", scales_in="tensor", output="int8")
    return _cases(q, modes=("sum",), layouts=("fixed",), index_dtypes=("int32",), per_sample_weights=False,
                  tables=Tables())


def _requantize(case: Case, inputs: CaseInputs, rounding: str = "nearest", scale_of: int | None = None) -> torch.Tensor:
    """A plugin's int8 output: float32 pooled sums of code * scale[t], times inverse scale[t], rounded."""
    batch, tables, hotness = case.batch_size, case.num_tables, case.pooling
    indices = inputs.indices.to(torch.int64).view(batch, tables, hotness)
    out = torch.empty(batch, tables, case.dim, dtype=torch.int8)
    for t in range(tables):
        rows = inputs.weight[indices[:, t] + case.row_offsets[t]].float()
        scale = inputs.extra["weight_scales"][t if scale_of is None else scale_of]
        acc = torch.zeros(batch, case.dim)
        for step in range(hotness):
            acc = acc + rows[:, step] * scale
        scaled = acc * inputs.extra["output_inverse_scales"][t]
        codes = torch.round(scaled) if rounding == "nearest" else torch.trunc(scaled)
        out[:, t] = codes.clamp(-128, 127).to(torch.int8)
    return out.reshape(batch, tables * case.dim)


@pytest.mark.parametrize(("rounding", "scale_of", "passes"),
                         [("nearest", None, True), ("truncate", None, False), ("nearest", 0, False)],
                         ids=["round-to-nearest", "truncates", "table-0-scale"])
def test_int8_output_is_compared_after_dequantization(rounding: str, scale_of: int | None, passes: bool) -> None:
    results = []
    saturated = 0
    for case in _int8_output_cases():
        inputs = _inputs(case)
        assert inputs.dequantize is not None
        out = _requantize(case, inputs, rounding, scale_of)
        saturated += int((out.abs() >= 127).sum())
        results.append(compare(out, inputs.reference, inputs.bound, prefilled=False,
                               dequantize=inputs.dequantize).ok)
    assert all(results) if passes else not any(results), results
    assert saturated, "the cases must exercise saturation"


def test_int8_output_bound_is_half_a_code_plus_the_float_error() -> None:
    ref = torch.tensor([1.0, -3.0])
    inverse = torch.tensor([4.0, 0.5])
    exact = int8_output_bound(torch.zeros(2), ref, inverse, u_acc=0.0)
    assert exact.tolist() == [0.125, 1.0]  # half a code, in values: 0.5 / s
    assert bool((int8_output_bound(torch.full((2,), 1e-3), ref, inverse) > exact + 1e-3).all())


@pytest.mark.parametrize(("quantization", "why"), [
    ({"weight": "int8", "scale": "table", "scales_in": "row"}, "scales_in row holds row-wise scales"),
    ({"weight": "int8", "scale": "row", "scales_in": "argument"}, "passes one table's scale"),
    ({"weight": "int8", "scale": "table", "bias": True}, "a bias is row-wise"),
    ({"weight": "int4", "scale": "row", "scales_in": "tensor"}, "int4 codes come in FBGEMM's fused rows"),
    ({"weight": "int8", "scale": "row"}, "carry a scale and a bias"),
    ({"weight": "fp8_e4m3", "scale": "row", "bias": True}, "a float32 scale, no bias"),
])
def test_semantics_no_kernel_can_have_are_refused(quantization: dict[str, Any], why: str) -> None:
    q = Quantization.from_mapping(quantization)
    assert q is not None
    with pytest.raises(DomainError, match=why):
        _cases(q)


def test_scalar_scales_are_for_one_table_and_quantized_tables_have_no_backward() -> None:
    q = Quantization("int8", "table", scales_in="argument")
    with pytest.raises(DomainError, match="for one table"):
        _cases(q, tables=Tables())
    from compliance.semantics import Backward

    with pytest.raises(DomainError, match="no declared backward"):
        _cases(Quantization("int8", "table"), backward=Backward("sgd"))


def test_the_gpu_fixture_declares_the_cpu_twins_kernels() -> None:
    ids = []
    for tree in (CPU_QUANTIZED_TREE, CUDA_QUANTIZED_TREE):
        ctx, _ = build_context(tree, None)
        kernels = [dk.kernel for dk in ctx.kernels()]
        assert all(k.semantics.quantization is not None for k in kernels)
        ids.append(sorted(k.id for k in kernels))
    assert ids[0] == ids[1] and len(ids[0]) == 6


@pytest.mark.parametrize(("q", "theirs"), [
    (Quantization("int8", "row", bias=True, scales_in="row", row_alignment=16), "int8"),
    (Quantization("int4", "row", bias=True, scales_in="row", row_alignment=16), "int4"),
    (Quantization("fp8_e4m3", "row", scales_in="row", row_alignment=16), "fp8_rowwise"),
    (Quantization("int8", "table", scales_in="argument"), "int8_tablewise"),
    (Quantization("fp8_e4m3", "table", scales_in="argument"), "fp8_tablewise"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_verifiers_rows_are_reference_kernels_rows(q: Quantization, theirs: str) -> None:
    """The layouts the verifier hands a kernel decode, byte for byte, to the same values with
    reference_kernels.quantized (FBGEMM's rows; the verifier itself never imports it)."""
    from compliance.verify.quantized import quantized_table
    from reference_kernels.quantized import QuantizedTable, dequantize, row_bytes

    for case in (c for c in _cases(q) if c.dim % 4 == 0):
        table = quantized_table(case, torch.Generator().manual_seed(case.seed))
        data = table.weight.view(torch.uint8)
        assert data.shape[1] == row_bytes(theirs, case.dim) or q.scales_in != "row"
        padded = torch.zeros(case.num_embeddings, row_bytes(theirs, case.dim), dtype=torch.uint8)
        padded[:, :data.shape[1]] = data
        scale = case.scales[0] if case.scales else None
        assert torch.equal(dequantize(QuantizedTable(theirs, case.dim, padded, scale)), table.values), case.id
