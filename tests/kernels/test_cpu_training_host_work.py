"""CPU tests of the host work of one training step (issue 37): forward, backward and fused update
of ``TableBatchedEmbeddingBag`` run through the whole Python path on CPU tensors with the GPU
parts replaced (tests/kernels/host_overhead.py), counting the torch operations the step
dispatches and the kernels it launches. The backward's lookup preparation is one kernel
(lookup_prepare.cu): none of the ~25 torch operations it replaced (searchsorted, where, masks,
index arithmetic) may come back unnoticed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.driver")  # the measurement drives cuda-bindings (the kernels extra)

from tests.kernels import host_overhead  # noqa: E402

# The step's launches: the index check, the lookup, the preparation, the chunk and combine passes
# (the cases' 1,024 keys are sorted by torch.sort: fewer than launch.RADIX_MIN_KEYS).
LAUNCHES = ["index_check", "tbe_prepare", "embedding_bag_backward", "embedding_bag_backward_combine"]
# The step's torch operations: the check's two copies, the output, the preparation's keys and grad
# rows (and mean's bag scales), the gradient's view, the sort, the backward's partial sums.
OPS = ["empty_like", "empty_like", "new_empty", "empty_like", "empty_like", "view", "sort", "new_empty"]
# From launch.RADIX_MIN_KEYS keys on, radix_sort.cu instead of the sort, begun before the
# preparation (launch.radix_start): its control words (zeroed by its own launch, before the
# preparation, which counts the digit totals into them); at the sort, the passes' buffers, sorted
# keys and positions, and a onesweep launch per 8 bits of the rows (the cases' 4 x 1,000 rows and
# the sentinel row: 12 bits, two passes).
RADIX_START_OPS = ["empty"]
RADIX_OPS = ["empty", "empty_like", "empty"]
RADIX_LAUNCHES = ["radix_onesweep"] * 2


@pytest.mark.parametrize("case", host_overhead.TRAINING_CASES)
def test_a_training_step_dispatches_a_few_allocations_a_sort_and_five_launches(case: str) -> None:
    import torch

    with host_overhead.without_gpu(stubbed=False), torch.enable_grad():
        work = host_overhead.step_work(host_overhead.training_case(case))
    mean = case.split()[1] == "mean"
    expected_ops = OPS[:5] + ["new_empty"] + OPS[5:] if mean else OPS  # mean: its bag scales
    assert work.ops == expected_ops
    assert len(work.launches) == len(LAUNCHES) + 1
    assert work.launches[0] == LAUNCHES[0] and work.launches[1].startswith("embedding_bag_forward")
    assert work.launches[2:] == LAUNCHES[1:]


def test_a_step_of_many_keys_sorts_them_with_its_own_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from reference_kernels import launch

    monkeypatch.setattr(launch, "RADIX_MIN_KEYS", 1)  # the cases' 1,024 keys as if they were many
    with host_overhead.without_gpu(stubbed=False), torch.enable_grad():
        work = host_overhead.step_work(host_overhead.training_case("sgd sum"))
    sort = OPS.index("sort")
    assert work.ops == OPS[:3] + RADIX_START_OPS + OPS[3:sort] + RADIX_OPS + OPS[sort + 1:]
    assert work.launches[2:] == ["radix_zero", "tbe_prepare", *RADIX_LAUNCHES, *LAUNCHES[2:]]


def test_the_training_measurement_reports_host_time_ops_and_launches() -> None:
    """``host_overhead --training`` runs each case and puts the process's ledgers back."""
    from reference_kernels import index_check

    before = (index_check.FLAGS, index_check._FLAGS_DEVICE_PTR, index_check._LEDGERS)
    results = host_overhead.measure_training(calls=5)
    assert set(results) == set(host_overhead.TRAINING_CASES)
    assert all(0 < us < 100_000 and len(work.launches) == len(LAUNCHES) + 1 for us, work in results.values())
    assert (index_check.FLAGS, index_check._FLAGS_DEVICE_PTR, index_check._LEDGERS) == before
