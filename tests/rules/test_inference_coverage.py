"""The verification minimum of DLRM embedding kernels in the inference rule sets (issue 50 class 10).

Training rule sets carried it since the minimum was introduced; the inference ones carried none, so a
kernel declared under an inference rule set could choose its own coverage without a word. Every
inference round with DLRMv2 among its benchmarks now states the DCNv2 inference reference's shapes, at
warning level (no inference round decided on custom kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.engine import build_context
from compliance.ruleset import load_ruleset
from compliance.verify.driver import coverage_finding

RULES = Path(__file__).resolve().parents[2] / "rules" / "inference"
HOSTILE_TREE = Path(__file__).resolve().parents[1] / "verify" / "fixtures" / "hostile"
INFERENCE = sorted(f"inference/{p.stem}" for p in RULES.glob("v*.yaml"))
WITH_DLRM_V2 = [r for r in INFERENCE if any(b.startswith("dlrm-v2") for b in load_ruleset(r).benchmarks)]


def test_dlrm_v2_rounds_are_the_ones_from_v3_1_on() -> None:
    assert WITH_DLRM_V2 == ["inference/v3.1", "inference/v4.0", "inference/v4.1", "inference/v5.0",
                            "inference/v5.1"]


@pytest.mark.parametrize("ruleset", WITH_DLRM_V2)
def test_each_dlrm_v2_round_states_the_reference_shapes_as_a_warning(ruleset: str) -> None:
    rules = load_ruleset(ruleset)
    minimum = rules.verification_coverage["dlrm-embedding"]
    assert (minimum["dims"], minimum["lookups"], minimum["tables"], minimum["max_rows"], minimum["modes"]) == (
        [128], {"min": 1, "max": 100}, 26, 40_000_000, ["sum"])
    urls = [d["url"] for d in minimum["provenance"]["documents"]]
    assert urls and all("github.com/mlcommons/inference/blob/" in u and "/dlrm_v2/" in u for u in urls)
    assert rules.check_config("verify-coverage-narrow").level == "warning"


def test_a_narrow_kernel_under_an_inference_round_gets_a_warning_naming_the_reference() -> None:
    ctx, _ = build_context(HOSTILE_TREE, "inference/v5.1")
    narrow = next(dk for dk in ctx.kernels() if dk.kernel.id == "narrow-domain")
    finding = coverage_finding(ctx, narrow, [])
    assert finding is not None and finding.rule_id == "verify-coverage-narrow"
    assert finding.severity.value == "warning"
    assert "dim 128" in finding.message and "bags of 100 lookups" in finding.message
    assert "mlcommons/inference" in finding.message


def test_rounds_before_dlrm_v2_state_no_minimum() -> None:
    """DLRM (v1, one-hot) of inference v0.7 to v3.0 has no minimum here: none is claimed for it."""
    for ruleset in sorted(set(INFERENCE) - set(WITH_DLRM_V2)):
        assert "dlrm-embedding" not in load_ruleset(ruleset).verification_coverage, ruleset
