"""The manifest's `build:` block: schema shape (additionalProperties false) and semantic checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compliance.manifest import parse_manifest
from compliance.verify.build import BuildError, ExtensionBuild, NvrtcBuild, parse_build

BASE = """\
manifest_version: 1
kernels:
  - id: k
    category: dlrm-embedding
    language: {language}
    sources: [k.cu, inc/common.cuh]
    entry_symbols: [bag]
    semantics: {{op: embedding_bag, modes: [sum], layouts: [csr]}}
    build:
{build}
"""

NVRTC = """\
      kind: nvrtc
      entry: bag
      options: [--std=c++17]
      include_dirs: [inc]
      defines:
        BLOCK: 256
        INDEX_T: {by: index_dtype, values: {int32: int, int64: long long}}
        VEC: {expr: "gcd(dim, 4)"}
      grid: ceil_div(num_bags * 32, BLOCK)
      block: [BLOCK]
      shared_memory: 0
      arguments: [weight, indices, offsets, num_bags, {value: "ceil_div(dim, 32 * VEC)", type: int32}, out]
      time_limit_s: 60"""

EXT = """\
      kind: torch_extension
      function: bag_forward
      sources: [k.cu]
      extra_cuda_cflags: [-O3, --use_fast_math]
      arguments: [weight, indices, offsets, mode, null, out]"""


def _manifest(build: str, language: str = "cuda") -> str:
    return BASE.format(language=language, build=build)


def _problems(build: str, language: str = "cuda") -> list[str]:
    return [p.message for p in parse_manifest(_manifest(build, language), Path("m.yaml")).problems]


def _spec(build: str, language: str = "cuda") -> NvrtcBuild | ExtensionBuild:
    raw = yaml.safe_load(_manifest(build, language))["kernels"][0]
    return parse_build(raw["build"], language=language, sources=raw["sources"], root=Path("/tree"),
                       manifest_rel_dir="Org/impl")


def test_valid_blocks_pass_schema_and_parse() -> None:
    assert _problems(NVRTC) == [] and _problems(EXT) == []
    nvrtc = _spec(NVRTC)
    assert isinstance(nvrtc, NvrtcBuild)
    assert nvrtc.source == Path("/tree/Org/impl/k.cu")
    assert nvrtc.include_dirs == (Path("/tree/Org/impl"), Path("/tree/Org/impl/inc"))
    case = {"dim": 129, "num_bags": 3}
    defines = nvrtc.integer_defines({**case}, {"index_dtype": "int64"})
    assert defines == {"BLOCK": "256", "INDEX_T": "long long", "VEC": "1"}
    ext = _spec(EXT)
    assert isinstance(ext, ExtensionBuild) and ext.device == "cuda" and not ext.returns_output
    assert [a.tensor for a in ext.arguments] == ["weight", "indices", "offsets", None, "null", "out"]


@pytest.mark.parametrize(("edit", "expected"), [
    (("kind: nvrtc", "kind: cmake"), "'cmake' is not one of"),
    (("time_limit_s: 60", "time_limit_s: 60\n      run_before: rm -rf /"), "Additional properties"),
    (("entry: bag", "entry: bag; system"), "does not match"),
    (("arguments: [weight", "arguments: [table"), "is not valid under any of the given schemas"),
    (("options: [--std=c++17]", "options: [--std=c++17 -o /etc/x]"), "does not match"),
    (("{int32: int, int64: long long}", "{int16: short}"), "int16"),
    (("grid: ceil_div(num_bags * 32, BLOCK)", "grid: '__import__(\"os\")'"), "is not valid under any"),
])
def test_schema_refuses(edit: tuple[str, str], expected: str) -> None:
    problems = _problems(NVRTC.replace(*edit))
    assert any(expected in p for p in problems), problems


def test_extension_shape_is_separate_from_nvrtc() -> None:
    problems = _problems(EXT + "\n      grid: 1")
    assert any("grid" in p and "Additional properties" in p for p in problems), problems


@pytest.mark.parametrize(("edit", "expected"), [
    (("grid: ceil_div(num_bags * 32, BLOCK)", "grid: ceil_div(num_rows, BLOCK)"), "unknown name(s) num_rows"),
    (("grid: ceil_div(num_bags * 32, BLOCK)", "grid: ceil_div(num_bags"), "expected ')'"),
    (("include_dirs: [inc]", "include_dirs: [../../../etc]"), "leaves the checked tree"),
    (("options: [--std=c++17]", "options: [-I/usr/include]"), "include_dirs"),
    (("entry: bag", "entry: bag\n      source: other.cu"), "not one of the kernel's declared sources"),
    ((", out]", "]"), "must receive `out`"),
    (("VEC: {expr: \"gcd(dim, 4)\"}", "VEC: {expr: \"gcd(BLOCK, 4)\"}"), "unknown name(s) BLOCK"),
])
def test_semantic_problems(edit: tuple[str, str], expected: str) -> None:
    with pytest.raises(BuildError) as info:
        _spec(NVRTC.replace(*edit))
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_language_must_fit_kind() -> None:
    with pytest.raises(BuildError, match="nvrtc compiles CUDA C"):
        _spec(NVRTC, language="cpp")
    with pytest.raises(BuildError, match="not one of the kernel's declared sources"):
        _spec(EXT.replace("sources: [k.cu]", "sources: [elsewhere.cu]"))
    assert _spec(EXT.replace("sources: [k.cu]", "sources: [k.cu]\n      device: cpu"), "cpp").device == "cpu"
