"""One error-bound model: ``compliance verify`` and the reference kernels' tests share it.

tests/kernels/kernel_bounds.py uses ``compliance.verify.tolerance`` with
``STRICT_BOUNDS``; these tests pin that the strict form is never looser than the
rigorous bound the kernel tests used before (so no GPU assertion got weaker),
never looser than the verifier's defaults, and still admits a real
float32-accumulating implementation (torch on the CPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from compliance.verify.tolerance import (  # noqa: E402
    ACCUMULATION_ROUNDOFF,
    DEFAULT_BOUNDS,
    HALF_MIN_SUBNORMAL,
    STRICT_BOUNDS,
    pooled_bound,
)
from compliance.verify.vocabulary import UNIT_ROUNDOFF  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
from kernel_bounds import pooled_tolerance  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def rigorous_bound(ref: torch.Tensor, abs_sum: torch.Tensor, n: int, dtype: str) -> torch.Tensor:
    """Higham's bound with the final rounding: (1 + u_out) gamma(n) A + u_out |r| + half the least subnormal."""
    u, u_out = ACCUMULATION_ROUNDOFF, UNIT_ROUNDOFF[dtype]
    return (1 + u_out) * (n * u / (1 - n * u)) * abs_sum + u_out * ref.abs() + HALF_MIN_SUBNORMAL[dtype]


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from(sorted(DTYPES)), n=st.integers(1, 100_000),
       ref=st.floats(-1e4, 1e4), extra=st.floats(0, 1e4))
def test_strict_bound_is_never_looser_than_the_old_test_bound_nor_the_defaults(
        dtype: str, n: int, ref: float, extra: float) -> None:
    r = torch.tensor([ref], dtype=torch.float64)
    a = r.abs() + extra  # A >= |r| always
    strict = pooled_bound("sum", r, a, n, UNIT_ROUNDOFF[dtype], STRICT_BOUNDS[dtype])
    assert bool((strict <= rigorous_bound(r, a, n, dtype)).all())
    assert bool((strict <= pooled_bound("sum", r, a, n, UNIT_ROUNDOFF[dtype], DEFAULT_BOUNDS[dtype])).all())
    assert torch.equal(pooled_tolerance(r, a, n, DTYPES[dtype]), strict)


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_a_float32_accumulating_implementation_passes_the_strict_bound(mode: str, dtype: str) -> None:
    gen = torch.Generator().manual_seed(7)
    weight = torch.randn(500, 64, generator=gen).to(DTYPES[dtype])
    lengths = torch.randint(0, 300, (40,), generator=gen)
    indices = torch.randint(0, 500, (int(lengths.sum()),), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
    ours = torch.nn.functional.embedding_bag(indices, weight.float(), offsets, mode=mode).to(DTYPES[dtype])
    w64 = weight.double()
    ref = torch.nn.functional.embedding_bag(indices, w64, offsets, mode=mode)
    abs_ref = torch.nn.functional.embedding_bag(indices, w64.abs(), offsets, mode=mode)
    terms = int(lengths.max()) + (1 if mode == "mean" else 0)
    tol = pooled_tolerance(ref, abs_ref, terms, DTYPES[dtype])
    assert bool(((ours.double() - ref).abs() <= tol).all())
