"""Fixtures shared by the GPU test modules of tests/kernels (they opt in with usefixtures)."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest


@pytest.fixture
def poison_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every output the kernels allocate starts as NaN: an element they fail to write fails."""
    from reference_kernels import launch

    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


@pytest.fixture
def drained_ledger(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The default index check mode (no environment override), and no error left over for the
    next test."""
    import reference_kernels as rk
    from reference_kernels import index_check as ic

    monkeypatch.delenv(ic.MODE_ENV, raising=False)
    monkeypatch.delenv(ic.SKIP_ENV, raising=False)
    rk.check_index_errors()
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rk.check_index_errors()
        except rk.EmbeddingIndexError:
            pass


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
