"""GPU tests of the table-batched backward's preparation kernel (lookup_prepare.cu, issue 37's
host work per training step).

* The kernel against the torch operations it replaces (``tbe.tbe_lookups``, and the sort keys
  with the sentinel as the backward's ``_sort_keys`` made them), bit for bit: one table,
  several, many (past the index check's largest table cap), empty bags, positions before the
  first offset and after the last one (in no bag), int32 and int64 indices, sum and mean, the
  sentinel and the dense backward's rows, int64 keys for tables of 2^31 rows or more. Outputs
  poisoned first (a value the kernel fails to write fails the comparison).
* Whole training steps (fused SGD, row-wise Adagrad and Adam, float32, float16 and bfloat16,
  per-sample weights, mean; the sparse gradient; the dense gradient) with the kernel equal, bit for bit, to the same
  steps with the torch operations.

Fresh random inputs every run (the ``gen`` fixture prints its seed).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reference_kernels import launch, optim, tbe  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs", "drained_ledger")]


def random_layout(gen: torch.Generator, tables: int, bags_per_table: int, lead: int, tail: int,
                  dtype: torch.dtype, longest: int = 6,
                  empty: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(indices, offsets, table_rows): T * B bags of random lengths 0..``longest`` (empty bags
    included; each bag also empty with probability ``empty``), ``lead`` positions before the first
    offset and ``tail`` after the last one (in no bag); indices below each table's rows (tables
    of 1..300 rows)."""
    sizes = torch.randint(1, 300, (tables,), generator=gen, device="cuda")
    lengths = torch.randint(0, longest + 1, (tables * bags_per_table,), generator=gen, device="cuda")
    lengths[torch.rand(lengths.shape, generator=gen, device="cuda") < empty] = 0
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]) + lead
    n = int(offsets[-1]) + tail
    draw = torch.rand(n, generator=gen, device="cuda", dtype=torch.float64)
    indices = (draw * int(sizes.min())).long()
    table_rows = torch.cumsum(sizes, 0) - sizes
    return indices.to(dtype), offsets.to(dtype), table_rows


# (tables, bags per table, positions before the first offset, after the last one, longest bag,
# share of bags made empty). The kernel works in tiles of 1,024 positions and stages up to 1,024
# offsets per tile: the last four cases make tiles of a few long bags, of ~1,000 one-position bags
# (staged in several rounds), of more bags than the stage holds (mostly empty: the per-position
# search) and many tiles of either kind.
CASES = {
    "one table": (1, 40, 0, 0, 6, 0.0),
    "three tables": (3, 17, 0, 0, 6, 0.0),
    "in no bag": (3, 9, 5, 7, 6, 0.0),
    "many tables": (4100, 2, 0, 3, 6, 0.0),
    "one bag": (1, 1, 2, 0, 6, 0.0),
    "no bags": (2, 0, 0, 4, 6, 0.0),
    "long bags": (2, 40, 1500, 900, 3000, 0.0),
    "one-position bags": (4, 3000, 0, 5, 1, 0.0),
    "tiles of empty bags": (8, 4000, 3, 2000, 2, 0.995),
    "many tiles": (26, 700, 0, 0, 40, 0.3),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("sentinel", [True, False])
def test_preparation_equals_the_torch_operations(gen: torch.Generator, case: str, dtype: torch.dtype, mode: str,
                                                 sentinel: bool) -> None:
    tables, bags_per_table, lead, tail, longest, empty = CASES[case]
    indices, offsets, table_rows = random_layout(gen, tables, bags_per_table, lead, tail, dtype, longest, empty)
    for num_rows in (100_000, 2**31):  # int32 keys, then int64 keys
        expected = reference_lookups(table_rows, indices, offsets, mode)
        key_dtype = torch.int32 if num_rows < 2**31 - 1 else torch.int64
        # the sort keys as the backward made them (_segments._sort_keys): the sentinel row in no bag
        rows = torch.where(expected.bag_of < 0, num_rows, expected.rows) if sentinel else expected.rows
        expected_keys = rows.to(key_dtype)
        keys, grad_row, scale = launch.prepare_table_lookups(indices, offsets, table_rows, num_rows=num_rows,
                                                             mean=mode == "mean", sentinel=num_rows if sentinel else -1)
        assert keys.dtype == expected_keys.dtype
        assert torch.equal(keys, expected_keys)
        assert torch.equal(grad_row, expected.bag_of)
        if mode == "mean":
            assert scale is not None and expected.bag_scale is not None
            assert torch.equal(scale.view(torch.int32), expected.bag_scale.view(torch.int32))  # bits, not values
        else:
            assert scale is None


@pytest.mark.parametrize("case", ["many tiles", "in no bag", "tiles of empty bags"])
@pytest.mark.parametrize("num_rows", [10_000, 70_000, 40_000_000])
def test_the_preparation_counts_the_radix_sorts_digits(gen: torch.Generator, case: str, num_rows: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With a radix sort begun (``launch.radix_start``: its control words zeroed), the kernel adds
    its keys' digit totals, 8 bits a pass over the passes num_rows needs (2, 3 and 4 here), equal
    to a count of the keys it wrote; the sort then run on them without counting again equals
    torch's stable sort (keys and positions)."""
    monkeypatch.setattr(launch, "RADIX_MIN_KEYS", 1)
    tables, bags_per_table, lead, tail, longest, empty = CASES[case]
    indices, offsets, table_rows = random_layout(gen, tables, bags_per_table, lead, tail, torch.int64, longest, empty)
    started = launch.radix_start(indices.numel(), num_rows, indices)
    assert started is not None
    control, passes, _, _ = started
    assert passes == -(-num_rows.bit_length() // 8)
    keys, _, _ = launch.prepare_table_lookups(indices, offsets, table_rows, num_rows=num_rows, mean=False,
                                              sentinel=num_rows, sort=started)
    totals = control[: 4 * 256].view(4, 256)
    for p in range(4):
        expected = torch.bincount((keys.long() >> (8 * p)) & 255, minlength=256) if p < passes else 0 * totals[p]
        assert torch.equal(totals[p].long(), expected.long())
    got_keys, got_positions = launch.sort_rows(keys, num_rows, started)
    want_keys, want_positions = torch.sort(keys, stable=True)
    assert torch.equal(got_keys, want_keys) and torch.equal(got_positions, want_positions)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_decreasing_offsets_still_give_every_position_one_answer(gen: torch.Generator, dtype: torch.dtype) -> None:
    """Offsets that decrease (an invalid batch, reported by the index check): no bag is promised,
    but every output is written (the poisoned -7 is gone), within range, and the same twice."""
    indices, offsets, table_rows = random_layout(gen, 4, 900, 0, 0, dtype, longest=8)
    shuffled = offsets.clone()
    shuffled[1:-1] = offsets[1:-1][torch.randperm(offsets.numel() - 2, generator=gen, device="cuda")]
    results = [launch.prepare_table_lookups(indices, shuffled, table_rows, num_rows=100_000, mean=True,
                                            sentinel=100_000) for _ in range(2)]
    keys, grad_row, scale = results[0]
    assert bool((keys >= 0).all()) and bool((keys <= 100_000).all())
    assert bool((grad_row >= -1).all()) and bool((grad_row < offsets.numel() - 1).all())
    for again, first in zip(results[1], results[0], strict=True):
        assert again is not None and first is not None and torch.equal(again, first)


def reference_lookups(table_rows: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, mode: str) -> Any:
    """``tbe.tbe_lookups``; with no bags (which its torch operations divide by), what it means:
    every position in no bag (row: its index, table 0's), no bag scales."""
    if offsets.numel() > 1:
        return tbe.tbe_lookups(table_rows, indices, offsets, mode, None)
    rows = indices.to(torch.int64) + table_rows[0]
    scale = torch.empty(0, device="cuda") if mode == "mean" else None
    return tbe.sparse_update.Lookups(rows, torch.full_like(rows, -1), 0, None, scale, 1.0, -1)


def torch_operation_lookups(table_rows: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, mode: str,
                            psw: torch.Tensor | None, num_rows: int, sentinel: bool = True) -> Any:
    """The lookups as before the kernel: ``tbe.tbe_lookups``' torch operations."""
    return tbe.tbe_lookups(table_rows, indices, offsets, mode, psw)


ROWS = (300, 5000, 40)


def batch(gen: torch.Generator, bags_per_table: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Zipf-like skewed indices (hot rows hit many times: runs that cross the backward's chunks),
    bag lengths 0..40."""
    lengths = torch.randint(0, 41, (len(ROWS) * bags_per_table,), generator=gen, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    n = int(offsets[-1])
    bag = torch.searchsorted(offsets, torch.arange(n, device="cuda"), right=True) - 1
    rows = torch.tensor(ROWS, device="cuda")[bag // bags_per_table]
    draw = torch.rand(n, generator=gen, device="cuda", dtype=torch.float64) ** 4  # skewed to row 0
    return (draw * rows).long().clamp(max=rows - 1), offsets


STEPS = {  # (optimizer, weight dtype, mode, per-sample weights, sparse)
    "sgd": (optim.SGD(lr=0.05), torch.float32, "sum", False, False),
    "adagrad": (optim.RowWiseAdagrad(lr=0.05, eps=1e-6), torch.float32, "sum", False, False),
    "adagrad fp16": (optim.RowWiseAdagrad(lr=0.05, eps=1e-6), torch.float16, "sum", False, False),
    "sgd psw": (optim.SGD(lr=0.05), torch.float32, "sum", True, False),
    "adagrad mean": (optim.RowWiseAdagrad(lr=0.05, eps=1e-6), torch.float32, "mean", False, False),
    "adam bf16": (optim.Adam(lr=0.01), torch.bfloat16, "sum", False, False),
    "sparse mean": (None, torch.float32, "mean", False, True),
    "dense sum": (None, torch.float32, "sum", False, False),
    "dense mean fp16": (None, torch.float16, "mean", False, False),
}


@pytest.mark.parametrize("name", STEPS)
def test_training_steps_equal_the_torch_operation_path(gen: torch.Generator, monkeypatch: pytest.MonkeyPatch,
                                                       name: str) -> None:
    spec, dtype, mode, with_psw, sparse = STEPS[name]
    bags_per_table, dim = 64, 32
    modules = [TableBatchedEmbeddingBag(list(ROWS), dim, mode=mode, dtype=dtype, device="cuda", sparse=sparse,
                                        optimizer=spec) for _ in range(2)]
    modules[0].optimizer_seed = modules[1].optimizer_seed = 7
    with torch.no_grad():
        modules[1].weight.copy_(modules[0].weight)
    grads: list[list[torch.Tensor]] = [[], []]
    for _ in range(3):
        indices, offsets = batch(gen, bags_per_table)
        psw = torch.rand(indices.numel(), generator=gen, device="cuda").to(dtype) if with_psw else None
        grad = torch.randn(bags_per_table, len(ROWS) * dim, generator=gen, device="cuda").to(dtype)
        for which, module in enumerate(modules):
            with monkeypatch.context() as patch:
                if which == 1:
                    patch.setattr(tbe, "prepared_lookups", torch_operation_lookups)
                module.weight.grad = None
                module(indices, offsets, psw).backward(grad)
                if spec is None:
                    assert module.weight.grad is not None
                    grads[which].append(module.weight.grad.to_dense() if sparse else module.weight.grad.clone())
    torch.cuda.synchronize()
    assert torch.equal(modules[0].weight, modules[1].weight)
    for mine, theirs in zip(grads[0], grads[1], strict=True):
        assert torch.equal(mine, theirs)
    if spec is not None:
        ours, reference = (m.fused_state(m.weight) for m in modules)
        assert torch.equal(ours.state1, reference.state1) and torch.equal(ours.state2, reference.state2)
