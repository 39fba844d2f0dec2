"""examples/dlrm/loss_curves.py: the noise envelope and the tolerance made of it (pure Python)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

PATH = Path(__file__).resolve().parents[2] / "examples" / "dlrm" / "loss_curves.py"


def load() -> Any:
    spec = importlib.util.spec_from_file_location("loss_curves_under_test", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


lc = load()
losses = st.floats(0.0, 2.0, allow_nan=False, width=32)


@st.composite
def curves(draw: Any) -> tuple[list[float], list[list[float]]]:
    steps = draw(st.integers(1, 30))
    reference = draw(st.lists(losses, min_size=steps, max_size=steps))
    noise = draw(st.lists(st.lists(losses, min_size=steps, max_size=steps), min_size=1, max_size=3))
    return reference, noise


@settings(max_examples=40, deadline=None)
@given(curves())
def test_the_envelope_is_a_running_maximum_and_every_noise_run_is_within(case: Any) -> None:
    """The envelope never shrinks, bounds every noise run at every step, and so each noise run
    agrees with the reference (at 1 / FACTOR of the tolerance at most)."""
    reference, noise = case
    env = lc.envelope(reference, noise)
    assert all(a <= b for a, b in zip(env, env[1:], strict=False))
    assert all(abs(run[s] - reference[s]) <= env[s] for run in noise for s in range(len(reference)))
    tol = lc.tolerance(env)
    for run in noise:
        result = lc.agreement(run, reference, tol)
        assert result.ok and result.worst_ratio <= 1 / lc.FACTOR + 1e-12


def test_a_curve_past_the_tolerance_is_named_with_its_step() -> None:
    reference = [0.7, 0.6, 0.5, 0.4]
    noise = [[0.7, 0.6 + 1e-4, 0.5, 0.4]]  # envelope 0, 1e-4, 1e-4, 1e-4
    assert lc.tolerance(lc.envelope(reference, noise)) == pytest.approx([lc.FLOOR, *[lc.FACTOR * 1e-4] * 3])
    inside = lc.agreement([0.7, 0.6, 0.5 + 3e-4, 0.4], reference, lc.tolerance(lc.envelope(reference, noise)))
    assert inside.ok and inside.worst_step == 2
    outside = lc.agreement([0.7 + 2e-6, 0.6, 0.5, 0.4], reference, lc.tolerance(lc.envelope(reference, noise)))
    assert not outside.ok and outside.worst_step == 0 and outside.worst_ratio == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least one noise run"):
        lc.envelope(reference, [])


def test_the_command_line_checks_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def write(name: str, values: list[float]) -> str:
        (tmp_path / f"{name}.json").write_text(json.dumps({"losses": values}))
        return str(tmp_path / f"{name}.json")

    ref, noise = write("n1", [0.7, 0.6, 0.5]), write("rev", [0.7, 0.6001, 0.5002])
    good, bad = write("n2", [0.7, 0.6002, 0.4995]), write("far", [0.7, 0.6, 0.49])
    same = write("as2", [0.7, 0.6002, 0.4995])
    assert lc.main([ref, "--noise", noise, "--check", good, "--exact", same, good]) == 0
    text = capsys.readouterr().out
    assert "n2 vs as2: max |difference| over 3 steps: 0.00e+00 (the same floats)" in text
    assert "n2: max |loss - reference| 5.00e-04 over 3 steps" in text and "within" in text
    assert lc.main([ref, "--noise", noise, "--check", bad]) == 1
    assert "far: max |loss - reference| 1.00e-02" in capsys.readouterr().out
    assert lc.main(["--exact", ref, good]) == 1
