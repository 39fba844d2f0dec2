"""Issue 50 class 10: ``modes: [sum]`` must not hide a wrong mean (no build: planning and judging only).

A kernel whose declared call interface hands it the mode is also called once in each mode it does not
declare; it must refuse the mode or compute it right. The end-to-end kernels (``mode-ignored``,
``mode-refused``, ``mode-not-passed``) are in ``fixtures/hostile`` (``test_hostile.py``, slow)."""

from __future__ import annotations

from typing import Any

import pytest

from compliance.context import DeclaredKernel
from compliance.engine import build_context
from compliance.rulespecs import verify as rules
from compliance.verify.cases import UNDECLARED_MODE, Case, interface_passes_mode, undeclared_mode_cases
from compliance.verify.coverage import covered
from compliance.verify.driver import CaseOutcome, plan, undeclared_mode_outcome

from .conftest import FIXTURES


@pytest.fixture(scope="module")
def kernels() -> dict[str, DeclaredKernel]:
    ctx, _ = build_context(FIXTURES / "hostile", "training/proposal-custom-kernels")
    return {dk.kernel.id: dk for dk in ctx.kernels()}


@pytest.mark.parametrize(("build", "passes"), [
    ({"arguments": ["weight", "indices", "offsets", "out", "mode"]}, True),
    ({"arguments": ["weight", {"value": "2 * mode + 1", "type": "int32"}]}, True),
    ({"defines": {"MODE_T": {"by": "mode", "values": {"sum": "0", "mean": "1"}}}, "arguments": ["out"]}, True),
    ({"constexprs": {"MEAN": "mode == 1"}, "arguments": ["out"]}, True),
    ({"arguments": ["weight", "indices", "offsets", "out", {"value": 0}]}, False),
    ({"arguments": ["weight", "out"], "function": "mode", "options": ["-Dmode=1"]}, False),  # not the interface
])
def test_the_interface_passes_a_mode_only_through_its_expressions(build: dict[str, object], passes: bool) -> None:
    assert interface_passes_mode(build) is passes


def test_each_undeclared_mode_is_called_once_before_the_large_table(kernels: dict[str, DeclaredKernel]) -> None:
    ignored = kernels["mode-ignored"]
    cases = plan(ignored, 50, large=True)
    probes = [c for c in cases if UNDECLARED_MODE in c.tags]
    assert [c.mode for c in probes] == ["mean", "max"]
    assert cases[-1].large and cases[-3:-1] == probes
    assert 0 in probes[0].bag_lengths  # an empty bag: mean and max of nothing are 0
    assert "undeclared modes called: max, mean" in covered(cases) and "modes sum;" in covered(cases)
    not_passed = kernels["mode-not-passed"].kernel
    assert undeclared_mode_cases(not_passed.semantics, not_passed.build, 1) == []


def _outcome(*problems: dict[str, Any]) -> CaseOutcome:
    return CaseOutcome("mean-csr-float32-int64-d5-undeclared-mode", "d5", not problems, problems, None, None, None)


def _case(kernels: dict[str, DeclaredKernel]) -> Case:
    return next(c for c in plan(kernels["mode-ignored"], 50, large=False) if c.mode == "mean")


def test_a_wrong_value_in_an_undeclared_mode_is_its_own_finding(kernels: dict[str, DeclaredKernel]) -> None:
    mismatch = {"rule": rules.MISMATCH.id, "message": "3 of 25 elements outside the bound", "details": {}}
    judged = undeclared_mode_outcome(_case(kernels), _outcome(mismatch), device_only=False)
    assert not judged.passed and [p["rule"] for p in judged.problems] == [rules.UNDECLARED_MODE.id]
    assert "mode 'mean' is not among the declared modes" in judged.problems[0]["message"]


def test_raising_refuses_and_a_right_answer_passes(kernels: dict[str, DeclaredKernel]) -> None:
    raised = {"rule": rules.CRASH.id, "message": "the kernel call raised RuntimeError: sum only", "details": {}}
    refused = undeclared_mode_outcome(_case(kernels), _outcome(raised), device_only=False)
    assert refused.passed and refused.refused and refused.note == "mean refused"
    right = undeclared_mode_outcome(_case(kernels), _outcome(), device_only=False)
    assert right.passed and right.note == "mean right" and not right.refused


def test_writing_nothing_refuses_only_for_a_kernel_that_cannot_raise(kernels: dict[str, DeclaredKernel]) -> None:
    nothing = {"rule": rules.UNWRITTEN.id, "message": "25 of 25 never written",
               "details": {"unwritten": 25, "elements": 25}}
    device = undeclared_mode_outcome(_case(kernels), _outcome(nothing), device_only=True)
    assert device.passed and device.refused
    host = undeclared_mode_outcome(_case(kernels), _outcome(nothing), device_only=False)
    assert [p["rule"] for p in host.problems] == [rules.UNDECLARED_MODE.id]
    part = {**nothing, "details": {"unwritten": 5, "elements": 25}}
    partial = undeclared_mode_outcome(_case(kernels), _outcome(part), device_only=True)
    assert not partial.passed


def test_a_breach_of_conduct_stays_what_it_is(kernels: dict[str, DeclaredKernel]) -> None:
    breach = {"rule": rules.OUT_OF_BOUNDS_WRITE.id, "message": "wrote past the output", "details": {}}
    mismatch = {"rule": rules.MISMATCH.id, "message": "wrong", "details": {}}
    judged = undeclared_mode_outcome(_case(kernels), _outcome(breach, mismatch), device_only=False)
    assert [p["rule"] for p in judged.problems] == [rules.UNDECLARED_MODE.id, rules.OUT_OF_BOUNDS_WRITE.id]
