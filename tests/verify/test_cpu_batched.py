"""End to end on the CPU, the semantics real submissions ship: table-batched bags with a float16
output, a dim-128-only gather verified inside its declared domain, backward passes (dense and
sparse gradients, fused SGD and row-wise Adagrad). Each adversarial twin fails with its rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.findings import Finding

from .conftest import CPU_BATCHED_TREE, findings_by_kernel

pytestmark = pytest.mark.slow

PASSING = ("tb-bag-f32-to-f16", "tb-bag-any-dtype", "dlrm-gather-d128", "tb-sgd", "rowwise-adagrad",
           "tb-dense-gradient",
           "sparse-gradient")
CAUGHT = {
    "tb-bag-wrong-table-offset": {"verify-mismatch"},
    "tb-bag-rounds-through-table-dtype": {"verify-mismatch"},
    "half-accumulation": {"verify-mismatch", "verify-accumulation-precision"},
    "sgd-wrong-sign": {"verify-update-mismatch"},
    "sgd-no-learning-rate": {"verify-update-mismatch"},
    "sgd-drops-duplicates": {"verify-update-mismatch"},
    "sgd-touches-all-rows": {"verify-untouched-row-modified"},
}


@pytest.fixture(scope="module")
def findings(build_root: Path) -> dict[str, list[Finding]]:
    return findings_by_kernel(CPU_BATCHED_TREE, build_root, 20261123)


@pytest.mark.parametrize("kernel", PASSING)
def test_honest_kernels_pass(findings: dict[str, list[Finding]], kernel: str) -> None:
    assert {f.rule_id for f in findings[kernel]} == {"verify-passed"}, [f.message for f in findings[kernel]]


@pytest.mark.parametrize("kernel", sorted(CAUGHT))
def test_adversarial_twin_gets_its_rule(findings: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in findings[kernel]}
    assert CAUGHT[kernel] <= rules and "verify-passed" not in rules, [f.message for f in findings[kernel]]


def _message(findings: dict[str, list[Finding]], kernel: str, rule: str) -> str:
    return next(f.message for f in findings[kernel] if f.rule_id == rule)


def test_wrong_offset_names_the_tables(findings: dict[str, list[Finding]]) -> None:
    message = _message(findings, "tb-bag-wrong-table-offset", "verify-mismatch")
    assert "wrong in table(s) [1" in message and "[0" not in message.split("wrong in table(s)")[1][:3]
    assert "verify-accumulation-precision" not in {f.rule_id for f in findings["tb-bag-wrong-table-offset"]}


def test_a_16_bit_temporary_is_not_called_half_accumulation(findings: dict[str, list[Finding]]) -> None:
    """A float16 table written as float32 through a float16 temporary: one rounding too many (the bound
    has the float32 output's), not a sum in half precision."""
    assert "verify-accumulation-precision" not in {f.rule_id for f in findings["tb-bag-rounds-through-table-dtype"]}


def test_dropped_duplicates_are_wrong_only_on_repeated_rows(findings: dict[str, list[Finding]]) -> None:
    for f in findings["sgd-drops-duplicates"]:
        for case in dict(f.details)["cases"]:
            assert " 0 of " in case["message"].split("rows referenced once")[0].split(":")[-1], case["message"]


def test_half_accumulation_fails_the_long_bags(findings: dict[str, list[Finding]]) -> None:
    f = next(f for f in findings["half-accumulation"] if f.rule_id == "verify-accumulation-precision")
    assert any("L1000" in c["case"] for c in dict(f.details)["cases"])


def test_report_states_the_domain(findings: dict[str, list[Finding]]) -> None:
    passed = findings["dlrm-gather-d128"][0]
    assert "domain: dim 128 only, 26 tables, 1 lookup per bag" in passed.message
    assert dict(passed.details)["domain"].startswith("dim 128 only")
    assert "unrestricted" in dict(findings["tb-sgd"][0].details)["domain"]
