"""Error bounds for the reference kernels' GPU tests: the verifier's model, held without margin.

The model is ``compliance.verify.tolerance`` (docs/verification.md, "Tolerance"),
the same one ``compliance verify`` applies to submissions: a bag pools n terms
x_i (w_i * row_i with per-sample weights) in float32 in some order, so for the
reference r (torch in float64) and A = sum_i |x_i|

    |y - r| <= m * (n * u_acc * A + u_out * |r|) + floor,     u_acc = 2^-24,

where u_out is the unit roundoff of the output dtype (one final rounding). The
verifier's rule-set defaults allow m = 2 and a per-dtype floor for submissions;
these tests use ``STRICT_BOUNDS``: m = 1 and a floor of only half the dtype's
smallest subnormal. That is never looser than the bound these tests used before
((1 + u_out) * gamma(n) * A + u_out * |r| + the same floor, gamma(n) = n u / (1 - n u)
>= n u), so every GPU assertion keeps at least its strength. Callers pass the
longest bag as n (plus one for mean's division, with A the mean of |x_i|); max
mode and the unpooled lookup are compared exactly.
"""

from __future__ import annotations

import torch

from compliance.verify import tolerance, vocabulary

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
U32 = tolerance.ACCUMULATION_ROUNDOFF
UNIT_ROUNDOFF = {DTYPES[name]: u for name, u in vocabulary.UNIT_ROUNDOFF.items()}
HALF_MIN_SUBNORMAL = {DTYPES[name]: h for name, h in tolerance.HALF_MIN_SUBNORMAL.items()}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def gamma(n: int) -> float:
    """Higham's gamma(n) = n u / (1 - n u) for float32 (the optimizer tests' ad-hoc bounds use it)."""
    return n * U32 / (1.0 - n * U32)


def pooled_tolerance(ref: torch.Tensor, abs_ref: torch.Tensor, terms: int, dtype: torch.dtype) -> torch.Tensor:
    """Elementwise bound for |ours - ref| (float64): ``abs_ref`` is the same pooling of
    |x_i| (in float64), ``terms`` the longest bag (plus one for mean's division)."""
    bound = tolerance.STRICT_BOUNDS[_name(dtype)]
    return tolerance.pooled_bound("sum", ref, abs_ref, max(terms, 1), UNIT_ROUNDOFF[dtype], bound)


def assert_within(ours: torch.Tensor, ref: torch.Tensor, tol: torch.Tensor, what: str) -> None:
    """Every element within its bound; NaN (e.g. an unwritten poisoned element) never passes."""
    err = (ours.double() - ref).abs()
    ok = err <= tol
    if not bool(ok.all()):
        bad = (~ok).nonzero()[:5].tolist()
        worst = float(torch.nan_to_num(err / tol, nan=float("inf")).max())
        raise AssertionError(f"{what}: {int((~ok).sum())} elements outside the bound (first {bad}); "
                             f"worst error / bound = {worst:.3g}")
