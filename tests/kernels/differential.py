"""Random calls of ``embedding_bag`` for the differential tests against torch (issue 54, item 5).

``random_call`` draws one call over dtypes, widths, modes, 1-D (with offsets, with and without
the last offset) and 2-D input, padding, per-sample weights, ``max_norm`` and the gradient it asks
for (none, dense, sparse), plus the odd inputs torch refuses or returns oddly: offsets whose first
entry is not 0, a single offset, an empty 2-D input ``B x 0``. ``outcome`` runs one call with a
given function and returns what came out: the output and the weight's gradient, or the exception.
The tests compare ours (CUDA, ``check_indices="sync"``) with ``torch.nn.functional.embedding_bag``
on the CPU: the same refusals, and values within the error bound of the float64 result.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)
DIMS = (1, 5, 64, 129)
MODES = ("sum", "mean", "max")


@dataclass
class Call:
    """One call's arguments (CPU tensors) and what it asks for."""

    input: torch.Tensor
    weight: torch.Tensor
    offsets: torch.Tensor | None
    mode: str
    include_last_offset: bool = False
    padding_idx: int | None = None
    per_sample_weights: torch.Tensor | None = None
    max_norm: float | None = None
    grad: str = "none"
    """``none``, ``dense`` or ``sparse`` (``sparse=True``)."""
    tags: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        off = None if self.offsets is None else self.offsets.tolist()
        return (f"input {list(self.input.shape)} {self.input.dtype} offsets={off} weight {list(self.weight.shape)} "
                f"{self.weight.dtype} mode={self.mode} last={self.include_last_offset} pad={self.padding_idx} "
                f"psw={self.per_sample_weights is not None} max_norm={self.max_norm} grad={self.grad} {self.tags}")


def _lengths(rng: random.Random, bags: int) -> list[int]:
    return [rng.choice((0, 1, 2, 3, 7)) for _ in range(bags)]


def random_call(rng: random.Random, odd: float = 0.25) -> Call:
    """One call; with probability ``odd`` one of the odd inputs of issue 54."""
    dtype, index_dtype = rng.choice(DTYPES), rng.choice(INDEX_DTYPES)
    rows, dim, mode = rng.randint(1, 40), rng.choice(DIMS), rng.choice(MODES)
    gen = torch.Generator().manual_seed(rng.getrandbits(62))
    weight = torch.randn(rows, dim, generator=gen).to(dtype)
    layout = rng.choice(("2d", "1d", "1d_last"))
    tags: list[str] = []
    offsets = None
    if layout == "2d":
        bags, length = rng.randint(0, 6), rng.randint(1, 5)
        if rng.random() < odd:
            length, tags = 0, ["B x 0"]
        indices = torch.randint(0, rows, (bags, length), generator=gen)
    else:
        lengths = _lengths(rng, rng.randint(0, 6))
        starts = [0]
        for n in lengths:
            starts.append(starts[-1] + n)
        indices = torch.randint(0, rows, (starts[-1],), generator=gen)
        offsets = torch.tensor(starts if layout == "1d_last" else starts[:-1], dtype=torch.int64)
        if rng.random() < odd and indices.numel():
            offsets[0] = rng.randint(1, indices.numel())  # the first bag does not start at 0
            offsets = torch.maximum(offsets, offsets[0])
            tags.append("offsets[0] != 0")
        elif rng.random() < odd:
            offsets = torch.tensor([rng.choice((0, 0, 1))], dtype=torch.int64)  # a single offset
            tags.append("single offset")
        offsets = offsets.to(index_dtype)
    indices = indices.to(index_dtype)
    padding_idx = rng.choice((None, None, rng.randint(-rows, rows - 1)))
    psw = None
    if rng.random() < 0.3:  # also with mean and max: torch refuses those, and so must we
        psw = torch.randn(indices.shape, generator=gen).to(dtype)
    max_norm = rng.choice((None, None, None, 1.0))
    grad = rng.choice(("none", "dense", "sparse"))
    if mode == "max" and grad == "sparse":
        grad = "dense"
    return Call(indices, weight, offsets, mode, layout == "1d_last", padding_idx, psw, max_norm, grad, tuple(tags))


@dataclass
class Outcome:
    """What a call gave: the output and the weight's gradient (dense, float64), or the exception."""

    out: torch.Tensor | None = None
    grad_weight: torch.Tensor | None = None
    weight_after: torch.Tensor | None = None
    """The table after the call (``max_norm`` renormalises looked-up rows in place)."""
    error: BaseException | None = None


def outcome(fn: Callable[..., torch.Tensor], call: Call, device: str, dtype: torch.dtype | None = None,
            **extra: Any) -> Outcome:
    """Run ``fn`` (an ``embedding_bag``) on ``device``, the table in ``dtype`` (default: the call's); the
    gradient of ``sum(out * g)`` for a fixed ``g`` when the call asks for one."""
    weight = call.weight.to(device, dtype or call.weight.dtype).clone()
    weight.requires_grad_(call.grad != "none")
    psw = None if call.per_sample_weights is None else call.per_sample_weights.to(device, weight.dtype)
    try:
        out = fn(call.input.to(device), weight, None if call.offsets is None else call.offsets.to(device),
                 max_norm=call.max_norm, mode=call.mode, sparse=call.grad == "sparse", per_sample_weights=psw,
                 include_last_offset=call.include_last_offset, padding_idx=call.padding_idx, **extra)
        grad = None
        if call.grad != "none" and out.numel():
            g = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
            (out * g.to(device, out.dtype)).sum().backward()
            grad = weight.grad
            if grad is not None and grad.is_sparse:
                grad = grad.to_dense()
            grad = None if grad is None else grad.detach().to("cpu", torch.float64)
        if device == "cuda":
            torch.cuda.synchronize()
    except (RuntimeError, ValueError, TypeError, NotImplementedError, IndexError) as exc:
        return Outcome(error=exc)
    return Outcome(out.detach().to("cpu", torch.float64), grad, weight.detach().to("cpu", torch.float64))


def num_bags(call: Call) -> int:
    """Bags of the call (2-D: its rows; 1-D: its offsets, less the last one with include_last_offset)."""
    if call.offsets is None:
        return call.input.shape[0]
    return call.offsets.numel() - int(call.include_last_offset)


FIRST_OFFSET = "offsets[0] has to be 0"
"""torch's refusal of a first offset that is not 0 (its CPU kernel's check)."""


def reference(call: Call) -> Outcome:
    """torch on the CPU in the call's dtypes (its refusals, and the table ``max_norm`` leaves), values in
    float64 on that table (the reference). Calls with indices but no bag are never given to torch's CPU
    kernel, which crashes the process on them (torch 2.13, a segmentation fault: float64 tables in every
    mode, max mode and sparse gradients in every dtype): torch's answer there is what it says for the same
    call without indices (an argument error, or the empty [0, D]), or, where that is the empty result, its
    refusal of a first offset that is not 0."""
    if call.offsets is not None and num_bags(call) == 0 and call.input.numel() > 0:
        psw = None if call.per_sample_weights is None else call.per_sample_weights[:0]
        without = reference(Call(call.input[:0], call.weight, torch.zeros_like(call.offsets), call.mode,
                                 call.include_last_offset, call.padding_idx, psw, call.max_norm, call.grad, call.tags))
        if without.error is None and call.offsets.numel() and int(call.offsets[0]) != 0:
            return Outcome(error=RuntimeError(FIRST_OFFSET))
        if without.error is None and call.max_norm is not None:
            # F.embedding_bag renormalises every looked-up row before its kernel runs, bag or no bag
            weight = call.weight.clone()
            with torch.no_grad():
                torch.embedding_renorm_(weight, call.input.reshape(-1), call.max_norm, 2.0)
            without.weight_after = weight.to(torch.float64)
        return without
    native = outcome(F.embedding_bag, call, "cpu")
    if native.error is not None or native.weight_after is None:
        return native
    renormed = Call(call.input, native.weight_after.to(call.weight.dtype), call.offsets, call.mode,
                    call.include_last_offset, call.padding_idx, call.per_sample_weights, None, call.grad, call.tags)
    exact = outcome(F.embedding_bag, renormed, "cpu", torch.float64)
    exact.weight_after = native.weight_after
    return exact


def bound(call: Call, ref: torch.Tensor, abs_ref: torch.Tensor) -> torch.Tensor:
    """The verifier's pooled bound (float32 accumulation, one rounding to the table's dtype), with the
    call's whole index count as the bag length: loose for short bags, never too tight."""
    from compliance.verify import tolerance, vocabulary

    name = str(call.weight.dtype).removeprefix("torch.")
    u_out = vocabulary.UNIT_ROUNDOFF[name]
    return tolerance.pooled_bound("sum", ref, abs_ref, call.input.numel() + 1, u_out, tolerance.DEFAULT_BOUNDS[name])


def absolute(call: Call) -> Call:
    """The same call on |weight| and |per_sample_weights| (its pooled output is the bound's A)."""
    psw = None if call.per_sample_weights is None else call.per_sample_weights.abs()
    mode = "sum" if call.mode == "max" else call.mode
    return Call(call.input, call.weight.abs(), call.offsets, mode, call.include_last_offset, call.padding_idx, psw,
                None, "none", call.tags)
