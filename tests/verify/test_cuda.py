"""On the GPU: NVRTC fixtures (honest passes, each adversarial one caught), table-batched and
fused-SGD kernels through NVRTC (cuda-python) and Triton, the example submission's CUDA extension
kernels and reference_kernels through the same verifier."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from compliance.engine import build_context
from compliance.findings import Finding
from compliance.verify import run_verification_checks
from compliance.verify.options import VerifyOptions

from .conftest import CUDA_BATCHED_TREE, CUDA_QUANTIZED_TREE, CUDA_SHAPES_TREE, CUDA_TREE, RULES
from .test_cpu_quantized import CAUGHT as QUANTIZED_CAUGHT
from .test_cpu_quantized import PASSING as QUANTIZED_PASSING
from .test_cpu_shapes import CAUGHT as SHAPES_CAUGHT
from .test_cpu_shapes import PASSING as SHAPES_PASSING

pytestmark = pytest.mark.cuda

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {
    "nvrtc-good": "verify-passed",
    "nvrtc-empty": "verify-unwritten",
    "nvrtc-partial-write": "verify-unwritten",
    "nvrtc-empty-bag-mean": "verify-mismatch",
    "nvrtc-reads-past-table": "verify-mismatch",
    "nvrtc-hang": "verify-timeout",
}


def _verify(tree: Path, build_root: Path, rules: str | None = None) -> dict[str, list[Finding]]:
    ctx, _ = build_context(tree, rules)
    started = time.monotonic()
    options = VerifyOptions(seed=20260611, build_dir=build_root)
    by_kernel: dict[str, list[Finding]] = defaultdict(list)
    for f in run_verification_checks(ctx, options):
        by_kernel[f.kernel or "-"].append(f)
        print(f"{f.severity.value}: {f.kernel}: {f.message} [{f.rule_id}]")
    print(f"verified {tree} in {time.monotonic() - started:.1f} s")
    return by_kernel


@pytest.fixture(scope="module")
def fixtures(build_root: Path) -> dict[str, list[Finding]]:
    return _verify(CUDA_TREE, build_root, RULES)


# Tests sharing a module fixture form one xdist group, so under `-n N --dist loadgroup` each
# fixture (a whole verification run) is built once, on one worker, while the others run beside it.
NVRTC_GROUP = pytest.mark.xdist_group("nvrtc-fixtures")
BATCHED_GROUP = pytest.mark.xdist_group("batched-fixtures")
SHAPES_GROUP = pytest.mark.xdist_group("shapes-fixtures")


@NVRTC_GROUP
@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_nvrtc_fixture(fixtures: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in fixtures[kernel]}
    assert EXPECTED[kernel] in rules, [f.message for f in fixtures[kernel]]
    assert (rules == {"verify-passed"}) == (EXPECTED[kernel] == "verify-passed")


@NVRTC_GROUP
def test_nvrtc_overflow_caught_on_large_table(fixtures: dict[str, list[Finding]]) -> None:
    got = fixtures["nvrtc-overflow32"]
    assert got and {f.rule_id for f in got} <= {"verify-crash", "verify-mismatch"}, [f.message for f in got]


def test_example_submission_passes(build_root: Path) -> None:
    found = _verify(REPO / "submissions_example", build_root)
    assert found and all({f.rule_id for f in fs} == {"verify-passed"} for fs in found.values()), found


def test_reference_kernels_pass(build_root: Path) -> None:
    manifest = REPO / "reference_kernels" / "kernel_manifest.yaml"
    if not manifest.is_file():
        pytest.fail("reference_kernels/kernel_manifest.yaml is missing")
    found = _verify(REPO / "reference_kernels", build_root)
    assert found and all({f.rule_id for f in fs} == {"verify-passed"} for fs in found.values()), found


BATCHED_CAUGHT = {
    "nvrtc-tb-bag-wrong-table-offset": "verify-mismatch",
    "nvrtc-sgd-drops-duplicates": "verify-update-mismatch",
    "triton-dlrm-gather-wrong-table-offset": "verify-mismatch",
}
ATOMIC = {"nvrtc-tb-sgd", "triton-tb-sgd"}
"""Updates through atomics: the order of the additions may differ between the two runs."""


@pytest.fixture(scope="module")
def batched(build_root: Path) -> dict[str, list[Finding]]:
    return _verify(CUDA_BATCHED_TREE, build_root, RULES)


@BATCHED_GROUP
@pytest.mark.parametrize("kernel", ["nvrtc-tb-bag", "nvrtc-tb-sgd", "triton-dlrm-gather", "triton-tb-sgd"])
def test_batched_kernel_passes(batched: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in batched[kernel]}
    allowed = {"verify-passed"} | ({"verify-nondeterministic"} if kernel in ATOMIC else set())
    assert rules and rules <= allowed, [f.message for f in batched[kernel]]


@BATCHED_GROUP
@pytest.mark.parametrize("kernel", sorted(BATCHED_CAUGHT))
def test_batched_twin_caught(batched: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in batched[kernel]}
    assert BATCHED_CAUGHT[kernel] in rules and "verify-passed" not in rules, [f.message for f in batched[kernel]]


@BATCHED_GROUP
def test_triton_gather_report_states_its_domain(batched: dict[str, list[Finding]]) -> None:
    passed = batched["triton-dlrm-gather"][0]
    assert "domain: dim 128 only, 26 tables" in passed.message
    assert "imported only triton_kernels.py" in passed.message and dict(passed.details)["imported"]


@pytest.fixture(scope="module")
def shapes(build_root: Path) -> dict[str, list[Finding]]:
    """Issue 35's real-kernel shapes in CUDA (the twins of tests/verify/fixtures/cpu_shapes)."""
    return _verify(CUDA_SHAPES_TREE, build_root, RULES)


@SHAPES_GROUP
@pytest.mark.parametrize("kernel", SHAPES_PASSING)
def test_real_shape_passes_on_the_gpu(shapes: dict[str, list[Finding]], kernel: str) -> None:
    """Every case within its bound: verify-passed, or (a rows gradient summed with atomics, as the
    CUDA twin of tb-gather-backward-rows does) the nondeterminism warning in its place; no error."""
    rules = {f.rule_id for f in shapes[kernel]}
    assert rules in ({"verify-passed"}, {"verify-nondeterministic"}), [f.message for f in shapes[kernel]]
    assert all(f.severity.value != "error" for f in shapes[kernel])


@SHAPES_GROUP
@pytest.mark.parametrize("kernel", sorted(SHAPES_CAUGHT))
def test_real_shape_mutant_caught_on_the_gpu(shapes: dict[str, list[Finding]], kernel: str) -> None:
    rules = {f.rule_id for f in shapes[kernel]}
    assert SHAPES_CAUGHT[kernel] in rules and "verify-passed" not in rules, [f.message for f in shapes[kernel]]


QUANTIZED_GROUP = pytest.mark.xdist_group("quantized-fixtures")


@pytest.fixture(scope="module")
def quantized(build_root: Path) -> dict[str, list[Finding]]:
    return _verify(CUDA_QUANTIZED_TREE, build_root, RULES)


@QUANTIZED_GROUP
@pytest.mark.parametrize("kernel", QUANTIZED_PASSING + QUANTIZED_CAUGHT)
def test_quantized_plugin_and_its_mutants_on_the_gpu(quantized: dict[str, list[Finding]], kernel: str) -> None:
    """The CUDA int8 plugin of tests/verify/fixtures/cuda_quantized (enqueue with raw pointers and a
    stream, bound by a verification shim): the verdicts of its CPU twin (test_cpu_quantized.py)."""
    rules = {f.rule_id for f in quantized[kernel]}
    expected = {"verify-passed"} if kernel in QUANTIZED_PASSING else {"verify-mismatch"}
    assert rules == expected, [f.message for f in quantized[kernel]]
