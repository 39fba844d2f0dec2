"""Issue 50 on the GPU: a zeros kernel bound through a shim, a runner patched to call torch's
embedding_bag, and a victim whose source another kernel rewrites all fail; the honest twin passes.
Launch evidence comes from CUDA's profiling interface (CUPTI) in the verifier's preloaded probe."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from compliance.engine import build_context
from compliance.findings import Finding
from compliance.verify import run_verification_checks
from compliance.verify.options import VerifyOptions

from .conftest import FIXTURES

pytestmark = pytest.mark.cuda

TREE = FIXTURES / "hostile_cuda"
EXPECTED = {
    "shim-forge": {"verify-entry-not-run"},
    "shim-forge-same-name": {"verify-entry-not-run"},
    "through-shim": {"verify-passed"},
    "patched-runner": {"verify-entry-not-run"},
    "helper": {"verify-passed"},
    "mode-ignored": {"verify-undeclared-mode"},  # class 10: modes [sum] hid a wrong mean
    "victim": {"verify-mismatch", "verify-undeclared-mode"},  # zeros in every mode it is handed
}


@pytest.fixture(scope="module")
def hostile(build_root: Path) -> dict[str, list[Finding]]:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    ctx, _ = build_context(TREE, "training/proposal-custom-kernels")
    lines: list[str] = []
    options = VerifyOptions(seed=50, build_dir=build_root, large=False, progress=lines.append)
    by_kernel: dict[str, list[Finding]] = defaultdict(list)
    for f in run_verification_checks(ctx, options):
        by_kernel[f.kernel or "-"].append(f)
    for f in (f for fs in by_kernel.values() for f in fs):
        print(f"{f.kernel}: {f.rule_id}: {f.message[:400]}")
    return by_kernel


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_hostile_cuda_kernel_gets_its_verdict(hostile: dict[str, list[Finding]], kernel: str) -> None:
    found = hostile[kernel]
    assert {f.rule_id for f in found} == EXPECTED[kernel], [f.message for f in found]


def test_patched_runner_names_torchs_kernels(hostile: dict[str, list[Finding]]) -> None:
    message = hostile["patched-runner"][0].message
    assert "none of the declared kernel functions (patched_zeros_kernel)" in message


def test_the_honest_twin_refuses_the_modes_it_does_not_declare(hostile: dict[str, list[Finding]]) -> None:
    """Class 10 on the GPU: mean, then max, each refused by a raise; the CUDA context survives the first
    refusal, so the second case runs too (before the large table)."""
    message = hostile["through-shim"][0].message
    # a raise from nvcc-compiled host code ends the process on some platforms (the lent H200's torch 2.11:
    # SIGSEGV in a plain load_inline extension too): the verifier counts that as the refusal it is
    ended = r"( \(the process ended: signal \d+\))?"
    assert re.search(rf"undeclared modes: mean refused{ended}, max refused", message), message
