"""The error-bound model: how far a kernel's output may be from the float64 reference.

For one output element of a bag with n pooled rows x_k (times per-sample
weights p_k), reference value r and absolute sum A = sum |p_k x_k|, with u_acc
the float32 unit roundoff (accumulation is float32) and u_out the unit
roundoff of the weight dtype (the output is rounded to it once):

* sum:  |y - r| <= m * (n * u_acc * A + u_out * |r|) + floor
* mean: |y - r| <= m * (u_acc * A + (u_acc + u_out) * |r|) + floor
* max and embedding (a copy): |y - r| == 0, exactly.

Quantized tables (``int8_output_bound``, docs/verification.md, "Quantized tables"): the reference
pools the rows dequantized in float64; a float32 dequantization that adds a row's bias rounds once
per term, counted as one more addition (n + 1). An int8 output q = round(y * s) saturated, with s
the table's inverse output scale, is compared after dequantization (q / s) with the saturated
reference clamp(r * s, -128, 127) / s; its bound adds the half code of the rounding and the
float32 product y * s to the bound e of y:

* int8 output: |q / s - clamp(r s) / s| <= 1 / (2 s) + e + u_acc * (|r| + e)

``m`` (``unit_roundoff_multiplier``) and ``floor`` (``absolute_floor``) come
from the rule set's allowlist entry per weight dtype, else the defaults below.
Inputs are exact in the weight dtype, so only the kernel's own roundings count.
The bound is the classic a-priori bound of recursive summation (Higham, ch. 4);
it holds for any summation order, so a tree or atomic reduction passes too.

This module is the one error-bound model of the project: ``compliance verify``
uses it with the rule set's parameters (``bounds_for``), and the reference
kernels' own GPU tests (tests/kernels/kernel_bounds.py) use the same formula
with ``STRICT_BOUNDS`` (m = 1, a floor of half the smallest subnormal).
Importing it does not import torch: ``pooled_bound`` only does arithmetic on
the tensors it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compliance.ruleset import AllowlistEntry

if TYPE_CHECKING:
    import torch

ACCUMULATION_ROUNDOFF = 2.0**-24
"""u of float32, the accumulation precision every kernel is held to."""


@dataclass(frozen=True)
class Bound:
    """Error-bound parameters for one weight dtype."""

    unit_roundoff_multiplier: float
    """m: safety multiplier on the roundoff terms."""
    absolute_floor: float
    """Absolute error always accepted (sum and mean only)."""


DEFAULT_BOUNDS: Mapping[str, Bound] = {
    "float32": Bound(2.0, 1e-6),
    "float16": Bound(2.0, 1e-3),
    "bfloat16": Bound(2.0, 1e-2),
}
"""Used for dtypes the rule set's allowlist entry does not configure."""

HALF_MIN_SUBNORMAL: Mapping[str, float] = {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}
"""Half the smallest subnormal of each dtype: the absolute rounding error of a result that lands in
the subnormal range, where the relative term ``u_out * |r|`` no longer covers it."""

STRICT_BOUNDS: Mapping[str, Bound] = {dtype: Bound(1.0, floor) for dtype, floor in HALF_MIN_SUBNORMAL.items()}
"""The model without a safety margin: m = 1 and only the subnormal floor. The reference kernels'
tests hold them to it; ``DEFAULT_BOUNDS`` leave submissions the rule set's room."""


def bounds_for(entry: AllowlistEntry | None) -> dict[str, Bound]:
    """Per-dtype bounds: the entry's ``verification.tolerance`` over the defaults."""
    out = dict(DEFAULT_BOUNDS)
    if entry is None or entry.verification is None:
        return out
    for dtype, tol in entry.verification.tolerance.items():
        base = out.get(dtype, Bound(2.0, 0.0))
        out[dtype] = Bound(
            tol.unit_roundoff_multiplier if tol.unit_roundoff_multiplier is not None
            else base.unit_roundoff_multiplier,
            tol.absolute_floor if tol.absolute_floor is not None else base.absolute_floor)
    return out


def pooled_bound(mode: str, ref: torch.Tensor, abs_sum: torch.Tensor, count: torch.Tensor | int, u_out: float,
                 bound: Bound, u_acc: float = ACCUMULATION_ROUNDOFF) -> torch.Tensor:
    """The error bound of a pooled sum or mean (module docstring; docs/verification.md, "Tolerance"):
    ``count`` pooled rows per element (a tensor, or the longest bag), ``abs_sum`` the pooling of |p_k x_k|."""
    m = bound.unit_roundoff_multiplier
    if mode == "sum":
        err = m * (count * u_acc * abs_sum + u_out * ref.abs())
    else:
        err = m * (u_acc * abs_sum + (u_acc + u_out) * ref.abs())
    return err + bound.absolute_floor


def int8_output_bound(value_bound: torch.Tensor, ref: torch.Tensor, inverse_scale: torch.Tensor,
                      u_acc: float = ACCUMULATION_ROUNDOFF) -> torch.Tensor:
    """The error bound, in output values, of an int8 output ``q = round(y * s)`` saturated to [-128, 127]
    and dequantized as ``q / s`` (``s``: the inverse output scale, per element), given the bound
    ``value_bound`` of the float32 pooled value ``y`` around the float64 reference ``ref``: half a code
    for the rounding (round to nearest, either way on ties), the float32 rounding of ``y * s``, and
    ``value_bound`` itself. Saturation is 1-Lipschitz, so the bound holds against the saturated
    reference (module docstring)."""
    return 0.5 / inverse_scale + value_bound + u_acc * (ref.abs() + value_bound)
