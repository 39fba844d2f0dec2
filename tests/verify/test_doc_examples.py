"""Every complete manifest example in docs/verification.md is valid: schema, build block, cases."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compliance.manifest import parse_manifest
from compliance.verify.build import parse_build
from compliance.verify.cases import generate_cases

DOC = Path(__file__).resolve().parents[2] / "docs" / "verification.md"
EXAMPLES = [block for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)
            if block.startswith("manifest_version: 1")]


def test_one_example_per_semantics() -> None:
    text = "\n".join(EXAMPLES)
    for needle in ("output_dtypes:", "tables:", "domain:", "gradient: dense", "gradient: sparse", "kind: sgd",
                   "kind: rowwise_adagrad", "kind: triton", "kind: nvrtc", "kind: torch_extension",
                   "gradient: sparse_coo", "gradient: rows", "dtypes:", "grad_weight:", "multiple_of:",
                   "build_dependencies:", "verification_shims:", ", true]", "quantization:", "output: int8"):
        assert needle in text, needle


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: re.search(r"id: (\S+)", e).group(1))  # type: ignore[union-attr]
def test_example_is_valid(example: str) -> None:
    manifest = parse_manifest(example, Path("kernel_manifest.yaml"))
    assert manifest.problems == () and len(manifest.kernels) == 1
    kernel = manifest.kernels[0]
    parse_build(kernel.build, language=kernel.language, sources=kernel.sources, root=Path("/tree"),
                manifest_rel_dir="impl")
    assert generate_cases(kernel.semantics, 1, large=False)
