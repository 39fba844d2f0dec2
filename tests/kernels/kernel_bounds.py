"""Error bounds for comparing float32-accumulated pooling with a float64 reference.

Model (docs/kernels.md, "Error bound"): a bag pools n terms x_i (w_i * row_i with
per-sample weights) in float32 in some order. The textbook bound for a recursive
or tree sum of n products (Higham, Accuracy and Stability, 3.1) is

    |s_hat - s| <= gamma(n) * sum_i |x_i|,     gamma(n) = n u / (1 - n u),  u = 2^-24,

mean adds one division (gamma(n + 1) over the mean of |x_i|), and the final
rounding to the output dtype adds u_out * |s| plus half the dtype's smallest
subnormal (absolute, for results that land in the subnormal range). The
reference is torch's own embedding_bag run in float64 (its error, ~1e-16
relative, is far below these bounds). The bound grows linearly with the bag
length n; max mode and the unpooled lookup are exact.
"""

from __future__ import annotations

import torch

U32 = 2.0**-24
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
HALF_MIN_SUBNORMAL = {torch.float32: 2.0**-150, torch.float16: 2.0**-25, torch.bfloat16: 2.0**-134}


def gamma(n: int) -> float:
    return n * U32 / (1.0 - n * U32)


def pooled_tolerance(ref: torch.Tensor, abs_ref: torch.Tensor, terms: int, dtype: torch.dtype) -> torch.Tensor:
    """Elementwise bound for |ours - ref| (float64): ``abs_ref`` is the same pooling of
    |x_i| (in float64), ``terms`` the longest bag (plus one for mean's division)."""
    u_out = UNIT_ROUNDOFF[dtype]
    return (1.0 + u_out) * gamma(max(terms, 1)) * abs_ref + u_out * ref.abs() + HALF_MIN_SUBNORMAL[dtype]


def assert_within(ours: torch.Tensor, ref: torch.Tensor, tol: torch.Tensor, what: str) -> None:
    """Every element within its bound; NaN (e.g. an unwritten poisoned element) never passes."""
    err = (ours.double() - ref).abs()
    ok = err <= tol
    if not bool(ok.all()):
        bad = (~ok).nonzero()[:5].tolist()
        worst = float(torch.nan_to_num(err / tol, nan=float("inf")).max())
        raise AssertionError(f"{what}: {int((~ok).sum())} elements outside the bound (first {bad}); "
                             f"worst error / bound = {worst:.3g}")
