"""Fixtures shared by the GPU test modules of tests/kernels (they opt in with usefixtures)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest


@pytest.fixture
def poison_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output the kernels allocate starts as NaN: an element they fail to write fails."""
    from reference_kernels import _launch

    monkeypatch.setattr(_launch, "POISON_OUTPUTS", True)


@pytest.fixture
def tune(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``tune(knob=value, ...)``: launch with those tuning knobs for the rest of the test."""
    from reference_kernels import tuning

    def set_knobs(**changes: Any) -> None:
        monkeypatch.setattr(tuning, "_CURRENT", replace(tuning.current(), **changes))

    return set_knobs


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> Any:
    """A CUDA generator with a fresh seed, printed and recorded (to replay a failure)."""
    import torch

    seed = random.SystemRandom().randrange(2**62)
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return torch.Generator(device="cuda").manual_seed(seed)
