"""The torch side of the new semantics, checked against plain loops and autograd: table-batched
inputs and references, the lookup list, the gradient, and the bounds' shape (CPU, fast)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the kernels extra; README's test command runs without it
import torch.nn.functional as F  # noqa: E402

from compliance.manifest import Semantics  # noqa: E402
from compliance.semantics import Backward, Tables  # noqa: E402
from compliance.verify.backward import forward_shape, lookups  # noqa: E402
from compliance.verify.cases import generate_cases  # noqa: E402
from compliance.verify.tensors import make_inputs  # noqa: E402
from compliance.verify.tolerance import DEFAULT_BOUNDS  # noqa: E402

TABLED = Semantics(op="embedding_bag", modes=("sum", "mean"), layouts=("fixed", "csr"),
                   include_last_offset=(False, True), tables=Tables())


def _bags(case, inputs):  # type: ignore[no-untyped-def]
    """(b, t) -> absolute rows, by a plain loop over the declared layout."""
    flat = inputs.indices.reshape(-1).tolist()
    starts = inputs.extra["table_offsets"].tolist()
    tables, batch = case.num_tables, case.batch_size
    out = {}
    for b in range(batch):
        for t in range(tables):
            if case.layout == "csr":
                bag = t * batch + b
                offsets = inputs.offsets.tolist()
                end = offsets[bag + 1] if bag + 1 < len(offsets) else len(flat)
                positions = range(offsets[bag], end)
            else:
                positions = range(b * tables * case.pooling + t * case.pooling,
                                  b * tables * case.pooling + (t + 1) * case.pooling)
            out[b, t] = [starts[t] + flat[k] for k in positions]
    return out


def test_table_batched_reference_is_the_per_table_bag() -> None:
    for case in generate_cases(TABLED, 11, large=False)[:12]:
        inputs = make_inputs(case, DEFAULT_BOUNDS["float32"])
        offsets = inputs.extra["table_offsets"].tolist()
        assert offsets[-1] == case.num_embeddings and len(offsets) == case.num_tables + 1
        assert inputs.extra["weights_offsets"].tolist() == [o * case.dim for o in offsets[:-1]]
        weight = inputs.weight.to(torch.float64)
        reference = inputs.reference.view(case.batch_size, case.num_tables, case.dim)
        for (b, t), rows in _bags(case, inputs).items():
            assert all(offsets[t] <= r < offsets[t + 1] for r in rows)  # every index inside its table
            expected = weight[rows].sum(0) if rows else torch.zeros(case.dim, dtype=torch.float64)
            if case.mode == "mean" and rows:
                expected = expected / len(rows)
            assert torch.allclose(reference[b, t], expected), (case.id, b, t)


def test_every_table_sees_its_first_and_last_row() -> None:
    case = next(c for c in generate_cases(TABLED, 12, large=False) if c.num_indices > 4 * c.num_tables)
    inputs = make_inputs(case, DEFAULT_BOUNDS["float32"])
    used = {r for rows in _bags(case, inputs).values() for r in rows}
    starts = inputs.extra["table_offsets"].tolist()
    for t in range(case.num_tables):
        assert {starts[t], starts[t + 1] - 1} <= used, t


def test_dense_gradient_equals_autograd() -> None:
    sem = Semantics(op="embedding_bag", modes=("sum", "mean"), layouts=("csr", "fixed"), per_sample_weights=True,
                    padding_idx=True, backward=Backward("gradient"))
    for case in generate_cases(sem, 13, large=False)[:16]:
        inputs = make_inputs(case, DEFAULT_BOUNDS["float32"])
        weight = inputs.weight.to(torch.float64).requires_grad_()
        offsets = None if inputs.offsets is None else inputs.offsets.to(torch.int64)
        psw = None if inputs.psw is None else inputs.psw.to(torch.float64)
        out = F.embedding_bag(inputs.indices.to(torch.int64), weight, offsets, mode=case.mode,
                              per_sample_weights=psw, include_last_offset=case.include_last_offset,
                              padding_idx=case.padding_idx)
        out.backward(inputs.extra["grad_out"].to(torch.float64))
        assert weight.grad is not None and torch.allclose(inputs.reference, weight.grad), case.id
        untouched = inputs.bound.abs().sum(dim=1) == 0
        assert bool((inputs.reference[untouched] == 0).all())


def test_lookup_list_of_table_batched_csr_maps_to_the_output_row() -> None:
    case = next(c for c in generate_cases(TABLED, 14, large=False) if c.layout == "csr")
    inputs = make_inputs(case, DEFAULT_BOUNDS["float32"])
    lk = lookups(case, inputs.indices, None)
    assert forward_shape(case) == (case.batch_size, case.num_tables * case.dim)
    for (b, t), rows in _bags(case, inputs).items():
        mine = (lk.out_rows == b * case.num_tables + t).nonzero().flatten()
        assert sorted(lk.rows[mine].tolist()) == sorted(rows)


def test_sgd_reference_touches_only_referenced_rows() -> None:
    sem = Semantics(op="embedding_bag", modes=("sum",), layouts=("fixed",), tables=Tables(), backward=Backward("sgd"))
    case = generate_cases(sem, 15, large=False)[0]
    inputs = make_inputs(case, DEFAULT_BOUNDS["float32"])
    touched = inputs.expected["touched"]
    weight = inputs.weight.to(torch.float64)
    assert torch.equal(inputs.reference[~touched], weight[~touched])
    assert bool((inputs.reference[touched] != weight[touched]).any())
    assert bool((inputs.bound[~touched] == 0).all()) and bool((inputs.bound[touched] > 0).all())
