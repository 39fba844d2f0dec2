"""CPU tests of the quantized tables' utilities (reference_kernels/quantized.py): row layouts as
FBGEMM's IntN TBE stores them, quantize / dequantize error bounds per format, the from_fbgemm /
to_fbgemm round trip, and the float64 reference lookup against torch's embedding_bag."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from reference_kernels import quantized as q  # noqa: E402
from tests.kernels.test_cpu_kernels import needs_nvrtc  # noqa: E402


@pytest.fixture
def gen() -> torch.Generator:
    seed = int(torch.randint(0, 2**62, (1,)))
    print(f"seed={seed}")
    return torch.Generator().manual_seed(seed)


def table(rows: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(rows, dim, generator=gen) * torch.rand(rows, 1, generator=gen) * 3


@pytest.mark.parametrize(("fmt", "dim", "expected"), [
    ("int8", 128, 144), ("int8", 64, 80), ("int4", 128, 80), ("int4", 64, 48), ("fp16", 128, 256),
    ("fp32", 4, 16), ("fp8_tablewise", 128, 128), ("fp8_rowwise", 128, 144), ("int8_tablewise", 20, 32)])
def test_row_bytes_as_fbgemm_rounds_them(fmt: str, dim: int, expected: int) -> None:
    # FBGEMM: round_up(dim + 4 (INT8) | dim // 2 + 4 (INT4) | dim * 2 (FP16) | dim (FP8), 16)
    assert q.row_bytes(fmt, dim) == expected


def test_bad_formats_and_widths() -> None:
    with pytest.raises(ValueError, match="unknown quantized format"):
        q.row_bytes("int3", 8)
    with pytest.raises(ValueError, match="multiple of 4"):
        q.quantize(torch.zeros(2, 6), "int8")
    with pytest.raises(ValueError, match="NaN"):
        q.quantize(torch.full((2, 8), float("nan")), "int8")


def fbgemm_style_dequant(data: torch.Tensor, dim: int, bits: int) -> torch.Tensor:
    """FBGEMM's test helper's formula, written independently: scale and shift fp16 at bytes 0..3,
    int4 low nibble first."""
    scale = data[:, 0:2].contiguous().view(torch.float16).double()
    shift = data[:, 2:4].contiguous().view(torch.float16).double()
    body = data[:, 4:].long()
    if bits == 4:
        body = torch.stack([(body >> (4 * i)) & 0xF for i in range(2)], dim=2).reshape(data.shape[0], -1)
    return body[:, :dim].double() * scale + shift


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_rowwise_layout_and_error(fmt: str, gen: torch.Generator) -> None:
    w = table(300, 64, gen)
    t = q.quantize(w, fmt)
    deq = q.dequantize(t)
    assert torch.equal(deq, fbgemm_style_dequant(t.data, 64, 8 if fmt == "int8" else 4))
    scale = t.data[:, 0:2].contiguous().view(torch.float16).double()
    err = (deq - w.double()).abs()
    # half a step, and the fp16 rounding of the bias (the row's min)
    assert bool((err <= 0.5 * scale + 2**-11 * w.double().abs().amax(1, keepdim=True) + 2**-25).all())
    assert bool((t.data[:, 4 + q.data_bytes(fmt, 64):] == 0).all())  # padding zeroed


@pytest.mark.parametrize("fmt", ["fp8_rowwise", "fp8_tablewise"])
def test_fp8_error(fmt: str, gen: torch.Generator) -> None:
    w = table(200, 32, gen)
    t = q.quantize(w, fmt)
    if fmt == "fp8_rowwise":
        s = t.data[:, 0:4].contiguous().view(torch.float32).double()
    else:
        s = torch.full((200, 1), float(t.scale or 0), dtype=torch.float64)
    err = (q.dequantize(t) - w.double()).abs()
    # e4m3: 3 mantissa bits (half an ulp is 2^-4 relative), subnormal step 2^-9
    assert bool((err <= 2**-4 * w.double().abs() + s * 2**-10).all())


def test_e4m3_decode_matches_torch_except_nan_codes() -> None:
    codes = torch.arange(256, dtype=torch.int64).to(torch.uint8)
    ours = q.e4m3_values(codes)
    theirs = codes.view(torch.float8_e4m3fn).double()
    nan = torch.isnan(theirs)
    assert codes[nan].tolist() == [0x7F, 0xFF]
    assert torch.equal(ours[~nan], theirs[~nan])
    assert ours[nan].tolist() == [480.0, -480.0]  # FBGEMM's HFP8(4, 7)
    assert int(q.e4m3_codes(torch.tensor([1e6])).item()) == 0x7E  # saturates at 448, never 0x7F


def test_int8_tablewise_symmetric(gen: torch.Generator) -> None:
    w = table(100, 16, gen)
    t = q.quantize(w, "int8_tablewise")
    s = float(t.scale or 0)
    assert s == pytest.approx(float(w.abs().max()) / 127)
    codes = t.data[:, :16].contiguous().view(torch.int8)
    assert int(codes.min()) >= -127
    assert float((q.dequantize(t) - w.double()).abs().max()) <= 0.5 * s * (1 + 1e-12)
    given = q.quantize(w, "int8_tablewise", scale=0.5)
    assert given.scale == 0.5


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8", "int4"])
def test_fbgemm_round_trip(fmt: str, gen: torch.Generator) -> None:
    t = q.quantize(table(50, 24, gen), fmt)
    whole = q.to_fbgemm(t)
    back = q.from_fbgemm(whole, 24, q.FBGEMM_TYPES[fmt])
    assert torch.equal(back.data, t.data) and back.format == fmt
    unpadded = q.HEADER_BYTES[fmt] + q.data_bytes(fmt, 24)
    assert torch.equal(q.from_fbgemm(whole[:, :unpadded], 24, fmt).data, t.data)
    if fmt in ("int8", "int4"):  # split_embedding_weights()'s (elements, scale_shift) and TorchRec's triple
        pair = q.from_fbgemm(whole[:, 4:unpadded], 24, fmt.upper(), whole[:, :4])
        assert torch.equal(pair.data, t.data)
        scale = whole[:, 0:2].contiguous().view(torch.float16)
        bias = whole[:, 2:4].contiguous().view(torch.float16)
        assert torch.equal(q.from_fbgemm(whole[:, 4:unpadded], 24, fmt, scale, bias).data, t.data)


def test_fbgemm_fp8_and_refusals(gen: torch.Generator) -> None:
    t = q.quantize(table(10, 8, gen), "fp8_tablewise", scale=1.0)
    back = q.from_fbgemm(q.to_fbgemm(t), 8, "FP8")
    assert back.format == "fp8_tablewise" and back.scale == 1.0 and torch.equal(back.data, t.data)
    with pytest.raises(ValueError, match="no scale"):
        q.to_fbgemm(q.quantize(table(10, 8, gen), "fp8_tablewise", scale=0.5))
    with pytest.raises(ValueError, match="has no int8_tablewise"):
        q.to_fbgemm(q.quantize(table(10, 8, gen), "int8_tablewise"))
    with pytest.raises(ValueError, match="take"):
        q.from_fbgemm(torch.zeros(3, 5, dtype=torch.uint8), 8, "INT8")
    with pytest.raises(ValueError, match="no FBGEMM type"):
        q.from_fbgemm(torch.zeros(3, 16, dtype=torch.uint8), 8, "INT2")


def batch(sizes: list[int], bags: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(0, 6, (len(sizes) * bags,), generator=gen)
    lengths[::5] = 0
    idx = torch.cat([torch.randint(0, sizes[b // bags], (int(n),), generator=gen) for b, n in enumerate(lengths)])
    return idx, torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_reference_matches_torch_embedding_bag(pooling: str, weighted: bool, gen: torch.Generator) -> None:
    fmts, dims, sizes, bags = ["int8", "int4", "fp8_rowwise", "fp16"], [16, 8, 32, 4], [30, 7, 50, 9], 6
    tables = [q.quantize(table(r, d, gen), f) for f, d, r in zip(fmts, dims, sizes, strict=True)]
    idx, offs = batch(sizes, bags, gen)
    psw = torch.rand(idx.numel(), generator=gen) if weighted else None
    ours = q.reference_forward(tables, idx, offs, pooling, psw)
    cols = []
    for t, tab in enumerate(tables):
        o = offs[t * bags:(t + 1) * bags + 1]
        summed = F.embedding_bag(idx[int(o[0]):int(o[-1])], q.dequantize(tab), o[:-1] - o[0], mode="sum",
                                 per_sample_weights=None if psw is None else psw[int(o[0]):int(o[-1])].double())
        # mean (weighted too, as FBGEMM): the bag's sum over its length
        cols.append(summed / (o[1:] - o[:-1]).clamp(min=1)[:, None] if pooling == "mean" else summed)
    assert torch.allclose(ours, torch.cat(cols, dim=1), rtol=1e-12, atol=1e-12)


def test_reference_unpooled_and_int8_output(gen: torch.Generator) -> None:
    tables = [q.quantize(table(20, 8, gen), "int8_tablewise"), q.quantize(table(20, 8, gen), "int4")]
    idx, offs = batch([20, 20], 3, gen)
    rows = q.reference_forward(tables, idx, offs, "none")
    for p in range(idx.numel()):
        t = int(torch.searchsorted(offs, torch.tensor(p), right=True)) - 1
        assert torch.equal(rows[p], q.dequantize(tables[t // 3], idx[p:p + 1])[0])
    pooled = q.reference_forward(tables, idx, offs)
    out = q.round_output(pooled, torch.int8, [10.0, 0.5], [8, 8])
    assert out.dtype == torch.int8
    assert torch.equal(out[:, :8], torch.round(pooled[:, :8] * 10).clamp(-128, 127).to(torch.int8))
    with pytest.raises(ValueError, match="inverse scale"):
        q.round_output(pooled, torch.int8)


def test_module_cpu_path_and_arguments(gen: torch.Generator) -> None:
    from reference_kernels.quantized_tbe import QuantizedTableBatchedEmbeddingBag, geometry

    tables = [q.quantize(table(20, 16, gen), "int8"), q.quantize(table(30, 8, gen), "fp8_tablewise")]
    idx, offs = batch([20, 30], 4, gen)
    module = QuantizedTableBatchedEmbeddingBag(tables, "sum", torch.float16)
    assert torch.equal(module(idx, offs), q.reference_forward(tables, idx, offs).half())
    assert [t.format for t in module.tables()] == ["int8", "fp8_tablewise"]
    assert torch.equal(module.tables()[0].data, tables[0].data)
    with pytest.raises(ValueError, match="inverse scale"):
        QuantizedTableBatchedEmbeddingBag(tables, "sum", torch.int8)
    with pytest.raises(ValueError, match="one width"):
        QuantizedTableBatchedEmbeddingBag(tables, "none", torch.float32)
    with pytest.raises(ValueError, match="T \\* B \\+ 1"):
        module(idx, offs[:-1])
    # int8 d128: 9 chunks a row, three teams a warp; long bags take all three, short ones one each
    long_bags = geometry("int8", 128, 30.0, 4)
    assert (long_bags.chunks, long_bags.tw, long_bags.tpb, long_bags.bpw) == (9, 9, 3, 1)
    assert geometry("int8", 128, 1.0, 4).bpw == 3
    many = geometry("int8", 128, 30.0, 4, bags=4 * 8192)  # enough warps with one team a bag
    assert (many.tpb, many.bpw) == (1, 3)
    hinted = geometry("int8", 128, 100.0, 2, bags=10**6, known_length=True)  # a 100-row bag: 3 teams
    assert (hinted.tpb, hinted.bpw) == (3, 1)
    assert geometry("int8", 128, 30.0, 2, bags=10**6, known_length=True).tpb == 1
    # int4 d128: 6 teams a warp; a 100-row bag wants 4 teams, which do not divide 6: it gets 6
    assert geometry("int4", 128, 100.0, 2, bags=10**6, known_length=True).tpb == 6
    assert geometry("int8", 128, 3.0, 2, bags=10**6, known_length=True).tpb == 1
    assert geometry("fp32", 136, 1.0, 4).tw == 32  # 34 chunks: two tiles of a 32-lane team


def test_word_layout_geometry() -> None:
    """LANE_BYTES 4: a lane holds a 4-byte word of the codes, so a team is as wide as the codes'
    words (the qparams are read apart); wider rows walk in tiles of 32 words."""
    from reference_kernels.quantized_tbe import geometry

    int8 = geometry("int8", 128, 30.0, 8, unit=4)  # 128 bytes of codes: a warp a row, a bag a warp
    assert (int8.chunks, int8.tw, int8.tpb, int8.bpw, int8.lane_bytes) == (32, 32, 1, 1, 4)
    int4 = geometry("int4", 128, 1.0, 4, bags=10**6, unit=4)  # 64 bytes: half a warp a row, two bags a warp
    assert (int4.chunks, int4.tw, int4.tpb, int4.bpw) == (16, 16, 1, 2)
    # a 100-row bag of int4 rows, 4 in flight: both halves of the warp take it
    assert geometry("int4", 128, 100.0, 4, bags=10**6, known_length=True, unit=4).tpb == 2
    assert geometry("int8", 264, 1.0, 8, unit=4).chunks == 66  # three tiles
    assert geometry("int4", 4, 1.0, 8, unit=4).chunks == 1  # 2 bytes of codes: one word, half of it padding
    assert geometry("fp8_tablewise", 20, 1.0, 8, unit=4).tw == 5


def test_launch_uses_the_word_layout_only_for_byte_coded_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    from reference_kernels import quantized_tbe

    monkeypatch.setattr(quantized_tbe, "LAUNCH_SHAPE", dict.fromkeys(q.FORMATS, (8, 5, 0, 4)))
    assert {f: quantized_tbe.lane_bytes(f) for f in q.FORMATS} == {
        "fp32": 16, "fp16": 16, "int8": 4, "int4": 4, "fp8_rowwise": 4, "fp8_tablewise": 4, "int8_tablewise": 4}


@needs_nvrtc
@pytest.mark.parametrize("layout", ["word4 r8", "word4 r4", "word4 r4p", "word4 r16"])
def test_nvrtc_compiles_the_layouts_the_benchmark_compares(layout: str) -> None:
    """Every byte-coded format under each launch layout quantized_suite --compare times (the
    4-byte-word kernel), with per-sample weights, mean pooling and int8 output."""
    from benchmarks.quantized_suite import LAYOUTS
    from reference_kernels import nvrtc

    for fmt, (rows, min_blocks, pipeline, lane) in LAYOUTS[layout].items():
        defines = {"TABLE_FORMAT": q.FORMAT_CODE[fmt], "POOLING": 1, "OUT_DTYPE": 2, "PSW": 1, "INDEX64": 0,
                   "ROWS_IN_FLIGHT": rows, "MIN_BLOCKS": min_blocks, "PIPELINE": pipeline, "LANE_BYTES": lane}
        assert nvrtc.compile_cubin("quantized_forward.cu", nvrtc.compile_options("sm_90", defines))[:4] == b"\x7fELF"


def test_compare_table_and_summary_per_layout() -> None:
    """quantized_suite --compare: one column a layout with its ratio to FBGEMM, and a geomean per
    format and layout (the first layout's times are the result's own)."""
    from benchmarks.quantized_suite import Result, layouts_table, summary

    a = Result("case a", "int8", 8192, 0.0, 50.0, 100.0, 10**6, vs_fbgemm=2.0,
               layouts_us={"chunk16": 50.0, "word4 r8": 25.0}, layouts_diff={"chunk16": 0.0, "word4 r8": 1e-7})
    b = Result("case b", "int8", 512, 0.0, 40.0, 40.0, 10**6, vs_fbgemm=1.0,
               layouts_us={"chunk16": 40.0, "word4 r8": 50.0}, layouts_diff={"chunk16": 0.0, "word4 r8": 0.0})
    lines = layouts_table([a, b]).splitlines()
    assert lines[0] == "| case | FBGEMM µs | chunk16 µs (x) | word4 r8 µs (x) | diff vs first |"
    assert lines[2] == "| case a | 100.0 | 50.0 (2.00) | 25.0 (4.00) | 1.0e-07 |"
    got = summary([a, b])
    assert got["int8 word4 r8"] == {"geomean_vs_fbgemm": pytest.approx(3.2 ** 0.5), "min_vs_fbgemm": 0.8,
                                    "cases": 2, "below_1.2": 1}
    assert got["int8"] == got["int8 chunk16"]
