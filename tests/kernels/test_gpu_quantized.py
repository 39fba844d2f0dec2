"""GPU tests of the quantized table-batched lookup (reference_kernels/quantized_tbe.py,
quantized_forward.cu): every format, pooling (sum, mean, unpooled), per-sample weights, output
float32 / float16 / int8, int32 and int64 indices, mixed formats and widths in one module, rows
wider than 32 chunks (tiles), short and long bags (one or several teams a bag), empty bags; against
the float64 reference over the dequantized rows within the verifier's float32-accumulation bound.
Fresh random inputs each run (seed printed), outputs poisoned (NaN / 0x7F)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from kernel_bounds import U32, UNIT_ROUNDOFF, assert_within  # noqa: E402

from compliance.verify import tolerance  # noqa: E402
from reference_kernels import quantized as q  # noqa: E402
from reference_kernels import quantized_tbe  # noqa: E402
from reference_kernels.quantized_tbe import QuantizedTableBatchedEmbeddingBag  # noqa: E402

pytestmark = [pytest.mark.cuda]


@pytest.fixture(autouse=True)
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantized_tbe, "POISON_OUTPUTS", True)


class Batch:
    def __init__(self, sizes: list[int], batch: int, max_len: int, gen: torch.Generator,
                 index_dtype: torch.dtype = torch.int64, weighted: bool = False) -> None:
        lengths = torch.randint(0, max_len + 1, (len(sizes) * batch,), generator=gen, device="cuda")
        lengths[::7] = 0
        self.indices = torch.cat([torch.randint(0, sizes[b // batch], (int(n),), generator=gen, device="cuda")
                                  for b, n in enumerate(lengths.tolist())]).to(index_dtype)
        self.offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).to(index_dtype)
        self.longest = int(lengths.max()) if lengths.numel() else 0
        self.psw = (torch.rand(self.indices.numel(), generator=gen, device="cuda") * 2 - 0.5) if weighted else None


def random_tables(fmts: list[str], dims: list[int], sizes: list[int], gen: torch.Generator) -> list[q.QuantizedTable]:
    out = []
    for f, d, r in zip(fmts, dims, sizes, strict=True):
        w = torch.randn(r, d, generator=gen, device="cuda") * (torch.rand(r, 1, generator=gen, device="cuda") + 0.1)
        out.append(q.quantize(w, f))
    return out


def check(module: QuantizedTableBatchedEmbeddingBag, tables: list[q.QuantizedTable], b: Batch) -> None:
    ours = module(b.indices, b.offsets, b.psw)
    ref = q.reference_forward(tables, b.indices, b.offsets, module.pooling, b.psw)
    absolute = q.reference_forward(tables, b.indices, b.offsets, module.pooling, b.psw, absolute=True)
    # n terms of a bag (the longest; plus one for mean's division, whose A is the mean of |x|, as
    # kernel_bounds.pooled_tolerance); a dequantized element's own rounding (fma(s, q, b), or the
    # weight times the scale) before a weighted product is one more
    terms = max(1 if module.pooling == "none" else b.longest, 1)
    terms += int(b.psw is not None and any(f not in ("fp32", "fp16") for f in module.formats))
    terms += int(module.pooling == "mean")
    out_dtype = module.output_dtype
    if out_dtype == torch.int8:
        factors = torch.cat([torch.full((d,), s, dtype=torch.float64, device="cuda")
                             for s, d in zip(module.inverse_scales, module.dims, strict=True)])
        scaled = ref * factors
        slack = terms * U32 * absolute * factors + 1e-9
        expected = scaled.clamp(-128, 127)
        err = (ours.double() - expected).abs()
        ok = err <= 0.5 + slack
        assert bool(ok.all()), f"int8 output: worst {float(err.max())}"
        return
    bound = tolerance.STRICT_BOUNDS["float32" if out_dtype == torch.float32 else "float16"]
    tol = tolerance.pooled_bound("sum", ref, absolute, terms, UNIT_ROUNDOFF[out_dtype], bound)
    assert_within(ours, ref, tol, f"{module.formats} {module.pooling} {out_dtype}")


@pytest.mark.parametrize("fmt", q.FORMATS)
@pytest.mark.parametrize("pooling", ["sum", "mean", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("max_len", [3, 70])
def test_one_format(fmt: str, pooling: str, weighted: bool, max_len: int, gen: torch.Generator) -> None:
    dims = [64, 64, 64] if pooling == "none" else [64, 128, 20]
    sizes = [1000, 37, 5000]
    tables = random_tables([fmt] * 3, dims, sizes, gen)
    b = Batch(sizes, 33, max_len, gen, weighted=weighted)
    for out_dtype in (torch.float32, torch.float16):
        check(QuantizedTableBatchedEmbeddingBag(tables, pooling, out_dtype), tables, b)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
def test_mixed_formats_and_widths(index_dtype: torch.dtype, pooling: str, gen: torch.Generator) -> None:
    fmts = list(q.FORMATS) + ["int8", "int4"]
    # 136 float32 columns: 34 chunks, two tiles; 1000 int4 columns: 32 chunks; 4: one chunk
    dims = [136, 520, 128, 1000, 4, 44, 200, 12, 256]
    sizes = [300, 200, 4000, 100, 50, 900, 1000, 10, 3000]
    tables = random_tables(fmts, dims, sizes, gen)
    for max_len in (1, 9, 40):
        b = Batch(sizes, 47, max_len, gen, index_dtype, weighted=max_len == 9)
        for out_dtype in (torch.float32, torch.float16):
            check(QuantizedTableBatchedEmbeddingBag(tables, pooling, out_dtype), tables, b)


@pytest.mark.parametrize("fmt", ["int8_tablewise", "fp8_tablewise", "int8", "int4"])
def test_int8_output(fmt: str, gen: torch.Generator) -> None:
    tables = random_tables([fmt, fmt], [64, 32], [500, 800], gen)
    b = Batch([500, 800], 64, 30, gen)
    module = QuantizedTableBatchedEmbeddingBag(tables, "sum", torch.int8, output_inverse_scales=[8.0, 40.0])
    check(module, tables, b)


def test_deterministic_and_no_sync(gen: torch.Generator) -> None:
    tables = random_tables(["int8", "int4"], [128, 64], [100, 100], gen)
    b = Batch([100, 100], 512, 60, gen)  # hot rows, several teams a bag
    module = QuantizedTableBatchedEmbeddingBag(tables, "sum", torch.float32)
    first = module(b.indices, b.offsets)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()  # capture fails on a host synchronisation
    with torch.cuda.graph(graph):
        captured = module(b.indices, b.offsets)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(first, captured)
    assert torch.equal(first, module(b.indices, b.offsets))


def test_fbgemm_layout_tables_load(gen: torch.Generator) -> None:
    w = torch.randn(256, 64, generator=gen, device="cuda")
    t = q.quantize(w, "int4")
    loaded = q.from_fbgemm(q.to_fbgemm(t)[:, 4:36], 64, "INT4", q.to_fbgemm(t)[:, :4])
    b = Batch([256], 100, 10, gen)
    check(QuantizedTableBatchedEmbeddingBag([loaded], "sum", torch.float32), [loaded], b)


def test_cpu_module_is_the_reference(gen: torch.Generator) -> None:
    tables = [t.to("cpu") for t in random_tables(["int8", "fp8_rowwise"], [16, 8], [20, 30], gen)]
    b = Batch([20, 30], 5, 4, gen)
    module = QuantizedTableBatchedEmbeddingBag(tables, "mean", torch.float32)
    cpu = module(b.indices.cpu(), b.offsets.cpu())
    ref = q.reference_forward(tables, b.indices.cpu(), b.offsets.cpu(), "mean").float()
    assert torch.equal(cpu, ref)


# (rows in flight, blocks per SM, pipelined, lane bytes): 16-byte chunks, then the 4-byte-word layouts
WORD_SHAPES = [(8, 5, 0, 4), (4, 6, 0, 4), (4, 5, 0, 4), (8, 4, 0, 4), (4, 4, 1, 4), (16, 3, 0, 4)]
SHAPES = [(4, 3, 0, 16), (2, 3, 1, 16), (4, 2, 1, 16), (8, 2, 0, 16), (2, 2, 0, 16), *WORD_SHAPES]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pooling", ["sum", "none"])
def test_launch_shapes(shape: tuple[int, int, int, int], pooling: str, gen: torch.Generator,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every launch shape the benchmark's sweep may pick (rows in flight, register cap, pipelined
    loads, lane bytes; fp16 keeps its 16-byte chunks), both geometry policies, with and without the
    pooling-factor hint, short and long bags."""
    fmts = ["int8", "int4", "fp8_rowwise", "fp16", "int8_tablewise"]
    monkeypatch.setattr(quantized_tbe, "LAUNCH_SHAPE", {**quantized_tbe.LAUNCH_SHAPE, **dict.fromkeys(fmts, shape)})
    dims = [64] * 5 if pooling == "none" else [128, 64, 20, 136, 32]
    sizes = [700, 300, 2000, 50, 90]
    tables = random_tables(fmts, dims, sizes, gen)
    for policy in ("fill", "mean"):
        monkeypatch.setattr(quantized_tbe, "GEOMETRY_POLICY", policy)
        for max_len in (2, 45):
            b = Batch(sizes, 40, max_len, gen, torch.int32, weighted=max_len == 2)
            for hint in (None, [max_len / 2] * len(fmts)):  # pooling_factors: long bags over several teams
                check(QuantizedTableBatchedEmbeddingBag(tables, pooling, torch.float32, pooling_factors=hint),
                      tables, b)


@pytest.mark.parametrize("shape", WORD_SHAPES)
@pytest.mark.parametrize("pooling", ["sum", "mean", "none"])
def test_word_layout(shape: tuple[int, int, int, int], pooling: str, gen: torch.Generator,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The 4-byte-word kernel on every byte-coded format: rows of 66 and 125 words (tiles of 32),
    a word half padding (int4 d4, d12), narrow teams (5 words), int32 and int64 indices, weights,
    float32 / float16 output, then int8 output."""
    fmts = ["int8", "int4", "fp8_rowwise", "fp8_tablewise", "int8_tablewise", "int4", "int8"]
    monkeypatch.setattr(quantized_tbe, "LAUNCH_SHAPE", {**quantized_tbe.LAUNCH_SHAPE,
                                                        **dict.fromkeys(quantized_tbe.WORD_FORMATS, shape)})
    dims = [64] * len(fmts) if pooling == "none" else [264, 1000, 20, 128, 36, 12, 4]
    sizes = [300, 200, 4000, 900, 1000, 10, 3000]
    tables = random_tables(fmts, dims, sizes, gen)
    for max_len, index_dtype, out_dtype in ((1, torch.int32, torch.float32), (9, torch.int64, torch.float16),
                                            (45, torch.int32, torch.float32), (45, torch.int32, torch.float16)):
        b = Batch(sizes, 37, max_len, gen, index_dtype, weighted=max_len == 9)
        check(QuantizedTableBatchedEmbeddingBag(tables, pooling, out_dtype), tables, b)
    if pooling != "none":
        b = Batch(sizes, 37, 20, gen, weighted=True)
        check(QuantizedTableBatchedEmbeddingBag(tables, pooling, torch.int8, output_inverse_scales=[4.0] * len(fmts)),
              tables, b)
