"""GPU tests (issue 54, item 5): every entry point against torch.nn.functional.embedding_bag.

Random calls (tests/kernels/differential.py: dtypes, widths, modes, 1-D and 2-D input, padding,
per-sample weights, max_norm, no / dense / sparse gradients, and the odd inputs) give the same
refusals as torch on the CPU and values within the verifier's bound of torch's float64 result;
a first offset that is not 0 is an EmbeddingIndexError on every entry point (torch's CPU kernel
refuses it; ours reports it through the index check: at once with "sync", at the next call with
the default "deferred"; the quantized module checks when asked, check_indices); a single offset
gives torch's result. Fresh seeds, printed."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from differential import FIRST_OFFSET, absolute, bound, outcome, random_call, reference  # noqa: E402

import reference_kernels as rk  # noqa: E402
from reference_kernels.quantized import quantize  # noqa: E402
from reference_kernels.quantized_tbe import QuantizedTableBatchedEmbeddingBag  # noqa: E402
from reference_kernels.tbe import TableBatchedEmbeddingBag  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs", "drained_ledger")]

CALLS = 48


def _seed(request: pytest.FixtureRequest) -> int:
    seed = random.SystemRandom().randrange(2**62)
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return seed


def test_random_calls_agree_with_torch(request: pytest.FixtureRequest) -> None:
    rng = random.Random(_seed(request))
    for _ in range(CALLS):
        call = random_call(rng)
        ref = reference(call)
        ours = outcome(rk.embedding_bag, call, "cuda", check_indices="sync")
        what = call.describe()
        if ref.error is not None:
            assert ours.error is not None, f"torch refuses ({ref.error}); ours returned: {what}"
            continue
        assert ours.error is None, f"ours refused ({type(ours.error).__name__}: {ours.error}): {what}"
        assert ours.out is not None and ref.out is not None and ours.out.shape == ref.out.shape, what
        if call.mode == "max" and call.max_norm is None:
            assert torch.equal(ours.out, ref.out), what
        else:
            abs_ref = reference(absolute(call)).out
            assert abs_ref is not None
            tol = bound(call, ref.out, abs_ref)
            assert bool(((ours.out - ref.out).abs() <= tol).all()), what
        if call.max_norm is not None:
            assert ours.weight_after is not None and ref.weight_after is not None
            u = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[call.weight.dtype]
            assert bool(((ours.weight_after - ref.weight_after).abs() <= 4 * u * ref.weight_after.abs()).all()), what
        if ref.grad_weight is not None:
            assert ours.grad_weight is not None, what
            psw = 1.0 if call.per_sample_weights is None else float(call.per_sample_weights.abs().max())
            scale = torch.full_like(ref.grad_weight, call.input.numel() * psw)
            tol = bound(call, ref.grad_weight, scale)
            assert bool(((ours.grad_weight - ref.grad_weight).abs() <= tol).all()), f"gradient: {what}"


def _bags(first: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    weight = torch.randn(20, 8, device="cuda")
    indices = torch.randint(0, 20, (9,), device="cuda")
    offsets = torch.tensor([first, 4, 6], device="cuda")
    return weight, indices, offsets


def test_torch_refuses_a_first_offset_that_is_not_0() -> None:
    weight, indices, offsets = _bags(2)
    with pytest.raises(RuntimeError, match=r"offsets\[0\] has to be 0"):
        F.embedding_bag(indices.cpu(), weight.cpu(), offsets.cpu())
    assert FIRST_OFFSET in "offsets[0] has to be 0, i.e., the first sequence"


@pytest.mark.parametrize("check", ["sync", "deferred"])
@pytest.mark.parametrize("entry", ["function", "module", "module-fused", "table-batched", "quantized"])
def test_a_first_offset_that_is_not_0_is_an_error_on_every_entry_point(entry: str, check: str) -> None:
    weight, indices, offsets = _bags(2)
    if entry == "function":
        call = lambda: rk.embedding_bag(indices, weight, offsets, check_indices=check)  # noqa: E731
    elif entry.startswith("module"):
        module = rk.EmbeddingBag.from_pretrained(weight, freeze=entry == "module", mode="sum")
        if entry == "module-fused":
            module = rk.EmbeddingBag(20, 8, mode="sum", optimizer=rk.optim.SGD(lr=0.1)).cuda()
        module.check_indices = check
        call = lambda: module(indices, offsets)  # noqa: E731
    else:
        if entry == "quantized":  # checks only when asked (as FBGEMM's bounds_check_mode); here it is
            tables = [quantize(weight, "int8"), quantize(weight, "int4")]
            tbe = QuantizedTableBatchedEmbeddingBag(tables, "sum", torch.float32, check_indices=check)
        else:
            tbe = TableBatchedEmbeddingBag([20, 20], 8, mode="sum").cuda()
            tbe.check_indices = check
        tb_offsets = torch.tensor([2, 3, 5, 7, 9], device="cuda")  # 2 tables x 2 bags, include_last_offset
        call = lambda: tbe(indices, tb_offsets)  # noqa: E731
    with pytest.raises(rk.EmbeddingIndexError, match="offsets must start at 0"):
        out = call()
        if check == "deferred":  # recorded by the call, raised at the next one (or here)
            if out.requires_grad:
                out.sum().backward()
            rk.check_index_errors()


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_a_single_offset_gives_torchs_result(mode: str) -> None:
    weight = torch.randn(20, 8, device="cuda")
    indices = torch.randint(0, 20, (9,), device="cuda")
    one_bag = torch.tensor([0], device="cuda")
    ours = rk.embedding_bag(indices, weight, one_bag, mode=mode, check_indices="sync")
    theirs = F.embedding_bag(indices.cpu(), weight.cpu().double(), one_bag.cpu(), mode=mode)
    torch.testing.assert_close(ours.double().cpu(), theirs, rtol=1e-5, atol=1e-5)
    no_bag = rk.embedding_bag(indices[:0], weight, one_bag, mode=mode, include_last_offset=True,
                              check_indices="sync")
    assert no_bag.shape == (0, 8)
    with pytest.raises(rk.EmbeddingIndexError, match="offsets must start at 0"):
        rk.embedding_bag(indices, weight, torch.tensor([3], device="cuda"), mode=mode, check_indices="sync")


def test_an_empty_2d_input_is_a_clear_error_as_in_torch() -> None:
    weight = torch.randn(10, 4, device="cuda", dtype=torch.bfloat16)
    empty = torch.empty(3, 0, dtype=torch.int64, device="cuda")
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        F.embedding_bag(empty, weight, mode="mean", padding_idx=2)
    with pytest.raises(ValueError, match=r"2-D \[3, 0\], bags of length 0"):
        rk.embedding_bag(empty, weight, mode="mean", padding_idx=2)
    with pytest.raises(ValueError, match="bags of length 0"):
        rk.EmbeddingBag(10, 4, mode="mean", padding_idx=2).cuda().bfloat16()(empty)
