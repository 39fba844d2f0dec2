"""GPU tests: the reference kernels against torch.nn.functional.embedding_bag / embedding.

Fresh random inputs every run (no fixed seed; the seed is printed on failure),
outputs prefilled with NaN (REFERENCE_KERNELS_POISON_OUTPUTS), pooled sums and
means checked against torch in float64 within the bound of kernel_bounds.py,
max mode and the unpooled lookup checked for exact equality.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from kernel_bounds import assert_within, pooled_tolerance  # noqa: E402

import reference_kernels as rk  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs")]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
INDEX_DTYPES = [torch.int32, torch.int64]
LAYOUTS = ["fixed", "csr", "csr_last"]


@dataclass
class Bags:
    """One batch of lookups in the layout under test (arguments for embedding_bag)."""

    input: torch.Tensor
    offsets: torch.Tensor | None
    include_last_offset: bool
    longest: int  # longest bag: sets the error bound


def make_bags(layout: str, batch: int, pooling: int, rows: int, index_dtype: torch.dtype,
              gen: torch.Generator) -> Bags:
    """Random indices with 0, rows - 1 and a duplicate planted; CSR bags have lengths
    0..2*pooling (so empty bags occur), the first bag is always empty."""
    dev = "cuda"
    if layout == "fixed":
        idx = torch.randint(0, rows, (batch, pooling), generator=gen, device=dev)
        flat = idx.view(-1)
        longest = pooling
    else:
        lengths = torch.randint(0, 2 * pooling + 1, (batch,), generator=gen, device=dev)
        lengths[0] = 0
        if batch > 1:
            lengths[1] = max(lengths[1].item(), 4)
        flat = torch.randint(0, rows, (int(lengths.sum()),), generator=gen, device=dev)
        idx = flat
        longest = int(lengths.max())
    if flat.numel() >= 4:
        flat[0], flat[1], flat[2] = 0, rows - 1, flat[3]
    if layout == "fixed":
        return Bags(idx.to(index_dtype), None, False, longest)
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    if layout == "csr":
        offsets = offsets[:-1]
    return Bags(idx.to(index_dtype), offsets.to(index_dtype), layout == "csr_last", longest)


def bag_of(bags: Bags) -> torch.Tensor:
    """Bag of each flat index position (every position is in a bag in make_bags' layouts)."""
    n = bags.input.numel()
    if bags.offsets is None:
        return torch.arange(n, device="cuda") // bags.input.shape[1]
    starts = bags.offsets[: len(bags.offsets) - int(bags.include_last_offset)].long()
    return torch.searchsorted(starts, torch.arange(n, device="cuda"), right=True) - 1


def random_table(rows: int, dim: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(rows, dim, generator=gen, device="cuda").to(dtype)


def torch_bag(bags: Bags, weight: torch.Tensor, mode: str, psw: torch.Tensor | None,
              padding_idx: int | None) -> torch.Tensor:
    return F.embedding_bag(bags.input, weight, bags.offsets, mode=mode, per_sample_weights=psw,
                           include_last_offset=bags.include_last_offset, padding_idx=padding_idx)


def ours_bag(bags: Bags, weight: torch.Tensor, mode: str, psw: torch.Tensor | None,
             padding_idx: int | None) -> torch.Tensor:
    # int32 inputs take the default (deferred) check, whose checked copy is int32; int64 inputs
    # skip it (they are valid), so that the kernels' int64-index variants stay tested too
    check = "ignore" if bags.input.dtype == torch.int64 else None
    return rk.embedding_bag(bags.input, weight, bags.offsets, mode=mode, per_sample_weights=psw,
                            include_last_offset=bags.include_last_offset, padding_idx=padding_idx,
                            check_indices=check)


def check_bag(bags: Bags, weight: torch.Tensor, mode: str, psw: torch.Tensor | None = None,
              padding_idx: int | None = None) -> None:
    ours = ours_bag(bags, weight, mode, psw, padding_idx)
    if mode == "max":
        expected = torch_bag(bags, weight, mode, psw, padding_idx)
        assert ours.dtype == expected.dtype and ours.shape == expected.shape
        assert torch.equal(ours, expected), "max mode must match torch exactly"
        return
    psw64 = None if psw is None else psw.double()
    ref = torch_bag(bags, weight.double(), mode, psw64, padding_idx)
    abs_ref = torch_bag(bags, weight.double().abs(), mode, None if psw is None else psw64.abs(), padding_idx)
    terms = bags.longest + (1 if mode == "mean" else 0)
    assert ours.dtype == weight.dtype and ours.shape == ref.shape
    assert_within(ours, ref, pooled_tolerance(ref, abs_ref, terms, weight.dtype), f"{mode} {weight.dtype}")


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bag_matrix(mode: str, dtype: torch.dtype, layout: str, index_dtype: torch.dtype,
                    gen: torch.Generator) -> None:
    weight = random_table(1000, 128, dtype, gen)
    check_bag(make_bags(layout, 64, 20, 1000, index_dtype, gen), weight, mode)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_per_sample_weights(dtype: torch.dtype, layout: str, gen: torch.Generator) -> None:
    weight = random_table(500, 64, dtype, gen)
    bags = make_bags(layout, 50, 12, 500, torch.int64, gen)
    psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype)
    check_bag(bags, weight, "sum", psw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_padding_idx(mode: str, layout: str, gen: torch.Generator) -> None:
    rows = 8  # small table: padding rows are frequent
    weight = random_table(rows, 32, torch.float32, gen)
    bags = make_bags(layout, 40, 6, rows, torch.int64, gen)
    flat = bags.input.view(-1)
    flat[: min(6, flat.numel())] = 5  # the first non-empty bag(s) hold padding only
    check_bag(bags, weight, mode, padding_idx=5)
    check_bag(bags, weight, mode, padding_idx=-3)  # negative: counts from the end, as in torch


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [1, 3, 4, 5, 127, 128, 129, 256, 1000])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_dims(mode: str, dim: int, dtype: torch.dtype, gen: torch.Generator) -> None:
    weight = random_table(300, dim, dtype, gen)
    check_bag(make_bags("csr", 33, 7, 300, torch.int64, gen), weight, mode)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,pooling", [(1, 20), (64, 1), (16, 1000), (3, 0)])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_bag_lengths(mode: str, batch: int, pooling: int, layout: str, gen: torch.Generator) -> None:
    weight = random_table(2000, 128, torch.float16, gen)
    bags = make_bags(layout, batch, pooling, 2000, torch.int64, gen)
    if layout == "fixed" and pooling == 0:  # torch rejects [B, 0] input ("step must be nonzero"): so do we
        with pytest.raises(ValueError, match="bags of length 0"):
            ours_bag(bags, weight, mode, None, None)
        return
    check_bag(bags, weight, mode)


@pytest.mark.parametrize("layout,pooling", [("fixed", 2), ("fixed", 7), ("fixed", 150), ("csr_last", 3), ("csr", 100),
                                            ("one-row-mixed", 1)])
def test_mean_is_the_correctly_rounded_quotient(layout: str, pooling: int, gen: torch.Generator,
                                                segments_at_any_batch: None) -> None:
    """Mean divides each bag's sum by its row count, correctly rounded, as torch's division does
    (the kernels divide with a reciprocal and one fma correction: common.cuh). Integer-valued
    float32 rows make every sum exact in any order, so ours must equal torch's sum / count bit
    for bit, whichever kernel serves the layout: short-bag (L 2), general (L 7, L 150, CSR of
    0-200 rows), segmented (CSR of 0-6 rows), the one-row bulk path (bags of 0-4 rows)."""
    rows, dim = 1000, 128
    weight = torch.randint(-(2**15), 2**15, (rows, dim), generator=gen, device="cuda").float()
    if layout == "one-row-mixed":
        bags = one_row_csr_bags(6000, rows, torch.int64, "csr_last", True, gen)
    else:
        bags = make_bags(layout, 4099, pooling, rows, torch.int64, gen)
    batch = bags.input.shape[0] if bags.offsets is None else bags.offsets.numel() - int(bags.include_last_offset)
    counts = torch.bincount(bag_of(bags), minlength=batch).float().unsqueeze(1)
    sums = torch_bag(bags, weight, "sum", None, None)
    assert torch.equal(sums, torch_bag(bags, weight.double(), "sum", None, None).float())  # exact sums
    expected = torch.where(counts > 0, sums / counts.clamp(min=1), torch.zeros_like(sums))
    assert torch.equal(ours_bag(bags, weight, "mean", None, None), expected)


SHORT_CASES = [  # (dtype, dim, bag length): fixed-layout bags short enough for the short-bag kernel
    (torch.float32, 128, 1), (torch.float32, 32, 3), (torch.float16, 128, 2), (torch.bfloat16, 64, 4),
    (torch.bfloat16, 192, 1), (torch.float32, 1000, 1), (torch.float16, 3, 1), (torch.float32, 5, 1)]


@pytest.mark.parametrize("dtype,dim,pooling", SHORT_CASES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_short_fixed_bags(mode: str, with_psw: bool, dtype: torch.dtype, dim: int, pooling: int,
                          gen: torch.Generator) -> None:
    """embedding_bag_forward_short: an odd batch (the last step is partial), int32 and int64
    indices, with and without a padding row; the launcher must really pick that kernel."""
    from reference_kernels import launch

    launch.clear_plans()
    rows = 50  # small table: the padding row is frequent
    weight = random_table(rows, dim, dtype, gen)
    for index_dtype, padding_idx in ((torch.int64, None), (torch.int32, 7)):
        bags = make_bags("fixed", 1001, pooling, rows, index_dtype, gen)
        psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
        check_bag(bags, weight, mode, psw, padding_idx)
    assert _entry_used("embedding_bag_forward_short"), "the short-bag kernel was not used"


@pytest.mark.parametrize("pooling", [1, 2])
def test_short_fixed_bags_max_backward(pooling: int, gen: torch.Generator) -> None:
    """Max mode under autograd writes the winning rows (argmax) from the short-bag kernel too."""
    from reference_kernels import launch

    launch.clear_plans()
    weight = random_table(300, 128, torch.float32, gen)
    bags = make_bags("fixed", 333, pooling, 300, torch.int64, gen)
    grad_out = torch.randn(333, 128, generator=gen, device="cuda")
    ours_w, _ = _bag_grad(ours_bag, bags, weight, "max", grad_out, None, None)
    ref_w, _ = _bag_grad(torch_bag, bags, weight, "max", grad_out, None, None)
    torch.testing.assert_close(ours_w, ref_w, rtol=1e-5, atol=1e-5)
    assert _entry_used("embedding_bag_forward_short"), "the short-bag kernel was not used"


SEGMENT_CASES = [  # (dtype, dim, pooling): CSR bags short enough for the segmented kernel (0..2*pooling rows)
    (torch.float32, 128, 1), (torch.float32, 32, 2), (torch.float16, 128, 4), (torch.bfloat16, 64, 1),
    (torch.bfloat16, 192, 3), (torch.float32, 1000, 1), (torch.float32, 16, 1), (torch.float32, 128, 8)]


def _entry_used(entry: str) -> bool:
    """The launcher planned a launch of ``entry`` since its plans were last cleared."""
    from reference_kernels import launch

    return any(plan.entry == entry for plan, _ in launch.planned_launches())


def _check_segmented_plan_used() -> None:
    """The segmented kernel served the calls (every mode and dtype takes it for short CSR bags)."""
    assert _entry_used("embedding_bag_forward_segmented"), "the segmented kernel was not used"


@pytest.fixture
def segments_at_any_batch(tune: Callable[..., None]) -> None:
    """The segmented kernel even for batches too small to fill the GPU (small tests, same code),
    and for the d128 sum/mean calls change 48 gives the general kernel (short_lean)."""
    from reference_kernels import launch

    tune(segment_min_warps_per_sm=0, short_lean=False)
    launch.clear_plans()


@pytest.mark.parametrize("dtype,dim,pooling", SEGMENT_CASES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_short_csr_bags(mode: str, with_psw: bool, dtype: torch.dtype, dim: int, pooling: int,
                        gen: torch.Generator, segments_at_any_batch: None) -> None:
    """embedding_bag_forward_segmented: bags of random length (empty ones included, so segments
    start, end and hold empty bags), an odd batch (the last segment is partial), both offset
    layouts, int32 and int64 indices, with and without a padding row; the launcher must really
    pick that kernel."""
    rows = 50  # small table: the padding row is frequent
    weight = random_table(rows, dim, dtype, gen)
    for layout, index_dtype, padding_idx in (("csr", torch.int64, None), ("csr_last", torch.int32, 7)):
        bags = make_bags(layout, 1001, pooling, rows, index_dtype, gen)
        psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
        check_bag(bags, weight, mode, psw, padding_idx)
    _check_segmented_plan_used()


def test_short_csr_bags_max_backward(gen: torch.Generator, segments_at_any_batch: None) -> None:
    """Max mode under autograd writes the winning rows (argmax) from the segmented kernel too."""
    weight = random_table(300, 128, torch.float32, gen)
    bags = make_bags("csr_last", 333, 2, 300, torch.int64, gen)
    grad_out = torch.randn(333, 128, generator=gen, device="cuda")
    ours_w, _ = _bag_grad(ours_bag, bags, weight, "max", grad_out, None, None)
    ref_w, _ = _bag_grad(torch_bag, bags, weight, "max", grad_out, None, None)
    torch.testing.assert_close(ours_w, ref_w, rtol=1e-5, atol=1e-5)
    _check_segmented_plan_used()


PERSISTENT_CASES = [  # (dtype, dim, pooling): bags of at most PERSISTENT_MAX_GROUP_ROWS rows per lane group
    (torch.float32, 128, 12), (torch.bfloat16, 128, 40), (torch.float16, 192, 16), (torch.float32, 32, 40),
    (torch.float32, 1000, 10)]


def _bags_per_team(k: int) -> int:
    """A batch of about ``k`` bags per resident team of the persistent variants (2 blocks of 8
    teams per SM), plus a few: the last round leaves some teams idle."""
    return k * torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count * 16 + 5


def _persistent_plans(batch: int) -> list[object]:
    """The general kernel's persistent plans used so far whose grid leaves each team several of
    ``batch`` bags (so the tests really walk from bag to bag)."""
    from reference_kernels import launch

    return [plan for plan, grid in launch.planned_launches()
            if plan.entry == "embedding_bag_forward" and plan.resident_waves is not None
            and grid * launch.BLOCK // plan.define("TEAM") < batch * plan.col_tiles // 2]


POS32_CASES = [  # (dtype, dim, pooling, batch): the general kernel's picks that changes 43-44 moved to 3-4
    # blocks/SM (those of d128, d64 and d32 with per-sample weights need more bags than 2 blocks/SM hold teams)
    (torch.float32, 128, 20, 2500), (torch.float32, 192, 32, 700), (torch.bfloat16, 128, 40, 300),
    (torch.float32, 32, 64, 500), (torch.float32, 64, 20, 2500), (torch.float32, 64, 64, 2500),
    (torch.float32, 32, 64, 2500)]


@pytest.mark.parametrize("pos32", [True, False], ids=["pos32", "pos64"])
@pytest.mark.parametrize("dtype,dim,pooling,batch", POS32_CASES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_general_kernel_with_32_and_64_bit_positions(mode: str, with_psw: bool, dtype: torch.dtype, dim: int,
                                                     pooling: int, batch: int, pos32: bool, gen: torch.Generator,
                                                     tune: Callable[..., None]) -> None:
    """The general kernel with POS32 (positions, bags and rows in 32-bit registers; d128 and d192
    float32 at 4 blocks per SM, d64 and d32 at 3-4, change 44) and without it (calls past
    POS32_LIMIT), fixed and CSR layouts
    with empty bags, a padding row, a table-batched call; the plan must be the one asked for."""
    from reference_kernels import launch
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    launch.clear_plans()  # this test's plans only
    if not pos32:
        tune(pos32_limit=0)
    weight = random_table(3000, dim, dtype, gen)
    for layout, padding_idx in (("fixed", None), ("csr_last", 5)):
        bags = make_bags(layout, batch, pooling, 3000, torch.int64, gen)
        psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
        check_bag(bags, weight, mode, psw, padding_idx)
    tbe = TableBatchedEmbeddingBag([700, 3000], dim, mode, dtype, "cuda")
    check_table_batched(tbe, [make_bags("csr_last", batch, pooling, r, torch.int64, gen) for r in (700, 3000)],
                        mode, dtype, with_psw, gen)
    used = {bool(plan.define("POS32")) for plan, _ in launch.planned_launches()
            if plan.entry == "embedding_bag_forward"}
    assert pos32 in used and (pos32 or used == {False}), used


@pytest.mark.parametrize("dtype,dim,pooling", PERSISTENT_CASES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_persistent_teams_pool_several_bags(mode: str, with_psw: bool, dtype: torch.dtype, dim: int, pooling: int,
                                            gen: torch.Generator, tune: Callable[..., None]) -> None:
    """The general kernel with teams striding over the bags (PERSISTENT): a batch of several
    bags per resident team, so each team loads its next bag's bounds and indices while pooling
    this one; CSR lengths 0..2*pooling put empty bags anywhere in a team's walk (the prefetch
    must skip them), both offset layouts and the fixed one, int32 and int64 indices, a padding
    row; the launcher must really pick the persistent variant."""
    from reference_kernels import launch

    # changes 48, 50 and 57 give these one team per bag (test_short_lean_bags, wide_16bit_fewer_rows,
    # wide_one_row)
    tune(short_lean=False, narrow_one_row_max_avg=32, wide_16bit_fewer_rows=False, wide_one_row=False)
    launch.clear_plans()
    rows = 500
    batch = _bags_per_team(8 if dim < 1000 else 4)  # dim 1000: two column tiles, 8 units per team
    weight = random_table(rows, dim, dtype, gen)
    for layout, index_dtype, padding_idx in (("fixed", torch.int64, None), ("csr", torch.int64, None),
                                             ("csr_last", torch.int32, 7)):
        bags = make_bags(layout, batch, pooling, rows, index_dtype, gen)
        psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
        check_bag(bags, weight, mode, psw, padding_idx)
    assert _persistent_plans(batch), "the persistent general kernel was not used, or not over several bags per team"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False)])
def test_short_lean_bags(mode: str, with_psw: bool, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Change 48 (short_lean): d128 bags of up to 24 rows, one team per bag in lean rows at 4-6
    blocks per SM, in a call of many bags: fixed and CSR layouts with empty bags and a padding
    row, int32 and int64 indices, and a DCNv2-like table-batched call (bags of 1-20 rows); the
    rule must have made the pick (16-bit rows with per-sample weights too since change 52)."""
    from reference_kernels import launch
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    launch.clear_plans()
    batch, rows = 3000, 2000
    weight = random_table(rows, 128, dtype, gen)
    for layout, index_dtype, padding_idx, pooling in (("fixed", torch.int64, None, 16), ("csr", torch.int64, None, 8),
                                                      ("csr_last", torch.int32, 7, 20)):
        bags = make_bags(layout, batch, pooling, rows, index_dtype, gen)
        psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
        check_bag(bags, weight, mode, psw, padding_idx)
    tables = [300, rows, 40, 5000]
    tbe = TableBatchedEmbeddingBag(tables, 128, mode, dtype, "cuda")
    check_table_batched(tbe, [make_bags("csr_last", batch, p, r, torch.int64, gen)
                              for r, p in zip(tables, [1, 3, 20, 8], strict=False)], mode, dtype, with_psw, gen)
    short = [plan for plan, _ in launch.planned_launches() if any(w.startswith("short_lean") for w in plan.why)]
    assert short, "the short_lean rule made none of the picks"


def test_persistent_teams_max_backward_and_table_batched(gen: torch.Generator) -> None:
    """The persistent variant that writes argmax (max under autograd), and a table-batched call
    (each bag's table, its first row and its output slot worked out anew at every bag)."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    batch = _bags_per_team(8)
    weight = random_table(400, 128, torch.float32, gen)
    bags = make_bags("csr_last", batch, 12, 400, torch.int64, gen)
    grad_out = torch.randn(batch, 128, generator=gen, device="cuda")
    ours_w, _ = _bag_grad(ours_bag, bags, weight, "max", grad_out, None, None)
    # a row wins ~85 bags per column here: its gradient is a long float32 sum, checked against
    # float64 within the summation bound (float64 keeps float32's winners: the values are exact)
    ref_w, _ = _bag_grad(torch_bag, bags, weight.double(), "max", grad_out.double(), None, None)
    abs_w, _ = _bag_grad(torch_bag, bags, weight.double(), "max", grad_out.double().abs(), None, None)
    occurrences = int(torch.bincount(bags.input.view(-1), minlength=400).max())
    assert_within(ours_w, ref_w, pooled_tolerance(ref_w, abs_w, occurrences, torch.float32), "grad weight (max)")

    rows, pooling = [300, 1000, 50], [12, 20, 16]
    tbe = TableBatchedEmbeddingBag(rows, 128, "sum", torch.float32, "cuda")
    per_table = [torch.randint(0, r, (batch * p,), generator=gen, device="cuda")
                 for r, p in zip(rows, pooling, strict=False)]
    lengths = torch.tensor([p for p in pooling for _ in range(batch)], device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    with torch.no_grad():
        out = tbe(torch.cat(per_table), offsets)
        expected = torch.cat([F.embedding_bag(i.view(batch, p), tbe.table(t), mode="sum")
                              for t, (i, p) in enumerate(zip(per_table, pooling, strict=False))], dim=1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)
    assert _persistent_plans(batch * len(rows)), "the persistent general kernel was not used"


def test_all_bags_empty_and_trailing_empty(gen: torch.Generator) -> None:
    weight = random_table(10, 16, torch.float32, gen)
    idx = torch.tensor([1, 2, 3], device="cuda")
    for offsets, last in [([0, 3, 3, 3], False), ([0, 0, 3, 3], True), ([0, 3, 3], True)]:
        off = torch.tensor(offsets, device="cuda")
        for mode in ("sum", "mean", "max"):
            ours = rk.embedding_bag(idx, weight, off, mode=mode, include_last_offset=last)
            expected = F.embedding_bag(idx, weight, off, mode=mode, include_last_offset=last)
            torch.testing.assert_close(ours, expected, rtol=1e-6, atol=1e-6)
    empty = torch.empty(0, dtype=torch.int64, device="cuda")
    ours = rk.embedding_bag(empty, weight, torch.zeros(4, dtype=torch.int64, device="cuda"), mode="sum")
    assert torch.equal(ours, torch.zeros(4, 16, device="cuda"))


@pytest.mark.parametrize("shape", [(1,), (257,), (300, 1), (7, 13)], ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding_exact(dtype: torch.dtype, index_dtype: torch.dtype, shape: tuple[int, ...],
                         gen: torch.Generator) -> None:
    weight = random_table(999, 128, dtype, gen)
    idx = torch.randint(0, 999, shape, generator=gen, device="cuda").to(index_dtype)
    idx.view(-1)[0] = 998
    ours = rk.embedding(idx, weight)
    assert torch.equal(ours, F.embedding(idx, weight))


@pytest.mark.parametrize("dim", [1, 3, 4, 5, 127, 128, 129, 256, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_embedding_dims(dtype: torch.dtype, dim: int, gen: torch.Generator) -> None:
    weight = random_table(64, dim, dtype, gen)
    idx = torch.randint(0, 64, (77,), generator=gen, device="cuda")
    assert torch.equal(rk.embedding(idx, weight, padding_idx=3), F.embedding(idx, weight, padding_idx=3))


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def _gather_kernels_used(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The gather entries the launcher asks for from now on (a spy on get_function)."""
    from reference_kernels import launch, nvrtc

    names: list[str] = []
    real = nvrtc.get_function

    def spy(filename: str, name: str, defines: dict, device: int) -> object:
        if filename == "embedding_gather.cu":
            names.append(name)
        return real(filename, name, defines, device)

    monkeypatch.setattr(launch.nvrtc, "get_function", spy)
    launch.clear_plans()  # compiled functions are kept with their plans: ask afresh
    return names


@pytest.mark.parametrize("path", ["bulk", "register"])
@pytest.mark.parametrize("dim", [128, 1000])  # 1000 float32: two column tiles per row (register path)
def test_embedding_strides_past_a_capped_grid(dim: int, path: str, gen: torch.Generator,
                                              monkeypatch: pytest.MonkeyPatch, tune: Callable[..., None]) -> None:
    """The launcher gives every team (warp) one step; with the grid capped, they must stride,
    through both stages of the bulk path (the output is poisoned, so a row no team reached
    fails)."""
    if path == "bulk" and not _hopper():
        pytest.skip("the bulk-copy gather needs sm_90")
    if path == "register":
        tune(bulk_min_arch=10**6)
    tune(max_grid=3)
    used = _gather_kernels_used(monkeypatch)
    weight = random_table(4000, dim, torch.float32, gen)
    idx = torch.randint(0, 4000, (5001,), generator=gen, device="cuda")
    assert torch.equal(rk.embedding(idx, weight), F.embedding(idx, weight))
    assert used == ["embedding_gather_bulk" if path == "bulk" else "embedding_gather"]


@pytest.mark.skipif(not _hopper(), reason="the bulk-copy gather needs sm_90")
@pytest.mark.parametrize("steps_per_warp", [0, 10**9], ids=["one-step-per-warp", "one-wave"])
@pytest.mark.parametrize("dtype, dim", [(torch.float32, 32), (torch.float32, 36), (torch.bfloat16, 128),
                                        (torch.float32, 128), (torch.float16, 1000), (torch.float32, 1024)],
                         ids=["128B", "144B", "256B", "512B", "2000B", "4096B"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_bulk_gather_rows_stages_and_grids(dtype: torch.dtype, dim: int, index_dtype: torch.dtype,
                                           steps_per_warp: int, gen: torch.Generator,
                                           monkeypatch: pytest.MonkeyPatch, tune: Callable[..., None]) -> None:
    """Every row size the bulk path takes (32 rows per stage down to 1), partial last stages
    and fewer rows than one stage, under both grid policies; exact against torch. Rows under
    BULK_GATHER_MIN_ROW_BYTES (the launcher's choice for the gather) are let in here: the
    one-row CSR path copies them with the same stages."""
    tune(bulk_max_steps_per_warp=steps_per_warp, bulk_gather_min_row_bytes=0)
    used = _gather_kernels_used(monkeypatch)
    weight = random_table(3001, dim, dtype, gen)
    for n in (1, 7, 33, 1001, 70001):
        idx = torch.randint(0, 3001, (n,), generator=gen, device="cuda").to(index_dtype)
        idx[-1] = 3000
        assert torch.equal(rk.embedding(idx, weight), F.embedding(idx, weight)), n
    assert set(used) == {"embedding_gather_bulk"}


@pytest.mark.parametrize("path", ["bulk", "register"])
def test_gather_gives_zeros_for_negative_indices_unchecked(path: str, gen: torch.Generator,
                                                           tune: Callable[..., None]) -> None:
    """With the index check off, a negative index gives a row of zeros (over the poisoned
    output) and disturbs no other row of its stage or step."""
    if path == "bulk" and not _hopper():
        pytest.skip("the bulk-copy gather needs sm_90")
    if path == "register":
        tune(bulk_min_arch=10**6)
    weight = random_table(500, 128, torch.float32, gen)
    idx = torch.randint(0, 500, (1000,), generator=gen, device="cuda")
    idx[::7] = -1
    out = rk.embedding(idx, weight, check_indices=False)
    valid = idx >= 0
    assert torch.equal(out[valid], weight[idx[valid]])
    assert torch.equal(out[~valid], torch.zeros_like(out[~valid]))


@pytest.mark.skipif(not _hopper(), reason="the bulk-copy gather needs sm_90")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_one_row_bags_take_the_bulk_gather(mode: str, dtype: torch.dtype, gen: torch.Generator,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """[B, 1] bags without per-sample weights, padding row or argmax are their row in every
    mode: the launcher moves them with the bulk gather, bit for bit torch's result; with any
    of those three the bag kernels run instead."""
    used = _gather_kernels_used(monkeypatch)
    weight = random_table(700, 128, dtype, gen)
    idx = torch.randint(0, 700, (3001, 1), generator=gen, device="cuda")
    with torch.no_grad():
        assert torch.equal(rk.embedding_bag(idx, weight, mode=mode), F.embedding_bag(idx, weight, mode=mode))
    assert used == ["embedding_gather_bulk"]
    used.clear()
    with torch.no_grad():
        ours = rk.embedding_bag(idx, weight, mode=mode, padding_idx=3)
        assert torch.equal(ours, F.embedding_bag(idx, weight, mode=mode, padding_idx=3))
        if mode == "sum":
            psw = torch.rand(idx.shape, generator=gen, device="cuda").to(dtype)
            ours = rk.embedding_bag(idx, weight, mode=mode, per_sample_weights=psw)
            torch.testing.assert_close(ours, F.embedding_bag(idx, weight, mode=mode, per_sample_weights=psw))
    if mode == "max":
        leaf = weight.clone().requires_grad_(True)
        rk.embedding_bag(idx, leaf, mode="max").sum().backward()  # needs the argmax
    assert used == []


def one_row_csr_bags(batch: int, rows: int, index_dtype: torch.dtype, layout: str, mixed: bool,
                     gen: torch.Generator) -> Bags:
    """CSR bags with as many indices as bags: each holds one row, or (mixed) the lengths are
    shuffled so that empty bags and bags of 2-4 rows occur while the total stays ``batch``."""
    lengths = torch.ones(batch, dtype=torch.int64, device="cuda")
    if mixed:
        for _ in range(batch // 3):
            i, j = (int(v) for v in torch.randint(0, batch, (2,), generator=gen, device="cuda"))
            if lengths[i] > 0 and lengths[j] < 4:
                lengths[i] -= 1
                lengths[j] += 1
        lengths[0], lengths[1] = 0, lengths[1] + lengths[0]  # the first bag empty, the total kept
    idx = torch.randint(0, rows, (batch,), generator=gen, device="cuda")
    idx[0], idx[-1] = 0, rows - 1
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    if layout == "csr":
        offsets = offsets[:-1]
    return Bags(idx.to(index_dtype), offsets.to(index_dtype), layout == "csr_last", int(lengths.max()))


@pytest.mark.skipif(not _hopper(), reason="the bulk-copy path needs sm_90")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_one_row_csr_bags_take_the_bulk_path(mode: str, dtype: torch.dtype, gen: torch.Generator,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """CSR bags as many as their indices go to embedding_bag_forward_bulk: bags of one row are
    their row bit for bit; in mixed lengths the empty and longer bags (and the padding row)
    are pooled by the warp, as torch pools them. Both offset layouts, int32 and int64 indices.
    With per-sample weights, argmax, more indices than bags, or fewer warp steps than SMs (a
    small batch) the bag kernels run instead."""
    from reference_kernels import launch

    used = _gather_kernels_used(monkeypatch)
    weight = random_table(700, 128, dtype, gen)
    for layout, index_dtype in (("csr", torch.int64), ("csr_last", torch.int32)):
        bags = one_row_csr_bags(3001, 700, index_dtype, layout, False, gen)
        with torch.no_grad():
            assert torch.equal(ours_bag(bags, weight, mode, None, None), torch_bag(bags, weight, mode, None, None))
        for padding_idx in (None, int(bags.input[5])):
            # the spy sees a kernel when a plan is made: a fresh plan per call, so each of the six
            # calls shows its path (the mixed-length bags share the one-row bags' plan otherwise)
            launch.clear_plans()
            with torch.no_grad():
                check_bag(one_row_csr_bags(3001, 700, index_dtype, layout, True, gen), weight, mode, None,
                          padding_idx)
    assert used == ["embedding_bag_forward_bulk"] * 6
    used.clear()
    bags = one_row_csr_bags(3001, 700, torch.int64, "csr", False, gen)
    with torch.no_grad():
        if mode == "sum":
            psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype)
            check_bag(bags, weight, mode, psw)
        longer = Bags(torch.cat([bags.input, bags.input[:1]]), bags.offsets, False, 2)  # last bag: 2 rows
        check_bag(longer, weight, mode)
        small = one_row_csr_bags(1024, 700, torch.int64, "csr", False, gen)  # 32 steps of 32 rows of 128 B
        check_bag(small, random_table(700, 32, torch.float32, gen), mode)
    if mode == "max":
        leaf = weight.clone().requires_grad_(True)
        ours_bag(bags, leaf, "max", None, None).sum().backward()  # needs the argmax
    assert used == []


@pytest.mark.skipif(not _hopper(), reason="the bulk-copy path needs sm_90")
@pytest.mark.parametrize("steps_per_warp", [0, 10**9], ids=["one-step-per-warp", "one-wave"])
@pytest.mark.parametrize("dtype, dim", [(torch.float32, 32), (torch.bfloat16, 128), (torch.float16, 1000),
                                        (torch.float32, 1024)], ids=["128B", "256B", "2000B", "4096B"])
@pytest.mark.parametrize("mode", ["sum", "max"])
def test_one_row_csr_bags_row_sizes_and_grids(mode: str, dtype: torch.dtype, dim: int, steps_per_warp: int,
                                              gen: torch.Generator, monkeypatch: pytest.MonkeyPatch,
                                              tune: Callable[..., None]) -> None:
    """The bulk bag path at every stage shape (32 bags per stage down to 1; rows of 4 KB are
    pooled by lanes that each take eight vectors), partial last stages, both grid policies."""
    tune(bulk_max_steps_per_warp=steps_per_warp, bulk_bags_min_steps_per_sm=0)  # small batches too (same code)
    used = _gather_kernels_used(monkeypatch)
    weight = random_table(3001, dim, dtype, gen)
    for batch in (1, 7, 33, 5001):
        bags = one_row_csr_bags(batch, 3001, torch.int64, "csr_last", batch > 1, gen)
        with torch.no_grad():
            check_bag(bags, weight, mode)
    assert set(used) == {"embedding_bag_forward_bulk"}


@pytest.mark.parametrize("dtype, dim", [(torch.float32, 32), (torch.bfloat16, 64)], ids=["f32", "bf16"])
def test_gathers_of_128_byte_rows_take_the_register_gather(dtype: torch.dtype, dim: int, gen: torch.Generator,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows under BULK_GATHER_MIN_ROW_BYTES keep the register gather (it reads hot rows from
    the L1, bulk copies do not), for embedding and for [B, 1] bags; exact against torch."""
    used = _gather_kernels_used(monkeypatch)
    weight = random_table(1000, dim, dtype, gen)
    idx = torch.randint(0, 1000, (5000,), generator=gen, device="cuda")
    assert torch.equal(rk.embedding(idx, weight), F.embedding(idx, weight))
    with torch.no_grad():
        assert torch.equal(rk.embedding_bag(idx.view(-1, 1), weight, mode="sum"),
                           F.embedding_bag(idx.view(-1, 1), weight, mode="sum"))
    assert used == ["embedding_gather"]


@pytest.mark.parametrize("aligned", [True, False])
def test_unaligned_table_takes_the_register_gather(aligned: bool, gen: torch.Generator,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A table view that starts 4 bytes into its storage cannot use bulk copies (16-byte
    alignment); the launcher falls back to the register gather, with the same result."""
    used = _gather_kernels_used(monkeypatch)
    storage = random_table(301, 129, torch.float32, gen)
    weight = storage.view(-1)[1:1 + 300 * 128].view(300, 128) if not aligned else storage[:, :128].contiguous()
    idx = torch.randint(0, 300, (999,), generator=gen, device="cuda")
    assert torch.equal(rk.embedding(idx, weight), F.embedding(idx, weight))
    expected = "embedding_gather_bulk" if aligned and _hopper() else "embedding_gather"
    assert used == [expected]


def _grad_bound(ref_fn, ours_grad: torch.Tensor, ref_grad: torch.Tensor, terms: int, dtype: torch.dtype,
                what: str) -> None:
    abs_grad = ref_fn()
    assert_within(ours_grad, ref_grad, pooled_tolerance(ref_grad, abs_grad, terms, dtype), what)


def _bag_grad(fn, bags: Bags, weight: torch.Tensor, mode: str, grad_out: torch.Tensor,
              psw: torch.Tensor | None, padding_idx: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    w = weight.detach().clone().requires_grad_(True)
    p = None if psw is None else psw.detach().clone().requires_grad_(True)
    out = fn(bags, w, mode, p, padding_idx)
    out.backward(grad_out)
    return w.grad, None if p is None else p.grad


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False)])
def test_backward(mode: str, with_psw: bool, dtype: torch.dtype, layout: str, gen: torch.Generator) -> None:
    rows = 200  # small table: rows are hit many times
    weight = random_table(rows, 96, dtype, gen)
    bags = make_bags(layout, 80, 15, rows, torch.int64, gen)
    psw = torch.rand(bags.input.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
    num_bags = 80
    grad_out = torch.randn(num_bags, 96, generator=gen, device="cuda").to(dtype)
    ours_w, ours_p = _bag_grad(ours_bag, bags, weight, mode, grad_out, psw, 7)
    again_w, _ = _bag_grad(ours_bag, bags, weight, mode, grad_out, psw, 7)
    assert torch.equal(ours_w, again_w), "the weight gradient must be bit-reproducible"
    psw64 = None if psw is None else psw.double()
    ref_w, ref_p = _bag_grad(torch_bag, bags, weight.double(), mode, grad_out.double(), psw64, 7)
    occurrences = int(torch.bincount(bags.input.view(-1), minlength=rows).max())
    abs_w, _ = _bag_grad(torch_bag, bags, weight.double(), mode, grad_out.double().abs(),
                         None if psw64 is None else psw64.abs(), 7)
    assert ours_w.dtype == dtype
    assert_within(ours_w, ref_w, pooled_tolerance(ref_w, abs_w, occurrences, dtype), "grad weight")
    if with_psw:  # grad_psw[p] = <grad_out[bag(p)], weight[idx(p)]>: a 96-term dot product
        rows = weight.double().abs()[bags.input.view(-1)]
        abs_p = (rows * grad_out.double().abs()[bag_of(bags)]).sum(1)
        keep = bags.input.view(-1) != 7
        tol = pooled_tolerance(ref_p.view(-1), abs_p * keep, 96, dtype)
        assert_within(ours_p.view(-1), ref_p.view(-1), tol, "grad per_sample_weights")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_backward_hot_rows_cross_chunks(mode: str, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Zipf-like skew: one row takes ~70% of 3000 lookups (runs over many 128-position
    chunks of the sorted order, combined in a second pass), the padding row ~20%."""
    rows, dim, batch, pooling = 300, 40, 100, 30
    weight = random_table(rows, dim, dtype, gen)
    u = torch.rand(batch, pooling, generator=gen, device="cuda")
    idx = torch.randint(0, rows, (batch, pooling), generator=gen, device="cuda")
    idx = torch.where(u < 0.7, 5, torch.where(u < 0.9, 7, idx))
    bags = Bags(idx, None, False, pooling)
    grad_out = torch.randn(batch, dim, generator=gen, device="cuda").to(dtype)
    ours, _ = _bag_grad(ours_bag, bags, weight, mode, grad_out, None, 7)
    again, _ = _bag_grad(ours_bag, bags, weight, mode, grad_out, None, 7)
    assert torch.equal(ours, again), "the weight gradient must be bit-reproducible"
    ref, _ = _bag_grad(torch_bag, bags, weight.double(), mode, grad_out.double(), None, 7)
    abs_ref, _ = _bag_grad(torch_bag, bags, weight.double(), mode, grad_out.double().abs(), None, 7)
    occurrences = int(torch.bincount(idx.view(-1), minlength=rows).max())
    assert occurrences > 4 * 128
    assert_within(ours, ref, pooled_tolerance(ref, abs_ref, occurrences, dtype), "hot-row grad")
    assert torch.equal(ours[7], torch.zeros_like(ours[7]))


@pytest.mark.parametrize("dtype,dim", [(torch.float32, 96), (torch.float16, 3), (torch.bfloat16, 130)], ids=str)
@pytest.mark.parametrize("padding", ["untouched", "touched"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_backward_large_table_few_rows(dtype: torch.dtype, dim: int, padding: str, index_dtype: torch.dtype,
                                       gen: torch.Generator) -> None:
    """Most rows are never looked up: they are zeroed on a second stream while the touched
    rows are computed (the gradient starts as NaN here, so a missed row shows). Row count not
    a multiple of 32, rows of 6 bytes (2-byte fill words) to 520; run on a caller's stream;
    int32 and int64 indices (the bitmap kernel also writes the sort keys)."""
    rows = 100_003
    weight = random_table(rows, dim, dtype, gen)
    idx = torch.randint(0, rows, (64, 5), generator=gen, device="cuda", dtype=index_dtype)
    idx[0, 0] = rows - 1
    if padding == "touched":
        pad = int(idx[1, 1])
    else:
        pad = rows - 2
        idx[idx == pad] = 0
    grad_out = torch.randn(64, dim, generator=gen, device="cuda").to(dtype)
    bags = Bags(idx, None, False, 5)
    caller = torch.cuda.Stream()
    caller.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(caller):
        ours, _ = _bag_grad(ours_bag, bags, weight, "sum", grad_out, None, pad)
        again, _ = _bag_grad(ours_bag, bags, weight, "sum", grad_out, None, pad)
    torch.cuda.current_stream().wait_stream(caller)
    assert torch.equal(ours, again)
    ref, _ = _bag_grad(torch_bag, bags, weight.double(), "sum", grad_out.double(), None, pad)
    abs_ref, _ = _bag_grad(torch_bag, bags, weight.double(), "sum", grad_out.double().abs(), None, pad)
    occurrences = int(torch.bincount(idx.view(-1), minlength=rows).max())
    assert_within(ours, ref, pooled_tolerance(ref, abs_ref, occurrences, dtype), "sparse grad")
    looked_up = torch.zeros(rows, dtype=torch.bool, device="cuda")
    looked_up[idx.view(-1)] = True
    looked_up[pad] = False
    assert int((ours[~looked_up] != 0).sum()) == 0, "rows nobody looked up (and the padding row) must be zero"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", [150, 100_003], ids=["memset-path", "overlapped-path"])
def test_mean_backward_without_padding_row(rows: int, dtype: torch.dtype, gen: torch.Generator) -> None:
    """Fixed-size bags and no padding row: the mean's 1 / L is one scalar for every lookup (no
    per-bag counts), on both the memset path (many lookups per row, runs crossing chunks) and
    the overlapped zero fill (few lookups per row)."""
    weight = random_table(rows, 72, dtype, gen)
    idx = torch.randint(0, rows, (300, 17), generator=gen, device="cuda")
    bags = Bags(idx, None, False, 17)
    grad_out = torch.randn(300, 72, generator=gen, device="cuda").to(dtype)
    ours, _ = _bag_grad(ours_bag, bags, weight, "mean", grad_out, None, None)
    again, _ = _bag_grad(ours_bag, bags, weight, "mean", grad_out, None, None)
    assert torch.equal(ours, again), "the weight gradient must be bit-reproducible"
    ref, _ = _bag_grad(torch_bag, bags, weight.double(), "mean", grad_out.double(), None, None)
    abs_ref, _ = _bag_grad(torch_bag, bags, weight.double(), "mean", grad_out.double().abs(), None, None)
    occurrences = int(torch.bincount(idx.view(-1), minlength=rows).max())
    assert_within(ours, ref, pooled_tolerance(ref, abs_ref, occurrences + 1, dtype), "mean grad")
    untouched = torch.ones(rows, dtype=torch.bool, device="cuda")
    untouched[idx.view(-1)] = False
    assert int((ours[untouched] != 0).sum()) == 0


def test_backward_under_cuda_graph_capture(gen: torch.Generator) -> None:
    """The side stream forks from and joins the capturing stream, so the backward can be
    captured and replayed; replays give the eager gradient bit for bit."""
    weight = random_table(5000, 64, torch.float32, gen).requires_grad_(True)
    idx = torch.randint(0, 5000, (32, 6), generator=gen, device="cuda")
    grad_out = torch.randn(32, 64, generator=gen, device="cuda")
    eager = torch.autograd.grad(rk.embedding_bag(idx, weight), weight, grad_out)[0]
    graph = torch.cuda.CUDAGraph()
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):  # warm-up outside capture: compiles, allocates
        torch.autograd.grad(rk.embedding_bag(idx, weight, check_indices=False), weight, grad_out)
    torch.cuda.current_stream().wait_stream(warm)
    with torch.cuda.graph(graph):
        captured = torch.autograd.grad(rk.embedding_bag(idx, weight, check_indices=False), weight, grad_out)[0]
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_max_backward(layout: str, gen: torch.Generator) -> None:
    weight = random_table(300, 64, torch.float32, gen)
    bags = make_bags(layout, 40, 10, 300, torch.int64, gen)
    grad_out = torch.randn(40, 64, generator=gen, device="cuda")
    ours_w, _ = _bag_grad(ours_bag, bags, weight, "max", grad_out, None, None)
    ref_w, _ = _bag_grad(torch_bag, bags, weight, "max", grad_out, None, None)
    torch.testing.assert_close(ours_w, ref_w, rtol=1e-5, atol=1e-5)


def test_embedding_backward(gen: torch.Generator) -> None:
    weight = random_table(50, 40, torch.float32, gen)
    idx = torch.randint(0, 50, (30, 7), generator=gen, device="cuda")
    grad = torch.randn(30, 7, 40, generator=gen, device="cuda")
    w1 = weight.clone().requires_grad_(True)
    rk.embedding(idx, w1, padding_idx=2).backward(grad)
    w2 = weight.double().requires_grad_(True)
    F.embedding(idx, w2, padding_idx=2).backward(grad.double())
    w3 = weight.double().requires_grad_(True)
    F.embedding(idx, w3, padding_idx=2).backward(grad.double().abs())
    occurrences = int(torch.bincount(idx.view(-1)).max())
    assert_within(w1.grad, w2.grad, pooled_tolerance(w2.grad, w3.grad, occurrences, torch.float32), "grad")


def test_index_check_raises(gen: torch.Generator) -> None:
    """check_indices=True (the synchronous mode) raises at the call; the messages."""
    weight = random_table(100, 16, torch.float32, gen)
    idx = torch.randint(0, 100, (20, 5), generator=gen, device="cuda")
    idx[3, 2] = 100
    with pytest.raises(rk.EmbeddingIndexError, match="index 100 at position 17"):
        rk.embedding_bag(idx, weight, check_indices=True)
    idx[3, 2] = -1
    with pytest.raises(rk.EmbeddingIndexError, match="index -1"):
        rk.embedding(idx, weight, check_indices=True)
    flat = torch.randint(0, 100, (10,), device="cuda")
    with pytest.raises(rk.EmbeddingIndexError, match="offsets are invalid at bag 1"):
        rk.embedding_bag(flat, weight, torch.tensor([0, 6, 4], device="cuda"), check_indices=True)
    with pytest.raises(rk.EmbeddingIndexError, match="offsets are invalid"):
        rk.embedding_bag(flat, weight, torch.tensor([0, 4, 11], device="cuda"), include_last_offset=True,
                         check_indices=True)


def test_module_drop_in(gen: torch.Generator) -> None:
    ref = torch.nn.EmbeddingBag(500, 64, mode="sum", padding_idx=0).cuda()
    ours = rk.EmbeddingBag(500, 64, mode="sum", padding_idx=0).cuda()
    ours.load_state_dict(ref.state_dict())
    idx = torch.randint(0, 500, (32, 9), generator=gen, device="cuda")
    torch.testing.assert_close(ours(idx), ref(idx), rtol=1e-5, atol=1e-5)
    pre = rk.EmbeddingBag.from_pretrained(ref.weight.detach(), mode="max")
    assert isinstance(pre, rk.EmbeddingBag)
    assert torch.equal(pre(idx), F.embedding_bag(idx, ref.weight.detach(), mode="max"))


def test_torch_compile(gen: torch.Generator) -> None:
    weight = random_table(400, 64, torch.float32, gen).requires_grad_(True)
    bags = make_bags("csr", 32, 8, 400, torch.int64, gen)

    def step(w: torch.Tensor) -> torch.Tensor:
        return rk.embedding_bag(bags.input, w, bags.offsets, mode="mean").square().sum()

    compiled = torch.compile(step, fullgraph=True)
    eager_loss = step(weight)
    (eager_grad,) = torch.autograd.grad(eager_loss, weight)
    loss = compiled(weight)
    (grad,) = torch.autograd.grad(loss, weight)
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(grad, eager_grad)
    torch.library.opcheck(torch.ops.reference_kernels.embedding_bag.default,
                          (weight.detach(), bags.input, bags.offsets, None, "sum", -1, False, False))


def test_table_over_2_pow_31_elements(gen: torch.Generator) -> None:
    dim = 128
    rows = 2**31 // dim + 4096  # 2^31 + 524288 elements, 4.3 GB in float16
    weight = torch.empty(rows, dim, dtype=torch.float16, device="cuda")
    weight[-8192:].normal_(generator=gen)
    weight[:8192].normal_(generator=gen)
    high = torch.randint(rows - 8192, rows, (64, 6), generator=gen, device="cuda")
    high[:, 0] = torch.randint(0, 8192, (64,), generator=gen, device="cuda")  # mix both ends
    high[0, 1] = rows - 1
    ref = weight[high].double()  # [64, 6, dim]
    ours = rk.embedding_bag(high, weight, mode="sum")
    tol = pooled_tolerance(ref.sum(1), ref.abs().sum(1), 6, torch.float16)
    assert_within(ours, ref.sum(1), tol, "sum over a >2^31-element table")
    assert torch.equal(rk.embedding_bag(high, weight, mode="max"), ref.max(1).values.to(torch.float16))
    assert torch.equal(rk.embedding(high, weight), weight[high])


def test_compile_and_load_under_one_second(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reference_kernels import index_check, launch, nvrtc

    monkeypatch.setenv("REFERENCE_KERNELS_CACHE", str(tmp_path))
    monkeypatch.setattr(nvrtc, "_FUNCTIONS", {})
    monkeypatch.setattr(index_check, "_FUNCTIONS", {})  # the check's own memo of its compiled variants
    monkeypatch.setattr(nvrtc, "_MODULES", {})
    launch.clear_plans()
    weight = torch.randn(100, 128, device="cuda")
    idx = torch.randint(0, 100, (8, 4), device="cuda")
    nvrtc.STATS.compile_s.clear()
    nvrtc.STATS.load_s.clear()
    rk.embedding_bag(idx, weight, mode="sum")
    rk.embedding(idx, weight)
    torch.cuda.synchronize()
    times = {k: nvrtc.STATS.compile_s[k] + nvrtc.STATS.load_s[k] for k in nvrtc.STATS.compile_s}
    print("compile+load seconds per kernel:", {k: round(v, 3) for k, v in times.items()})
    assert len(times) == 3  # index check, forward, gather
    assert max(times.values()) < 1.0
    assert len(list(tmp_path.glob("*.cubin"))) == 3


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_table_batched(mode: str, gen: torch.Generator) -> None:
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    rows, batch, dim = [50, 7, 300], 16, 64
    tbe = TableBatchedEmbeddingBag(rows, dim, mode, torch.float32, "cuda")
    per_table = [make_bags("csr_last", batch, 5, r, torch.int64, gen) for r in rows]
    indices = torch.cat([b.input for b in per_table])
    starts = [0] + torch.tensor([b.input.numel() for b in per_table]).cumsum(0).tolist()
    offsets = torch.cat([per_table[0].offsets[:1]]
                        + [b.offsets[1:] + s for b, s in zip(per_table, starts, strict=False)])
    out = tbe(indices, offsets)
    assert out.shape == (batch, len(rows) * dim)
    grad = torch.randn(out.shape, generator=gen, device="cuda")
    for t, bags in enumerate(per_table):
        weight = tbe.table(t).detach()
        expected = torch_bag(bags, weight, mode, None, None)
        torch.testing.assert_close(out[:, t * dim:(t + 1) * dim], expected, rtol=1e-5, atol=1e-5)
    if mode == "max":
        return
    (ours_grad,) = torch.autograd.grad(out, tbe.weight, grad)
    for t, bags in enumerate(per_table):
        w = tbe.table(t).detach().clone().requires_grad_(True)
        torch_bag(bags, w, mode, None, None).backward(grad[:, t * dim:(t + 1) * dim])
        start = sum(rows[:t])
        torch.testing.assert_close(ours_grad[start:start + rows[t]], w.grad, rtol=1e-5, atol=1e-5)
    bad = indices.clone()
    bad[starts[1]] = rows[1]  # in range for table 0 and 2, not for table 1
    tbe(bad, offsets)  # the default (deferred) check raises at the next call or here:
    with pytest.raises(rk.EmbeddingIndexError, match="table 1"):
        rk.check_index_errors()


MIXED_TABLES = {  # (rows, pooling, batch, dim) of table-batched calls with short and long bags
    "5 tables": ([3, 1000, 40, 7, 5000], [1, 1, 2, 30, 1], 333, 128),
    # more tables than a team has lanes (8 at dim 32): the teams' table bookkeeping moves on
    "37 tables": ([11 + 97 * t for t in range(37)], [1 + t % 3 if t % 9 else 20 for t in range(37)], 17, 32),
}


@pytest.mark.parametrize("tables", list(MIXED_TABLES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode,with_psw", [("sum", False), ("sum", True), ("mean", False), ("max", False)])
def test_table_batched_mixed_bag_lengths(mode: str, with_psw: bool, dtype: torch.dtype, tables: str,
                                         gen: torch.Generator, segments_at_any_batch: None) -> None:
    """The DLRM-DCNv2 shape in small: tables whose bags hold 1, 2 or 20-60 rows in one launch
    (the segmented kernel: per-table segment sizes, segments never cross tables), odd batches,
    random lengths (0 to twice the table's pooling)."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    rows, pooling, batch, dim = MIXED_TABLES[tables]
    tbe = TableBatchedEmbeddingBag(rows, dim, mode, dtype, "cuda")
    per_table = [make_bags("csr_last", batch, p, r, torch.int64, gen) for r, p in zip(rows, pooling, strict=False)]
    check_table_batched(tbe, per_table, mode, dtype, with_psw, gen)
    _check_segmented_plan_used()


def check_table_batched(tbe: object, per_table: list[Bags], mode: str, dtype: torch.dtype, with_psw: bool,
                        gen: torch.Generator) -> None:
    """One table-batched call over each table's CSR bags, each table's columns against torch."""
    dim = tbe.weight.shape[1]  # type: ignore[attr-defined]
    indices = torch.cat([b.input for b in per_table])
    starts = [0] + torch.tensor([b.input.numel() for b in per_table]).cumsum(0).tolist()
    offsets = torch.cat([per_table[0].offsets[:1]]
                        + [b.offsets[1:] + s for b, s in zip(per_table, starts, strict=False)])
    psw = torch.rand(indices.shape, generator=gen, device="cuda").to(dtype) if with_psw else None
    with torch.no_grad():
        out = tbe(indices, offsets, psw)
    for t, bags in enumerate(per_table):
        weight = tbe.table(t).detach()
        part = None if psw is None else psw[starts[t]:starts[t + 1]]
        got = out[:, t * dim:(t + 1) * dim]
        if mode == "max":
            assert torch.equal(got, torch_bag(bags, weight, mode, None, None))
            continue
        part64 = None if part is None else part.double()
        ref = torch_bag(bags, weight.double(), mode, part64, None)
        abs_ref = torch_bag(bags, weight.double().abs(), mode, None if part64 is None else part64.abs(), None)
        terms = bags.longest + (1 if mode == "mean" else 0)
        assert_within(got, ref, pooled_tolerance(ref, abs_ref, terms, dtype), f"table {t} {mode} {dtype}")
