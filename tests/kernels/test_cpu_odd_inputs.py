"""CPU tests (issue 54, item 5): the odd inputs of embedding_bag against torch on the CPU.

The lookups run on CUDA only; what runs here is the argument validation, which comes before the
CUDA requirement: random calls (tests/kernels/differential.py) that torch refuses for their
arguments are refused by ours with an argument error, and calls torch accepts get only the CUDA
requirement. An empty 2-D input ``B x 0`` (torch: "step must be nonzero") is a clear ValueError,
not an internal reshape error. A first offset that is not 0 is found on the device by the index
check (its message is tested here; the GPU tests run it)."""

from __future__ import annotations

import random
import re

import pytest
import torch
import torch.nn.functional as F
from differential import FIRST_OFFSET, outcome, random_call, reference

import reference_kernels as rk
from reference_kernels import index_check as ic

CUDA_ONLY = "runs CUDA kernels only"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("shape", [(3, 0), (0, 0)])
def test_an_empty_2d_input_is_refused_clearly_as_torch_refuses_it(dtype: torch.dtype, mode: str,
                                                                   shape: tuple[int, int]) -> None:
    weight = torch.randn(10, 4).to(dtype)
    empty = torch.empty(shape, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        F.embedding_bag(empty, weight, mode=mode, padding_idx=2)
    with pytest.raises(ValueError, match=rf"input is 2-D \[{shape[0]}, 0\], bags of length 0") as raised:
        rk.embedding_bag(empty, weight, mode=mode, padding_idx=2)
    assert "reshape" not in str(raised.value)


def test_random_calls_are_refused_for_the_reasons_torch_refuses_them() -> None:
    seed = random.SystemRandom().randrange(2**62)
    print(f"seed={seed}")
    rng = random.Random(seed)
    refused = accepted = 0
    for _ in range(120):
        call = random_call(rng)
        ref = reference(call)
        ours = outcome(rk.embedding_bag, call, "cpu")
        assert ours.error is not None, call.describe()  # the CPU has no lookup
        device_side = ref.error is not None and FIRST_OFFSET in str(ref.error)
        if ref.error is None or device_side:  # only the CUDA requirement stands in the way
            assert CUDA_ONLY in str(ours.error), (call.describe(), ours.error)
            accepted += 1
        else:
            assert CUDA_ONLY not in str(ours.error), (call.describe(), ref.error, ours.error)
            refused += 1
    assert refused and accepted


def test_the_index_check_names_a_first_offset_that_is_not_0() -> None:
    words = [0] * ic.RECORD_WORDS
    words[ic.RECORD_OWNER], words[ic.RECORD_OP], words[ic.RECORD_BAG] = 5, 1, 1
    words[ic.RECORD_INDICES], words[ic.RECORD_BAG_COUNT] = 9, 1
    finding = ic.parse_record(words)
    assert finding is not None and finding.bag == 0
    assert ic.error_message(finding) == (
        "reference_kernels.embedding_bag: offsets are invalid at bag 0: offsets must start at 0 (offsets[0] == 0, "
        "as torch.nn.functional.embedding_bag requires), be non-decreasing and lie in [0, 9] (the number of "
        "indices)")



def _quantized_module() -> tuple[object, list[torch.Tensor]]:
    from reference_kernels.quantized import quantize
    from reference_kernels.quantized_tbe import QuantizedTableBatchedEmbeddingBag

    weights = [torch.randn(20, 8), torch.randn(30, 8)]
    return QuantizedTableBatchedEmbeddingBag([quantize(w, "int8") for w in weights], "sum", torch.float32), weights


def test_the_quantized_module_refuses_a_first_offset_that_is_not_0_as_torch() -> None:
    module, weights = _quantized_module()
    indices = torch.tensor([1, 2, 3, 4, 5, 6])
    with pytest.raises(RuntimeError, match=re.escape(FIRST_OFFSET)):
        F.embedding_bag(indices[:3], weights[0], torch.tensor([1, 2, 3]), include_last_offset=True)
    with pytest.raises(ValueError, match=r"offsets\[0\] must be 0"):
        module(indices, torch.tensor([1, 2, 3, 4, 6]))  # type: ignore[operator]
    assert module(indices, torch.tensor([0, 2, 3, 4, 6])).shape == (2, 16)  # type: ignore[operator]


def test_a_single_offset_gives_no_bag_on_the_quantized_module_as_in_torch() -> None:
    module, weights = _quantized_module()
    out = module(torch.tensor([1, 2]), torch.tensor([0]))  # type: ignore[operator]
    theirs = F.embedding_bag(torch.tensor([1, 2]), weights[0], torch.tensor([0]), include_last_offset=True)
    assert out.shape == (0, 16) and theirs.shape == (0, 8)


def test_max_norm_with_no_index_rescales_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A [0, L] input with max_norm (found by the GPU differential test: torch's CUDA renorm kernel
    fails to launch on no index, 'CUDA error: invalid argument'): no renorm call at all."""
    from reference_kernels import api

    calls: list[int] = []
    monkeypatch.setattr(torch, "embedding_renorm_", lambda w, i, *a: calls.append(i.numel()))
    api._renorm(torch.randn(4, 3), torch.empty(0, 1, dtype=torch.int64), 1.0, 2.0)
    api._renorm(torch.randn(4, 3), torch.tensor([[1]]), 1.0, 2.0)
    assert calls == [1]
