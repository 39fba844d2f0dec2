"""The ``build:`` block of a kernel declaration, interpreted (no torch, no CUDA here).

The manifest schema (``$defs.build``) guarantees the shape; this module turns
the mapping into frozen specs, resolves paths (which must stay inside the
checked tree and be declared sources), parses every expression with the tiny
grammar of ``compliance.verify.expr`` and checks that it only names vocabulary
words. ``BuildError`` lists everything wrong at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compliance.verify.expr import Expr, ExpressionError, Num, evaluate, names, parse
from compliance.verify.vocabulary import FLOAT_SCALARS, SCALARS, SELECTORS, TENSORS

DEFAULT_TIME_LIMIT_S = 300
"""Seconds for running every case of one kernel (the build is limited separately)."""


class BuildError(ValueError):
    """A build block that cannot be used; ``problems`` says why."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Argument:
    """One argument of the kernel or function."""

    tensor: str | None
    """A tensor name of the vocabulary (or ``null``), else None for a scalar."""
    value: Expr | None
    """The scalar's expression (None for tensors)."""
    ctype: str
    """int32, int64, uint32 or uint64 (NVRTC scalars)."""
    text: str
    """As written, for messages."""
    float_name: str | None = None
    """A floating-point scalar of the vocabulary (``learning_rate``, ``eps``), else None."""


@dataclass(frozen=True)
class Define:
    """One ``-DNAME=value`` whose value may depend on the case."""

    name: str
    """Macro name."""
    literal: str | None = None
    """Fixed text (integers as decimal text)."""
    expr: Expr | None = None
    """Integer expression over the vocabulary."""
    by: str | None = None
    """Selector the value is chosen by."""
    choices: tuple[tuple[str, str], ...] = ()
    """(selector value, text) pairs for ``by``."""

    def resolve(self, scalars: Mapping[str, int], selectors: Mapping[str, str]) -> str:
        """The macro's text for one case."""
        if self.expr is not None:
            return str(evaluate(self.expr, scalars))
        if self.by is not None:
            wanted = selectors[self.by]
            for key, text in self.choices:
                if key == wanted:
                    return text
            raise ExpressionError(f"define {self.name}: no value for {self.by} = {wanted}")
        return self.literal or ""


@dataclass(frozen=True)
class NvrtcBuild:
    """A device kernel compiled with NVRTC and launched directly."""

    source: Path
    """Absolute path of the translation unit."""
    entry: str
    """extern "C" __global__ function."""
    options: tuple[str, ...]
    """NVRTC options."""
    include_dirs: tuple[Path, ...]
    """Absolute include directories (the source's directory comes first)."""
    defines: tuple[Define, ...]
    """Per-case macros."""
    grid: tuple[Expr, ...]
    """Grid dimensions (1 to 3)."""
    block: tuple[Expr, ...]
    """Block dimensions (1 to 3)."""
    shared_memory: Expr
    """Dynamic shared memory bytes."""
    arguments: tuple[Argument, ...]
    """Kernel arguments in order."""
    time_limit_s: int
    """Seconds for all cases."""
    kind: str = "nvrtc"
    """Build kind."""
    device: str = "cuda"
    """Always a GPU."""

    def integer_defines(self, scalars: Mapping[str, int], selectors: Mapping[str, str]) -> dict[str, str]:
        """Every define's text for one case."""
        return {d.name: d.resolve(scalars, selectors) for d in self.defines}


@dataclass(frozen=True)
class ExtensionBuild:
    """A PyTorch C++/CUDA extension built with ``torch.utils.cpp_extension.load``."""

    sources: tuple[Path, ...]
    """Absolute source paths."""
    function: str
    """Attribute of the built module that is called."""
    device: str
    """cpu or cuda: where the tensors live."""
    extra_cflags: tuple[str, ...]
    """Host compiler flags."""
    extra_cuda_cflags: tuple[str, ...]
    """nvcc flags."""
    include_dirs: tuple[Path, ...]
    """Absolute include directories."""
    arguments: tuple[Argument, ...]
    """Function arguments in order."""
    time_limit_s: int
    """Seconds for all cases."""
    kind: str = "torch_extension"
    """Build kind."""
    dependencies: tuple[Path, ...] = ()
    """Shipped files compiled into the module that are not this kernel (``build_dependencies``)."""
    shims: tuple[Path, ...] = ()
    """Verification-only glue compiled into the module, not shipped code (``verification_shims``)."""

    @property
    def compiled(self) -> tuple[Path, ...]:
        """Everything the compiler gets: the sources, then the build dependencies, then the shims."""
        return (*self.sources, *self.dependencies, *self.shims)

    @property
    def returns_output(self) -> bool:
        """True when the function returns the output (no ``out`` argument)."""
        return not any(a.tensor == "out" for a in self.arguments)


@dataclass(frozen=True)
class TritonBuild:
    """A ``@triton.jit`` function of a declared module, launched as ``function[grid](*arguments)``."""

    module: Path
    """Absolute path of the Python file (one of the kernel's sources)."""
    function: str
    """Module attribute: the jitted function."""
    grid: tuple[Expr, ...]
    """Grid dimensions (1 to 3)."""
    constants: tuple[tuple[str, Expr], ...]
    """Named integers per case, passed as keyword arguments (constexpr parameters)."""
    arguments: tuple[Argument, ...]
    """Positional arguments in order."""
    num_warps: int | None
    """Warps per program (None: Triton's default)."""
    time_limit_s: int
    """Seconds for all cases."""
    kind: str = "triton"
    """Build kind."""
    device: str = "cuda"
    """Always a GPU."""


BuildSpec = NvrtcBuild | ExtensionBuild | TritonBuild


def _expr(text: Any, where: str, allowed: frozenset[str], problems: list[str]) -> Expr:
    if isinstance(text, int) and not isinstance(text, bool):
        return Num(text)
    try:
        node = parse(str(text))
    except ExpressionError as exc:
        problems.append(f"{where}: {exc}")
        return Num(0)
    unknown = sorted(names(node) - allowed)
    if unknown:
        problems.append(f"{where}: unknown name(s) {', '.join(unknown)}; the vocabulary is "
                        f"{', '.join(sorted(allowed))}")
    return node


def _arguments(raw: Sequence[Any], allowed: frozenset[str], problems: list[str]) -> tuple[Argument, ...]:
    out = []
    for i, item in enumerate(raw):
        if item is None:
            out.append(Argument("null", None, "int64", "null"))
        elif isinstance(item, bool):
            out.append(Argument(None, Num(int(item)), "bool", str(item).lower()))
        elif isinstance(item, str) and item in TENSORS:
            out.append(Argument(item, None, "int64", item))
        elif isinstance(item, str) and item in FLOAT_SCALARS:
            out.append(Argument(None, None, "float32", item, float_name=item))
        elif isinstance(item, str):
            out.append(Argument(None, _expr(item, f"build.arguments[{i}]", allowed, problems), "int64", item))
        else:
            value = item["value"]
            out.append(Argument(None, _expr(value, f"build.arguments[{i}].value", allowed, problems),
                                item.get("type", "int64"), str(value)))
    return tuple(out)


def _defines(raw: Mapping[str, Any], problems: list[str]) -> tuple[Define, ...]:
    out = []
    scalars = frozenset(SCALARS)
    for name, value in raw.items():
        if isinstance(value, bool):
            problems.append(f"build.defines.{name}: use 0 or 1, not a boolean")
        elif isinstance(value, int | str):
            out.append(Define(name, literal=str(value)))
        elif "expr" in value:
            out.append(Define(name, expr=_expr(value["expr"], f"build.defines.{name}", scalars, problems)))
        else:
            by, choices = value["by"], value["values"]
            bad = sorted(set(choices) - set(SELECTORS[by]))
            if bad:
                problems.append(f"build.defines.{name}: {', '.join(bad)} are not values of {by} "
                                f"({', '.join(SELECTORS[by])})")
            out.append(Define(name, by=by, choices=tuple((k, str(v)) for k, v in choices.items())))
    return tuple(out)


def tree_relative(base: str, relpath: str) -> str | None:
    """``base/relpath`` normalised, or None when it is absolute or climbs out of the tree."""
    if relpath.startswith("/") or os.path.isabs(relpath):
        return None
    joined = os.path.normpath(f"{base}/{relpath}" if base else relpath).replace(os.sep, "/")
    return None if joined == ".." or joined.startswith("../") else joined


def _inside(manifest_rel_dir: str, root: Path, relpath: str, where: str, problems: list[str]) -> Path:
    rel = tree_relative(manifest_rel_dir, relpath)
    if rel is None:
        problems.append(f"{where}: {relpath!r} leaves the checked tree")
        return root
    return root / rel


def _dims(raw: Any, where: str, allowed: frozenset[str], problems: list[str]) -> tuple[Expr, ...]:
    items = raw if isinstance(raw, list) else [raw]
    return tuple(_expr(x, f"{where}[{i}]" if isinstance(raw, list) else where, allowed, problems)
                 for i, x in enumerate(items))


def parse_build(raw: Mapping[str, Any], *, language: str, sources: Sequence[str], root: Path,
                manifest_rel_dir: str) -> BuildSpec:
    """Interpret one kernel's ``build`` mapping (already schema-valid)."""
    problems: list[str] = []
    includes = tuple(_inside(manifest_rel_dir, root, d, "build.include_dirs", problems)
                     for d in raw.get("include_dirs", ()))
    scalars = frozenset(SCALARS)
    spec: BuildSpec
    if raw["kind"] == "nvrtc":
        spec = _nvrtc(raw, language, sources, root, manifest_rel_dir, includes, problems)
    elif raw["kind"] == "triton":
        spec = _triton(raw, language, sources, root, manifest_rel_dir, problems)
    else:
        declared = list(raw.get("sources", sources))
        for s in declared:
            if s not in sources:
                problems.append(f"build.sources: {s!r} is not one of the kernel's declared sources")
        paths = tuple(_inside(manifest_rel_dir, root, s, "build.sources", problems) for s in declared)
        extras = _extra_files(raw, sources, manifest_rel_dir, root, problems)
        device = raw.get("device", "cuda" if language == "cuda" else "cpu")
        if language not in ("cuda", "cpp"):
            problems.append(f"build.kind torch_extension builds C++ or CUDA sources, not {language}")
        spec = ExtensionBuild(paths, raw["function"], device, tuple(raw.get("extra_cflags", ())),
                              tuple(raw.get("extra_cuda_cflags", ())), includes,
                              _arguments(raw["arguments"], scalars, problems),
                              int(raw.get("time_limit_s", DEFAULT_TIME_LIMIT_S)),
                              dependencies=extras["dependencies"], shims=extras["shims"])
    if problems:
        raise BuildError(problems)
    return spec


EXTRA_FILES = (("build_dependencies", "dependencies"), ("verification_shims", "shims"))
"""Manifest keys of the files compiled with a kernel that are not the kernel, and their spec fields."""


def _extra_files(raw: Mapping[str, Any], sources: Sequence[str], rel_dir: str, root: Path,
                 problems: list[str]) -> dict[str, tuple[Path, ...]]:
    """``build_dependencies`` and ``verification_shims``: inside the tree, never a source of the kernel and
    never listed twice (a file is either the kernel, shipped code it needs, or glue). A missing file
    fails the build like a missing source."""
    seen = set(sources)
    out: dict[str, tuple[Path, ...]] = {}
    for key, field_name in EXTRA_FILES:
        paths = []
        for rel in raw.get(key, ()):
            if rel in seen:
                problems.append(f"build.{key}: {rel!r} is already a source, build dependency or shim of "
                                "this kernel; list each file once, where it belongs")
            seen.add(rel)
            paths.append(_inside(rel_dir, root, rel, f"build.{key}", problems))
        out[field_name] = tuple(paths)
    return out


def _needs_out(args: Sequence[Argument], what: str, problems: list[str]) -> None:
    """A launched kernel writes into ``out``; a fused update (it takes grad_out and no out) writes the table."""
    tensors = {a.tensor for a in args}
    if "out" not in tensors and "grad_out" not in tensors:
        problems.append(f"build.arguments: {what} must receive `out` (the NaN-prefilled output)")


def _nvrtc(raw: Mapping[str, Any], language: str, sources: Sequence[str], root: Path, rel_dir: str,
           includes: tuple[Path, ...], problems: list[str]) -> NvrtcBuild:
    if language not in ("cuda", "ptx"):
        problems.append(f"build.kind nvrtc compiles CUDA C++, not {language}")
    source = raw.get("source", sources[0])
    if source not in sources:
        problems.append(f"build.source: {source!r} is not one of the kernel's declared sources")
    options = tuple(raw.get("options", ()))
    for opt in options:
        if opt.startswith(("-I", "--include-path")):
            problems.append(f"build.options: {opt!r}: declare header directories in include_dirs")
    defines = _defines(raw.get("defines", {}), problems)
    launch_names = frozenset(SCALARS) | {d.name for d in defines}
    args = _arguments(raw["arguments"], launch_names, problems)
    _needs_out(args, "an NVRTC kernel", problems)
    path = _inside(rel_dir, root, source, "build.source", problems)
    return NvrtcBuild(
        source=path, entry=raw["entry"], options=options, include_dirs=(path.parent, *includes),
        defines=defines, grid=_dims(raw["grid"], "build.grid", launch_names, problems),
        block=_dims(raw["block"], "build.block", launch_names, problems),
        shared_memory=_expr(raw.get("shared_memory", 0), "build.shared_memory", launch_names, problems),
        arguments=args, time_limit_s=int(raw.get("time_limit_s", DEFAULT_TIME_LIMIT_S)))


def _triton(raw: Mapping[str, Any], language: str, sources: Sequence[str], root: Path, rel_dir: str,
            problems: list[str]) -> TritonBuild:
    if language != "triton":
        problems.append(f"build.kind triton launches a @triton.jit function, not {language}")
    module = raw["module"]
    if module not in sources:
        problems.append(f"build.module: {module!r} is not one of the kernel's declared sources")
    elif not module.endswith(".py"):
        problems.append(f"build.module: {module!r} is not a Python file")
    scalars = frozenset(SCALARS)
    constants = tuple((name, _expr(text, f"build.constants.{name}", scalars, problems))
                      for name, text in raw.get("constants", {}).items())
    names_ = scalars | {name for name, _ in constants}
    args = _arguments(raw["arguments"], names_, problems)
    _needs_out(args, "a Triton kernel", problems)
    return TritonBuild(
        module=_inside(rel_dir, root, module, "build.module", problems), function=raw["function"],
        grid=_dims(raw["grid"], "build.grid", names_, problems), constants=constants, arguments=args,
        num_warps=raw.get("num_warps"), time_limit_s=int(raw.get("time_limit_s", DEFAULT_TIME_LIMIT_S)))


def constant_env(spec: TritonBuild, scalars: Mapping[str, int]) -> dict[str, int]:
    """Names usable in a Triton kernel's grid and arguments: the scalars plus its constants."""
    env = dict(scalars)
    for name, node in spec.constants:
        env[name] = evaluate(node, env)
    return env


def launch_env(spec: NvrtcBuild, scalars: Mapping[str, int], defines: Mapping[str, str]) -> dict[str, int]:
    """Names usable in launch expressions: the scalars plus integer-valued defines."""
    env = dict(scalars)
    for name, text in defines.items():
        try:
            env[name] = int(text)
        except ValueError:
            continue
    return env
