"""Optimizers fused into the embedding backward (in the spirit of FBGEMM's TBE).

Give a spec to a module (``EmbeddingBag``, ``Embedding`` or ``TableBatchedEmbeddingBag``,
argument ``optimizer=``); its ``backward()`` then sums each looked-up row's gradient
(deterministically, in float32) and updates only those rows and their optimizer state in
place. The weight's ``.grad`` stays ``None``; leave the weight out of the dense optimizer.

* :class:`SGD`: ``g += weight_decay * w; w -= lr * g``.
* :class:`RowWiseAdagrad` (FBGEMM's semantics): ``g += weight_decay * w;
  s[r] += mean(g * g over the row); w -= lr * g / (sqrt(s[r]) + eps)``; one float32
  state value per row.
* :class:`Adam`: ``torch.optim.SparseAdam``'s lazy semantics: moments and bias
  correction only for the touched rows, the step count advancing once per backward;
  no weight decay (SparseAdam defines none).

Weights may be float32, float16 or bfloat16; the state is always float32, the update is
computed in float32 and rounded once to the weight's dtype: to nearest, or stochastically
(``stochastic_rounding=True``; seeded per step, so reproducible).

:func:`reference_update` is the same update written out in plain torch (any dtype, e.g.
float64): the reference the tests compare the kernels with, and the CPU implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _check_non_negative(name: str, value: float) -> None:
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class SGD:
    """Plain SGD on the touched rows; ``weight_decay`` (L2) is applied to those rows only."""

    lr: float
    weight_decay: float = 0.0
    stochastic_rounding: bool = False
    code = 0
    state_per_row = 0  # float32 state values per row (0: none)

    def __post_init__(self) -> None:
        _check_non_negative("lr", self.lr)
        _check_non_negative("weight_decay", self.weight_decay)


@dataclass(frozen=True)
class RowWiseAdagrad:
    """FBGEMM's row-wise Adagrad: one accumulator per row (the mean of g² over the row)."""

    lr: float
    eps: float = 1e-8
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    stochastic_rounding: bool = False
    code = 1
    state_per_row = 1

    def __post_init__(self) -> None:
        _check_non_negative("lr", self.lr)
        _check_non_negative("weight_decay", self.weight_decay)
        _check_non_negative("initial_accumulator_value", self.initial_accumulator_value)
        if not self.eps > 0.0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")


@dataclass(frozen=True)
class Adam:
    """torch.optim.SparseAdam's update, fused: moments of the touched rows only."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    stochastic_rounding: bool = False
    code = 2
    state_per_row = -1  # two float32 values per element (exp_avg, exp_avg_sq)

    def __post_init__(self) -> None:
        _check_non_negative("lr", self.lr)
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if not self.eps > 0.0:
            raise ValueError(f"eps must be > 0, got {self.eps!r}")

    def step_size(self, step: int) -> float:
        """lr * sqrt(1 - b2^t) / (1 - b1^t), as SparseAdam computes it (t counts from 1)."""
        b1, b2 = self.betas
        return self.lr * math.sqrt(1.0 - b2**step) / (1.0 - b1**step)


OptimizerSpec = SGD | RowWiseAdagrad | Adam
SPECS = (SGD, RowWiseAdagrad, Adam)


def check_spec(spec: Any) -> OptimizerSpec:
    if not isinstance(spec, SPECS):
        raise TypeError("optimizer must be reference_kernels.optim.SGD, RowWiseAdagrad or Adam, "
                        f"got {type(spec).__name__}")
    return spec


def new_state(spec: OptimizerSpec, num_rows: int, dim: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(state1, state2), float32: SGD none (empty), row-wise Adagrad [rows], Adam [rows, dim] twice."""
    import torch

    empty = torch.empty(0, dtype=torch.float32, device=device)
    if isinstance(spec, RowWiseAdagrad):
        return torch.full((num_rows,), spec.initial_accumulator_value, dtype=torch.float32, device=device), empty
    if isinstance(spec, Adam):
        return (torch.zeros((num_rows, dim), dtype=torch.float32, device=device),
                torch.zeros((num_rows, dim), dtype=torch.float32, device=device))
    return empty, empty


def reference_update(spec: OptimizerSpec, weight: torch.Tensor, state1: torch.Tensor, state2: torch.Tensor,
                     rows: torch.Tensor, grad: torch.Tensor, step: int) -> None:
    """The fused update written out in torch, in place, in the tensors' own dtype: ``rows``
    the distinct touched rows, ``grad`` their summed gradients ([len(rows), dim]); ``step``
    counts from 1 (Adam's bias correction)."""
    w = weight[rows]
    if isinstance(spec, Adam):
        b1, b2 = spec.betas
        m_old, v_old = state1[rows], state2[rows]
        m = m_old + (grad - m_old) * (1.0 - b1)
        v = v_old + (grad * grad - v_old) * (1.0 - b2)
        state1[rows], state2[rows] = m, v
        weight[rows] = w - spec.step_size(step) * (m / (v.sqrt() + spec.eps))
        return
    g = grad + spec.weight_decay * w
    if isinstance(spec, RowWiseAdagrad):
        s = state1[rows] + (g * g).mean(1)
        state1[rows] = s
        weight[rows] = w - (spec.lr / (s.sqrt() + spec.eps)).unsqueeze(1) * g
        return
    weight[rows] = w - spec.lr * g
