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


TRITON = """\
      kind: triton
      module: k.py
      function: gather
      constants: {BLOCK_D: "next_power_of_2(dim)", FLAW: 0}
      grid: [num_indices, "ceil_div(dim, BLOCK_D)"]
      num_warps: 4
      arguments: [weight, indices, table_offsets, out, num_tables, dim, learning_rate]"""


def _triton_manifest(build: str) -> str:
    return _manifest(build, "triton").replace("sources: [k.cu, inc/common.cuh]", "sources: [k.py]")


def test_triton_block() -> None:
    from compliance.verify.build import TritonBuild, constant_env

    assert [p.message for p in parse_manifest(_triton_manifest(TRITON), Path("m.yaml")).problems] == []
    raw = yaml.safe_load(_triton_manifest(TRITON))["kernels"][0]
    spec = parse_build(raw["build"], language="triton", sources=raw["sources"], root=Path("/tree"),
                       manifest_rel_dir="impl")
    assert isinstance(spec, TritonBuild) and spec.module == Path("/tree/impl/k.py") and spec.num_warps == 4
    assert constant_env(spec, {"dim": 100})["BLOCK_D"] == 128
    assert [a.float_name for a in spec.arguments][-1] == "learning_rate"


@pytest.mark.parametrize(("edit", "expected"), [
    (("module: k.py", "module: other.py"), "not one of the kernel's declared sources"),
    (("out, num_tables", "num_tables"), "must receive `out`"),
    (("grid: [num_indices", "grid: [num_rows"), "unknown name(s) num_rows"),
])
def test_triton_semantic_problems(edit: tuple[str, str], expected: str) -> None:
    raw = yaml.safe_load(_triton_manifest(TRITON.replace(*edit)))["kernels"][0]
    with pytest.raises(BuildError) as info:
        parse_build(raw["build"], language="triton", sources=raw["sources"], root=Path("/tree"),
                    manifest_rel_dir="impl")
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_triton_needs_language_triton_and_schema_is_strict() -> None:
    raw = yaml.safe_load(_triton_manifest(TRITON))["kernels"][0]
    with pytest.raises(BuildError, match="launches a @triton.jit function, not cuda"):
        parse_build(raw["build"], language="cuda", sources=raw["sources"], root=Path("/tree"), manifest_rel_dir="")
    manifest = parse_manifest(_triton_manifest(TRITON + "\n      entry: x"), Path("m.yaml"))
    problems = [p.message for p in manifest.problems]
    assert any("Additional properties" in p for p in problems), problems


def test_fused_update_needs_no_out() -> None:
    spec = _spec(NVRTC.replace(", out]", ", grad_out, learning_rate]"))
    assert isinstance(spec, NvrtcBuild) and spec.arguments[-1].float_name == "learning_rate"


@pytest.mark.parametrize(("semantics", "expected"), [
    ("{op: embedding_bag, backward: {kind: sgd, gradient: dense}}", "should not be valid under"),
    ("{op: embedding_bag, tables: {indices: shifted}}", "'shifted' is not one of"),
    ("{op: embedding_bag, domain: {dims: []}}", "dims: [] is not valid"),
    ("{op: embedding_bag, output_dtypes: [float64]}", "'float64' is not one of"),
])
def test_semantics_schema_refuses(semantics: str, expected: str) -> None:
    text = _manifest(EXT).replace("{op: embedding_bag, modes: [sum], layouts: [csr]}", semantics)
    problems = [p.message for p in parse_manifest(text, Path("m.yaml")).problems]
    assert any(expected in p for p in problems), problems


def test_dependencies_shims_and_booleans() -> None:
    spec = _spec(EXT.replace("mode, null, out]", "mode, null, out, true, {value: csr, type: bool}]")
                 + "\n      build_dependencies: [pybind.cpp]\n      verification_shims: [shim/glue.cpp]")
    assert isinstance(spec, ExtensionBuild)
    assert spec.compiled == (Path("/tree/Org/impl/k.cu"), Path("/tree/Org/impl/pybind.cpp"),
                             Path("/tree/Org/impl/shim/glue.cpp"))
    assert [a.ctype for a in spec.arguments[-2:]] == ["bool", "bool"]


@pytest.mark.parametrize(("extra", "expected"), [
    ("build_dependencies: [k.cu]", "already a source"),
    ("verification_shims: [../../../x.cpp]", "leaves the checked tree"),
    ("build_dependencies: [p.cpp]\n      verification_shims: [p.cpp]", "already a source"),
])
def test_dependencies_and_shims_refused(extra: str, expected: str) -> None:
    with pytest.raises(BuildError) as info:
        _spec(EXT + "\n      " + extra)
    assert expected in str(info.value)
