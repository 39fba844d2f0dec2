"""End to end on the CPU, a quantized table (issue 54): the C++ twin of a TensorRT-style int8 embedding
plugin (int8 tables, a scale and an inverse scale per table, int8 or fp16 output; its enqueue takes raw
pointers and a stream and is callable only through a verification shim). The honest plugin passes with
each output and with its scales as scalar arguments; a wrong scale, truncation instead of rounding and
a dropped table fail verify-mismatch, the dropped table named."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.findings import Finding

from .conftest import CPU_QUANTIZED_TREE, findings_by_kernel

pytestmark = pytest.mark.slow

PASSING = ("int8-plugin", "int8-plugin-fp16-out", "int8-plugin-scalar-scale")
CAUGHT = ("int8-plugin-wrong-scale", "int8-plugin-truncates", "int8-plugin-drops-table")


@pytest.fixture(scope="module")
def findings(build_root: Path) -> dict[str, list[Finding]]:
    return findings_by_kernel(CPU_QUANTIZED_TREE, build_root, 20261202)


@pytest.mark.parametrize("kernel", PASSING)
def test_the_plugin_passes(findings: dict[str, list[Finding]], kernel: str) -> None:
    assert {f.rule_id for f in findings[kernel]} == {"verify-passed"}, [f.message for f in findings[kernel]]
    passed = findings[kernel][0]
    assert "verified through shim plugin_shim.cpp" in passed.message


@pytest.mark.parametrize("kernel", CAUGHT)
def test_each_mutant_fails(findings: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in findings[kernel]}
    assert rules == {"verify-mismatch"}, [f.message for f in findings[kernel]]
    cases = dict(findings[kernel][0].details)
    assert cases["cases_run"] == cases["cases_planned"]


def test_the_dropped_table_is_named(findings: dict[str, list[Finding]]) -> None:
    message = findings["int8-plugin-drops-table"][0].message
    tables = message.split("wrong in table(s) [")[1].split("]")[0]
    total = int(message.split("] of ")[1].split(" ")[0].rstrip(";"))
    assert tables == str(total - 1), message


def test_truncation_is_off_by_less_than_a_code(findings: dict[str, list[Finding]]) -> None:
    """Truncating instead of rounding costs at most one code: caught by the half-code rounding term."""
    for case in dict(findings["int8-plugin-truncates"][0].details)["cases"]:
        assert 1.0 < case["worst_ratio"] < 3.0, case
