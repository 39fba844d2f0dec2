"""End to end on the CPU, the kernel shapes real DLRM submissions ship (issue 35): a 2020-style gather
backward returning a sparse COO tensor whose values are its incoming gradient; a table-batched gather with
float32 tables, float16 output and a float16 -> float32 AMP backward (sparse COO, and row ids + rows);
all bound in one pybind module with another kernel (build dependencies) and a verification shim. One build
(four files) serves every kernel; each mutant fails with the rule that names its flaw."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.findings import Finding

from .conftest import CPU_SHAPES_TREE, findings_by_kernel

pytestmark = pytest.mark.slow

PASSING = ("gather2020-backward", "tb-gather-forward-f16", "tb-gather-backward-amp", "tb-gather-backward-rows")
CAUGHT = {
    "gather2020-backward-drops-duplicate": "verify-mismatch",
    "tb-gather-backward-wrong-offset": "verify-gradient-rows",
    "tb-gather-backward-f16-gradient": "verify-output-invalid",
}


@pytest.fixture(scope="module")
def findings(build_root: Path) -> dict[str, list[Finding]]:
    return findings_by_kernel(CPU_SHAPES_TREE, build_root, 20261126)


@pytest.mark.parametrize("kernel", PASSING)
def test_real_shape_passes(findings: dict[str, list[Finding]], kernel: str) -> None:
    assert {f.rule_id for f in findings[kernel]} == {"verify-passed"}, [f.message for f in findings[kernel]]


@pytest.mark.parametrize("kernel", sorted(CAUGHT))
def test_mutant_gets_its_rule(findings: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in findings[kernel]}
    assert CAUGHT[kernel] in rules and "verify-passed" not in rules, [f.message for f in findings[kernel]]


def test_wrong_offset_names_rows_and_tables(findings: dict[str, list[Finding]]) -> None:
    message = next(f.message for f in findings["tb-gather-backward-wrong-offset"]
                   if f.rule_id == "verify-gradient-rows")
    assert "referenced row(s) missing" in message and "wrong in table(s)" in message


def test_report_names_dependencies_and_shims(findings: dict[str, list[Finding]]) -> None:
    passed = findings["gather2020-backward"][0]
    details = dict(passed.details)
    assert details["build_dependencies"] == ["interaction.cpp", "pybind.cpp"]
    assert details["verification_shims"] == ["verify_shim.cpp"]
    assert "verified through shim verify_shim.cpp" in passed.message
    assert "dim 4..256, a multiple of 4" in findings["tb-gather-forward-f16"][0].message
