"""GPU tests of the index check's modes (docs/kernels.md, "Index range check"): deferred (the
default: no host synchronisation, the error surfaces at the next call or at
check_index_errors()), warn (bad indices read row 0, one warning with the count), sync (raises
at once) and ignore; CUDA graph capture of the default path, forward and backward.

Fresh random inputs and a bad index at a random position every run (the seed is printed on
failure); outputs prefilled with NaN.
"""

from __future__ import annotations

import random
import re
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import reference_kernels as rk  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs", "drained_ledger")]


def _bags(gen: torch.Generator, rows: int, batch: int, pooling: int, layout: str,
          dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    if layout == "fixed":
        return torch.randint(0, rows, (batch, pooling), generator=gen, device="cuda", dtype=dtype), None
    lengths = torch.randint(0, 2 * pooling + 1, (batch,), generator=gen, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    idx = torch.randint(0, rows, (int(offsets[-1]),), generator=gen, device="cuda", dtype=dtype)
    return idx, (offsets if layout == "csr_last" else offsets[:-1]).to(dtype)


def _bad_value(rng: random.Random, rows: int) -> int:
    return rng.choice([rows, rows + rng.randrange(1, 1000), -1, -rng.randrange(2, 1000)])


def _plant(idx: torch.Tensor, rng: random.Random, rows: int, count: int) -> list[tuple[int, int]]:
    """Bad values at ``count`` distinct random positions; (position, value), smallest first."""
    positions = sorted(rng.sample(range(idx.numel()), count))
    planted = [(p, _bad_value(rng, rows)) for p in positions]
    flat = idx.view(-1)
    for p, v in planted:
        flat[p] = v
    return planted


def _error(op: str, position: int, value: int, rows: int) -> str:
    return re.escape(f"reference_kernels.{op}: index {value} at position {position} is out of range for an "
                     f"embedding table of {rows} rows (valid: 0..{rows - 1})")


@pytest.fixture
def rng(gen: torch.Generator) -> random.Random:
    return random.Random(gen.initial_seed())


@pytest.mark.parametrize("layout", ["fixed", "csr", "csr_last"])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64], ids=str)
def test_deferred_returns_without_sync_and_raises_at_check(layout: str, index_dtype: torch.dtype,
                                                           gen: torch.Generator, rng: random.Random) -> None:
    rows = rng.randrange(50, 5000)
    weight = torch.randn(rows, 64, generator=gen, device="cuda")
    idx, offsets = _bags(gen, rows, 700, 40, layout, index_dtype)  # ~28K positions: many blocks
    planted = _plant(idx, rng, rows, 3)
    rk.embedding_bag(idx, weight, offsets, mode="sum", include_last_offset=layout == "csr_last")  # compile, ledger
    with pytest.raises(rk.EmbeddingIndexError):
        rk.check_index_errors()
    torch.cuda.set_sync_debug_mode("error")
    try:  # the default path does not synchronise (torch would raise on any sync)
        rk.embedding_bag(idx, weight, offsets, mode="sum", include_last_offset=layout == "csr_last")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    (p, v) = planted[0]
    with pytest.raises(rk.EmbeddingIndexError, match=_error("embedding_bag", p, v, rows) + r" \(2 more"):
        rk.check_index_errors()
    assert rk.check_index_errors() is None  # the ledger was reset
    good = idx.clone()
    good.view(-1)[[q for q, _ in planted]] = 0
    ours = rk.embedding_bag(good, weight, offsets, mode="sum", include_last_offset=layout == "csr_last")
    ref = F.embedding_bag(good.long(), weight, None if offsets is None else offsets.long(), mode="sum",
                          include_last_offset=layout == "csr_last")
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-4)
    assert rk.check_index_errors() is None


def test_deferred_error_surfaces_at_the_next_call(gen: torch.Generator, rng: random.Random) -> None:
    rows = rng.randrange(10, 1000)
    weight = torch.randn(rows, 32, generator=gen, device="cuda")
    idx = torch.randint(0, rows, (rng.randrange(1, 400), 3), generator=gen, device="cuda")
    (p, v), = _plant(idx, rng, rows, 1)
    out = rk.embedding(idx, weight)  # returns: the lookup read row 0 for the bad position
    torch.cuda.synchronize()  # let the check run, so that its flag is set before the next call
    assert torch.equal(out.view(-1, 32)[p], weight[0])
    with pytest.raises(rk.EmbeddingIndexError, match=_error("embedding", p, v, rows)):
        rk.embedding_bag(idx.clamp(0, rows - 1), weight)  # a good call raises the earlier error
    good = idx.clamp(0, rows - 1)
    torch.testing.assert_close(rk.embedding_bag(good, weight), F.embedding_bag(good, weight))
    assert rk.check_index_errors() is None


@pytest.mark.parametrize("offsets_list,include_last,bag", [
    ([0, 6, 4], False, 1), ([0, 4, 11], True, 1), ([-3, 2, 5], False, 0), ([0, 2, 5, 4], True, 2),
    ([0, 12, 3], False, 0), ([0, 3, 3, 10, 11], True, 3)])
def test_deferred_bad_offsets(offsets_list: list[int], include_last: bool, bag: int, gen: torch.Generator) -> None:
    """Bad offsets: the call reads only clamped spans (no fault), the error names the first bad bag."""
    weight = torch.randn(100, 16, generator=gen, device="cuda")
    flat = torch.randint(0, 100, (10,), generator=gen, device="cuda")
    offsets = torch.tensor(offsets_list, device="cuda")
    for mode in ("sum", "mean", "max"):
        rk.embedding_bag(flat, weight, offsets, mode=mode, include_last_offset=include_last)
        with pytest.raises(rk.EmbeddingIndexError, match=f"offsets are invalid at bag {bag}: .* lie in \\[0, 10\\]"):
            rk.check_index_errors()
    torch.testing.assert_close(rk.embedding_bag(flat, weight, torch.tensor([0, 3], device="cuda")),
                               F.embedding_bag(flat, weight, torch.tensor([0, 3], device="cuda")))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["fixed", "csr"])
def test_warn_reads_row_zero_and_warns_once(mode: str, layout: str, gen: torch.Generator,
                                            rng: random.Random) -> None:
    rows = rng.randrange(20, 3000)
    weight = torch.randn(rows, 48, generator=gen, device="cuda").requires_grad_(mode != "max")
    idx, offsets = _bags(gen, rows, 300, 8, layout, torch.int64)
    count = rng.randrange(1, 6)
    planted = _plant(idx, rng, rows, count)
    ours = rk.embedding_bag(idx, weight, offsets, mode=mode, check_indices="warn")
    clamped = idx.clone()
    clamped.view(-1)[[p for p, _ in planted]] = 0
    ref_weight = weight.detach().clone().requires_grad_(mode != "max")
    ref = F.embedding_bag(clamped, ref_weight, offsets, mode=mode)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    if mode != "max":  # the backward reads the same checked copy
        grad = torch.randn_like(ref)
        (ours_grad,) = torch.autograd.grad(ours, weight, grad)
        (ref_grad,) = torch.autograd.grad(ref, ref_weight, grad)
        torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-5, atol=1e-5)
    p, v = planted[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert rk.check_index_errors() is None  # warn mode never raises
        assert rk.check_index_errors() is None
    assert [type(w.message) for w in caught] == [rk.EmbeddingIndexWarning]
    assert str(caught[0].message).startswith(f"reference_kernels: {count} out-of-range indices were read as row 0")
    assert f"index {v} at position {p} " in str(caught[0].message)


def test_warn_surfaces_at_the_next_call(gen: torch.Generator) -> None:
    weight = torch.randn(30, 8, generator=gen, device="cuda")
    idx = torch.randint(0, 30, (5, 4), generator=gen, device="cuda")
    idx[2, 1] = 30
    rk.embedding_bag(idx, weight, check_indices="warn")
    torch.cuda.synchronize()
    with pytest.warns(rk.EmbeddingIndexWarning, match="1 out-of-range indices .* index 30 at position 9 "):
        rk.embedding_bag(idx.clamp(max=29), weight)


@pytest.mark.parametrize("check", [True, "sync"])
def test_sync_raises_at_once(check: object, gen: torch.Generator, rng: random.Random) -> None:
    rows = rng.randrange(10, 500)
    weight = torch.randn(rows, 16, generator=gen, device="cuda")
    idx = torch.randint(0, rows, (rng.randrange(1, 300), 5), generator=gen, device="cuda")
    (p, v), = _plant(idx, rng, rows, 1)
    with pytest.raises(rk.EmbeddingIndexError, match=_error("embedding_bag", p, v, rows)):
        rk.embedding_bag(idx, weight, check_indices=check)
    with pytest.raises(rk.EmbeddingIndexError, match=_error("embedding", p, v, rows)):
        rk.embedding(idx, weight, check_indices=check)
    flat = torch.randint(0, rows, (10,), generator=gen, device="cuda")
    with pytest.raises(rk.EmbeddingIndexError, match="offsets are invalid at bag 1"):
        rk.embedding_bag(flat, weight, torch.tensor([0, 6, 4], device="cuda"), check_indices=check)
    assert rk.check_index_errors() is None  # sync errors are not left in the deferred record


@pytest.mark.parametrize("check", [False, "ignore", "deferred", "warn", "sync"])
def test_good_inputs_equal_torch_in_every_mode(check: object, gen: torch.Generator) -> None:
    weight = torch.randn(400, 40, generator=gen, device="cuda")
    idx, offsets = _bags(gen, 400, 64, 6, "csr", torch.int64)
    torch.testing.assert_close(rk.embedding_bag(idx, weight, offsets, mode="mean", check_indices=check),
                               F.embedding_bag(idx, weight, offsets, mode="mean"))
    bag = rk.EmbeddingBag(400, 40, mode="sum").cuda()
    bag.check_indices = check
    torch.testing.assert_close(bag(idx, offsets), F.embedding_bag(idx, bag.weight, offsets, mode="sum"))
    assert rk.check_index_errors() is None


def test_default_forward_and_backward_capture_in_a_cuda_graph(gen: torch.Generator, rng: random.Random) -> None:
    """The default (deferred) path never synchronises: forward and forward + dense backward are
    captured and replay torch's values; a bad index inside the graph surfaces after replay."""
    rows = rng.randrange(1000, 20000)
    weight = torch.randn(rows, 64, generator=gen, device="cuda").requires_grad_(True)
    idx, offsets = _bags(gen, rows, 256, 20, "csr", torch.int64)
    grad_out = torch.randn(256, 64, generator=gen, device="cuda")
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):  # compiles, creates the ledger, allocates
        torch.autograd.grad(rk.embedding_bag(idx, weight, offsets, mode="sum"), weight, grad_out)
    torch.cuda.current_stream().wait_stream(warm)
    forward, both = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(forward):
        out = rk.embedding_bag(idx, weight.detach(), offsets, mode="sum")
    with torch.cuda.graph(both):
        grad = torch.autograd.grad(rk.embedding_bag(idx, weight, offsets, mode="sum"), weight, grad_out)[0]
    ref_weight = weight.detach().clone().requires_grad_(True)
    ref = F.embedding_bag(idx, ref_weight, offsets, mode="sum")
    (ref_grad,) = torch.autograd.grad(ref, ref_weight, grad_out)
    forward.replay()
    both.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ref.detach(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-4)
    assert rk.check_index_errors() is None
    (p, v), = _plant(idx, rng, rows, 1)  # the captured graph reads idx's memory
    forward.replay()
    with pytest.raises(rk.EmbeddingIndexError, match=_error("embedding_bag", p, v, rows)):
        rk.check_index_errors()


def test_default_eager_forward_and_backward_do_not_synchronise(gen: torch.Generator) -> None:
    """torch raises on any synchronising op in its "error" sync debug mode: functions, modules and
    table-batched lookups, forward and dense backward, in the default mode."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    weight = torch.randn(5000, 32, generator=gen, device="cuda").requires_grad_(True)
    idx = torch.randint(0, 5000, (128, 10), generator=gen, device="cuda")
    bag = rk.EmbeddingBag(5000, 32, mode="mean").cuda()
    grad_out = torch.randn(128, 32, generator=gen, device="cuda")
    csr, offsets = _bags(gen, 5000, 128, 10, "csr", torch.int64)
    tbe = TableBatchedEmbeddingBag([700, 5000], 32, "mean", torch.float32, "cuda")
    tbe_idx, tbe_offsets = _tbe_inputs([700, 5000], 64, gen)
    for watched in (False, True):  # the first round compiles and creates the ledger
        torch.cuda.set_sync_debug_mode("error" if watched else "default")
        try:
            torch.autograd.grad(rk.embedding_bag(idx, weight, mode="sum"), weight, grad_out)
            torch.autograd.grad(rk.embedding_bag(csr, weight, offsets, mode="mean"), weight, grad_out)
            torch.autograd.grad(bag(idx), bag.weight, grad_out)
            torch.autograd.grad(rk.embedding(idx, weight).sum(), weight)
            torch.autograd.grad(tbe(tbe_idx, tbe_offsets).sum(), tbe.weight)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _tbe_inputs(rows: list[int], batch: int, gen: torch.Generator,
                min_len: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = [torch.randint(min_len, 6, (batch,), generator=gen, device="cuda") for _ in rows]
    idx = torch.cat([torch.randint(0, r, (int(n.sum()),), generator=gen, device="cuda")
                     for r, n in zip(rows, lengths, strict=True)])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), torch.cat(lengths).cumsum(0)])
    return idx, offsets


@pytest.mark.parametrize("tables", [3, 100, 4100], ids=lambda t: f"{t}tables")
def test_table_batched_names_the_table(tables: int, gen: torch.Generator, rng: random.Random) -> None:
    """Each index is checked against its own table (spans in shared memory below 4096 tables,
    from torch above); the error names that table; warn mode reads row 0 of it."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    rows = [rng.randrange(1, 60) for _ in range(tables)]
    batch = 4 if tables > 100 else 16
    tbe = TableBatchedEmbeddingBag(rows, 16, "sum", torch.float32, "cuda")
    idx, offsets = _tbe_inputs(rows, batch, gen)
    bounds = offsets[::batch].tolist()
    t = rng.choice([s for s in range(tables) if bounds[s + 1] > bounds[s]])
    p = rng.randrange(bounds[t], bounds[t + 1])
    bad = idx.clone()
    bad[p] = rows[t] + rng.randrange(0, 5)  # may be in range for a larger table: checked against its own
    message = re.escape(f"index {int(bad[p])} at position {p} is out of range for table {t} of {rows[t]} rows")
    with torch.no_grad():
        tbe(bad, offsets)
        with pytest.raises(rk.EmbeddingIndexError, match="TableBatchedEmbeddingBag: " + message):
            rk.check_index_errors()
        tbe.check_indices = "sync"
        with pytest.raises(rk.EmbeddingIndexError, match=message):
            tbe(bad, offsets)
        tbe.check_indices = "warn"
        out = tbe(bad, offsets)
        with pytest.warns(rk.EmbeddingIndexWarning, match=message):
            rk.check_index_errors()
        clamped = bad.clone()
        clamped[p] = 0
        torch.testing.assert_close(out, tbe(clamped, offsets))


def test_table_batched_bad_offsets_stay_inside_each_table(gen: torch.Generator) -> None:
    """Offsets that would let a bag of a small table read another table's positions are clamped
    into its own span: no fault, the error names the first bad bag."""
    from reference_kernels.tbe import TableBatchedEmbeddingBag

    rows = [5, 1000, 3]
    tbe = TableBatchedEmbeddingBag(rows, 8, "sum", torch.float32, "cuda")
    idx, offsets = _tbe_inputs(rows, 4, gen, min_len=1)
    idx[offsets[4]:offsets[8]] = 999  # table 1 only
    bad = offsets.clone()
    bad[1] = offsets[8]  # table 0's first bag would span table 1's 999s
    bad[9] = -2
    for _ in range(2):
        out = tbe(idx, bad)
        torch.cuda.synchronize()
        assert torch.isfinite(out).all()
        with pytest.raises(rk.EmbeddingIndexError, match="offsets are invalid at bag 1"):
            rk.check_index_errors()
        bad[1], bad[4] = offsets[8], offsets[2]  # table 1 now starts before table 0 ends


def test_index_check_op_passes_opcheck(gen: torch.Generator) -> None:
    idx, offsets = _bags(gen, 50, 20, 4, "csr", torch.int64)
    torch.library.opcheck(torch.ops.reference_kernels.index_check.default,
                          (idx, offsets, None, 50, 1, "deferred", "embedding_bag"))
    torch.library.opcheck(torch.ops.reference_kernels.index_check.default,
                          (idx.view(-1, 1), None, None, 50, 1, "warn", "embedding"))


def _expected_copy(idx: torch.Tensor, offsets: torch.Tensor, sizes: list[int] | None,
                   rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The documented contract of the checked copy (docs/kernels.md), in torch ops on the CPU:
    (indices with bad ones as 0, clamped offsets, the bad positions)."""
    idx, offsets = idx.cpu().long(), offsets.cpu().long()
    n = idx.numel()
    clamped = offsets.clamp(0, n)
    if sizes is None:
        bad = (idx < 0) | (idx >= rows)
        return torch.where(bad, 0, idx), clamped, bad
    tables = len(sizes)
    bpt = (offsets.numel() - 1) // tables
    spans = clamped[::bpt].cummax(0).values
    table = (torch.searchsorted(spans[:tables], torch.arange(n), right=True) - 1).clamp(0, tables - 1)
    bad = (idx < 0) | (idx >= torch.tensor(sizes)[table])
    b = torch.arange(offsets.numel())
    t = b // bpt
    inner = torch.minimum(torch.maximum(clamped, spans[t]), spans[(t + 1).clamp(max=tables)])
    return torch.where(bad, 0, idx), torch.where(b % bpt == 0, spans[t], inner), bad


@pytest.mark.parametrize("tables", [0, 5, 300, 4100], ids=lambda t: f"{t}tables")
def test_checked_copy_matches_the_contract(tables: int, gen: torch.Generator, rng: random.Random) -> None:
    """Random indices and offsets, many of them bad: the copy the lookup reads is exactly the
    documented one (bad indices 0, offsets clamped, table-batched into their table's span), and
    the record names the smallest bad position and counts every bad index and bag."""
    from reference_kernels import ops

    n = rng.randrange(1, 40_000)
    sizes = [rng.randrange(1, 100) for _ in range(tables)] if tables else None
    rows = max(sizes) if sizes else rng.randrange(1, 100)
    idx = torch.randint(-3, rows + 3, (n,), generator=gen, device="cuda")
    bags = tables * rng.randrange(1, 8) if tables else rng.randrange(1, 500)
    offsets = torch.randint(-5, n + 5, (bags + 1,), generator=gen, device="cuda").sort().values
    offsets[rng.randrange(0, bags + 1)] = rng.randrange(-5, n + 5)  # out of order somewhere
    table_sizes = torch.tensor(sizes, device="cuda") if sizes else None
    clean, clean_offsets = ops.index_check_impl(idx, offsets, table_sizes, rows, max(1, bags // max(1, tables)),
                                                 "deferred", "TableBatchedEmbeddingBag" if tables else "embedding_bag")
    want_idx, want_off, bad = _expected_copy(idx, offsets, sizes, rows)
    assert clean.dtype == clean_offsets.dtype == torch.int32
    assert torch.equal(clean.cpu().long(), want_idx)
    assert torch.equal(clean_offsets.cpu().long(), want_off)
    o = offsets.cpu().long()
    hi = torch.cat([o[1:], torch.tensor([n])])
    bad_bags = (o < 0) | (o > hi) | (hi > n)
    bad_bags[0] |= bool(o[0] != 0)  # torch's rule: positions before the first offset belong to no bag
    if not bool(bad.any()) and not bool(bad_bags.any()):
        assert rk.check_index_errors() is None
        return
    parts = []
    if bool(bad.any()):
        p = int(bad.nonzero()[0, 0])
        parts.append(re.escape(f"index {int(idx[p])} at position {p} is out of range for "))
    if bool(bad_bags.any()):
        parts.append(re.escape(f"offsets are invalid at bag {int(bad_bags.nonzero()[0, 0])}:"))
    more = int(bad.sum()) + int(bad_bags.sum()) - len(parts)
    if more:
        parts.append(re.escape(f"({more} more bad indices or bags"))
    with pytest.raises(rk.EmbeddingIndexError, match=".*".join(parts)):
        rk.check_index_errors()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_errors_are_per_device(gen: torch.Generator) -> None:
    weights = [torch.randn(20, 8, device=f"cuda:{d}") for d in (0, 1)]
    idx = [torch.randint(0, 20, (6, 3), device=f"cuda:{d}") for d in (0, 1)]
    rk.check_index_errors(1)
    bad = idx[1].clone()
    bad[1, 1] = 20
    rk.embedding_bag(bad, weights[1])
    torch.cuda.synchronize(1)
    rk.embedding_bag(idx[0], weights[0])  # device 0 is clean
    assert rk.check_index_errors(0) is None
    with pytest.raises(rk.EmbeddingIndexError, match="index 20 at position 4 "):
        rk.check_index_errors("cuda:1")


def _outcome(call, mode: str) -> tuple[torch.Tensor | None, str]:  # type: ignore[no-untyped-def]
    """A checked call's output and what its check reported (the error's or warning's text)."""
    try:
        out = call()
    except rk.EmbeddingIndexError as error:
        assert mode == "sync"
        return None, str(error)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            rk.check_index_errors()
        except rk.EmbeddingIndexError as error:
            return out, str(error)
    return out, "; ".join(str(w.message) for w in caught)


def _spoil_offsets(offsets: torch.Tensor, n: int, rng: random.Random) -> None:
    """One or two bad entries: decreasing, past the indices, or negative."""
    for _ in range(rng.randrange(1, 3)):
        k = rng.randrange(offsets.numel())
        offsets[k] = rng.choice([n + rng.randrange(1, 50), -rng.randrange(1, 50), int(offsets[k]) // 2])


@pytest.mark.parametrize("mode", ["deferred", "warn", "sync"])
@pytest.mark.parametrize("case", ["indices", "offsets", "unread", "clean"])
@pytest.mark.parametrize("layout", ["fixed", "csr", "csr_last"])
@pytest.mark.parametrize("shape", ["f32 d128 sum", "f32 d32 mean", "f16 d192 psw", "f32 d64 mean"])
def test_a_lookup_that_checks_its_own_indices_matches_the_pass(mode: str, case: str, layout: str, shape: str,
                                                               gen: torch.Generator, rng: random.Random,
                                                               tune) -> None:  # type: ignore[no-untyped-def]
    """One-table sum/mean calls of the general kernel (in one wave) check their indices inside
    the lookup (CHECK), no pass: the same output (bad indices read as row 0, offsets clamped) and the same report (first
    position and value, first bad bag, counts) as with the pass (fused_index_check off), also for
    positions no bag reads (before the first offset, after the last with include_last_offset)."""
    from reference_kernels import launch

    if layout == "fixed" and case in ("offsets", "unread"):
        pytest.skip("the fixed layout has no offsets")
    dtype_name, dim_name, pooling_mode = shape.split()
    dtype, dim = (torch.float32 if dtype_name == "f32" else torch.float16), int(dim_name[1:])
    rows = rng.randrange(100, 20_000)
    weight = torch.randn(rows, dim, generator=gen, device="cuda").to(dtype)
    idx, offsets = _bags(gen, rows, rng.randrange(200, 3000), 20, layout, rng.choice([torch.int32, torch.int64]))
    if case == "indices":
        _plant(idx, rng, rows, rng.randrange(1, 40))
    elif case == "offsets":
        assert offsets is not None
        _spoil_offsets(offsets, idx.numel(), rng)
    elif case == "unread":  # the first bag starts later, the last (include_last_offset) ends early
        assert offsets is not None
        head = rng.randrange(1, 40)
        idx = torch.cat([torch.full((head,), rows + 7, dtype=idx.dtype, device="cuda"), idx,
                         torch.full((rng.randrange(1, 40),), -3, dtype=idx.dtype, device="cuda")])
        offsets = offsets + head
    psw = (torch.rand(idx.shape, generator=gen, device="cuda").to(dtype) if pooling_mode == "psw" else None)
    bag_mode = "sum" if pooling_mode == "psw" else pooling_mode

    def call() -> torch.Tensor:
        return rk.embedding_bag(idx, weight, offsets, mode=bag_mode, per_sample_weights=psw,
                                include_last_offset=layout == "csr_last", check_indices=mode)

    # narrow rows in one-row teams however few the bags (change 57 gives these few bags warp-wide
    # teams, whose calls of 200-3000 bags take several waves and the pass)
    tune(narrow_min_warps_per_sm=0)
    launch.clear_plans()
    inside, inside_report = _outcome(call, mode)
    checked_plans = [plan for plan, _ in launch.planned_launches() if dict(plan.defines).get("CHECK")]
    assert checked_plans, [plan.why for plan, _ in launch.planned_launches()]
    tune(fused_index_check=False)
    passed, passed_report = _outcome(call, mode)
    assert inside_report == passed_report
    assert (case == "clean") == (inside_report == "")
    if inside is not None:
        assert passed is not None and torch.equal(inside, passed)
