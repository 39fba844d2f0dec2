"""Kernel manifests: ``kernel_manifest.yaml`` in an implementation directory.

A manifest declares every custom kernel an implementation ships. Problems in a
manifest are problems of the submission, so they become findings (rule
``manifest-invalid``) rather than input errors; the rest of the tree is still
checked. The schema is ``compliance/schemas/manifest.schema.json``
(``compliance rules schema --manifest``); docs/manifest.md documents it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compliance.errors import InputError
from compliance.schema_validation import validate_document
from compliance.semantics import Backward, Domain, DtypeCombination, Quantization, Tables
from compliance.yamlsource import JsonPath, YamlDocument, parse_yaml, read_yaml_text

MANIFEST_NAME = "kernel_manifest.yaml"


@dataclass(frozen=True)
class Upstream:
    """Where a kernel's source lives upstream."""

    repository: str
    """Clone URL."""
    commit: str
    """Commit the source is pinned to (should be a full 40-hex hash)."""
    paths: tuple[str, ...]
    """Path of each declared source in the upstream repository, same order as ``sources``."""
    pull_request: int | None = None
    """Optional pull request number (information only)."""
    line: int | None = None
    """Line of the ``upstream`` key in the manifest."""


@dataclass(frozen=True)
class Semantics:
    """What a kernel claims to compute, in terms of a reference op."""

    op: str
    """``embedding_bag`` or ``embedding``."""
    modes: tuple[str, ...] = ()
    """sum, mean, max (embedding_bag)."""
    layouts: tuple[str, ...] = ()
    """fixed ([B, L] indices) and/or csr (indices + offsets)."""
    weight_dtypes: tuple[str, ...] = ("float32",)
    """Weight dtypes it accepts."""
    index_dtypes: tuple[str, ...] = ("int64",)
    """Index/offset dtypes it accepts."""
    per_sample_weights: bool = False
    """Supports per_sample_weights (sum mode)."""
    padding_idx: bool = False
    """Supports padding_idx."""
    include_last_offset: tuple[bool, ...] = (False,)
    """Which include_last_offset conventions it accepts (csr)."""
    output_shape: str = "flat"
    """embedding only: ``flat`` [N, D] or ``batched`` [B, L, D]."""
    output_dtypes: tuple[str, ...] = ()
    """Dtypes the output is written in (empty: the weight dtype); see compliance.semantics."""
    tables: Tables | None = None
    """Table-batched lookups (None: one table)."""
    backward: Backward | None = None
    """A backward pass or fused optimizer update (None: forward)."""
    domain: Domain = field(default_factory=Domain)
    """Shapes the kernel supports; verification cases stay inside."""
    dtypes: tuple[DtypeCombination, ...] = ()
    """The supported dtype combinations (empty: weight_dtypes crossed with output_dtypes)."""
    quantization: Quantization | None = None
    """A quantized table (None: the table holds weight_dtypes values); see compliance.semantics."""


@dataclass(frozen=True)
class KernelDeclaration:
    """One kernel declared in a manifest."""

    id: str
    """Unique id within the submission."""
    category: str
    """Allowlist entry id it claims."""
    language: str
    """cuda, cpp, triton or ptx."""
    sources: tuple[str, ...]
    """Source paths relative to the manifest directory."""
    entry_symbols: tuple[str, ...]
    """Symbols the sources must define."""
    semantics: Semantics
    """Reference semantics claimed."""
    upstream: Upstream | None
    """Upstream link, if declared."""
    binaries: tuple[str, ...] = ()
    """Declared build products of the sources."""
    helpers: tuple[str, ...] = ()
    """Other kernel functions the sources define (launched by the entry symbols)."""
    build: Mapping[str, Any] = field(default_factory=dict)
    """Build description for verification (raw; interpreted by ``compliance.verify``)."""
    line: int | None = None
    """Line of the kernel entry in the manifest."""
    json_path: JsonPath = ()
    """Where the entry sits in the manifest document."""


@dataclass(frozen=True)
class VendoredDeclaration:
    """A third-party tree copied into the implementation."""

    path: str
    """Directory of the copy, relative to the manifest directory."""
    repository: str
    """Upstream clone URL."""
    commit: str
    """Commit the copy was taken from."""
    upstream_path: str = ""
    """Directory in the upstream repository that ``path`` mirrors."""
    line: int | None = None
    """Line of the entry in the manifest."""


@dataclass(frozen=True)
class ManifestProblem:
    """A schema or semantic problem in a manifest."""

    message: str
    """What is wrong, prefixed with the dotted key."""
    line: int | None
    """1-based line."""


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest (possibly with problems; kernels are the valid ones)."""

    path: Path
    """Absolute path of the manifest file."""
    ruleset: str | None
    """Rule set the submission names, if any."""
    kernels: tuple[KernelDeclaration, ...]
    """Declared kernels that passed validation."""
    problems: tuple[ManifestProblem, ...]
    """Everything wrong with the file."""
    document: YamlDocument | None = None
    """The parsed document (None when the YAML itself was unreadable)."""
    vendored: tuple[VendoredDeclaration, ...] = ()
    """Declared vendored third-party trees."""

    @property
    def directory(self) -> Path:
        """The implementation directory the manifest sits in."""
        return self.path.parent

    def resolve(self, relpath: str) -> Path:
        """Absolute path of a manifest-relative path (not checked to stay inside)."""
        return self.directory / relpath


def _semantics(data: Mapping[str, Any]) -> Semantics:
    combos = tuple(DtypeCombination.from_mapping(c) for c in data.get("dtypes", ()))
    weights = tuple(dict.fromkeys(c.weight for c in combos)) or tuple(data.get("weight_dtypes", ("float32",)))
    if "quantization" in data:  # codes, dequantized in float32 (the per-sample weights' dtype too)
        weights = ("float32",)
    return Semantics(
        op=data["op"], modes=tuple(data.get("modes", ())), layouts=tuple(data.get("layouts", ())),
        weight_dtypes=weights, dtypes=combos,
        index_dtypes=tuple(data.get("index_dtypes", ("int64",))),
        per_sample_weights=bool(data.get("per_sample_weights", False)),
        padding_idx=bool(data.get("padding_idx", False)),
        include_last_offset=tuple(data.get("include_last_offset", (False,))),
        output_shape=data.get("output_shape", "flat"),
        output_dtypes=tuple(data.get("output_dtypes", ())), tables=Tables.from_mapping(data.get("tables")),
        backward=Backward.from_mapping(data.get("backward")), domain=Domain.from_mapping(data.get("domain")),
        quantization=Quantization.from_mapping(data.get("quantization")),
    )


def _kernel(document: YamlDocument, index: int, data: Mapping[str, Any]) -> KernelDeclaration:
    up = data.get("upstream")
    mark = document.mark(("kernels", index))
    up_mark = document.mark(("kernels", index, "upstream"))
    return KernelDeclaration(
        id=data["id"], category=data["category"], language=data["language"],
        sources=tuple(data["sources"]), entry_symbols=tuple(data["entry_symbols"]),
        semantics=_semantics(data["semantics"]),
        upstream=None if up is None else Upstream(
            repository=up["repository"], commit=str(up["commit"]), paths=tuple(up["paths"]),
            pull_request=up.get("pull_request"), line=up_mark.line if up_mark else None),
        binaries=tuple(data.get("binaries", ())), helpers=tuple(data.get("helpers", ())),
        build=dict(data.get("build", {})),
        line=mark.line if mark else None, json_path=("kernels", index),
    )


PLACEHOLDER = "FILL-IN"
"""Prefix of the values ``compliance manifest draft`` leaves for the submitter to fill."""


def _placeholders(value: Any, path: JsonPath) -> list[JsonPath]:
    if isinstance(value, str):
        return [path] if value.startswith(PLACEHOLDER) else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _placeholders(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _placeholders(v, (*path, i))]
    return []


def _placeholder_problems(document: YamlDocument) -> list[ManifestProblem]:
    """A drafted manifest never passes as finished: every FILL-IN value is a problem."""
    from compliance.schema_validation import dotted

    return [ManifestProblem(f"{dotted(p)}: placeholder left unfilled ({PLACEHOLDER} values come from "
                            "`compliance manifest draft`; only the submitter knows this)",
                            getattr(document.mark(p), "line", None))
            for p in _placeholders(document.data, ())]


def _semantic_problems(document: YamlDocument) -> list[ManifestProblem]:
    problems = _placeholder_problems(document)
    seen: set[str] = set()
    for index, kernel in enumerate(document.data.get("kernels", [])):
        kid = kernel.get("id") if isinstance(kernel, dict) else None
        if kid in seen:
            mark = document.mark(("kernels", index, "id"))
            problems.append(ManifestProblem(f"kernels[{index}].id: duplicate kernel id {kid!r}",
                                            mark.line if mark else None))
        if isinstance(kid, str):
            seen.add(kid)
        up = kernel.get("upstream") if isinstance(kernel, dict) else None
        if isinstance(up, dict) and isinstance(up.get("paths"), list) \
                and isinstance(kernel.get("sources"), list) and len(up["paths"]) != len(kernel["sources"]):
            mark = document.mark(("kernels", index, "upstream", "paths"))
            problems.append(ManifestProblem(
                f"kernels[{index}].upstream.paths: {len(up['paths'])} path(s) for "
                f"{len(kernel['sources'])} source(s); give one upstream path per source, same order",
                mark.line if mark else None))
    return problems


def parse_manifest(text: str, path: Path) -> Manifest:
    """Parse and validate manifest text; never raises for bad content.

    Semantic processing (duplicate ids, building declarations) runs only on a
    document that passed the schema: a schema failure leaves the manifest with
    its problems and no kernels, so nothing downstream sees ill-typed data.
    The sources of its kernels then count as undeclared: an invalid manifest
    never makes a tree pass.
    """
    try:
        document = parse_yaml(text, path)
    except InputError as exc:
        return Manifest(path, None, (), (ManifestProblem(exc.message, exc.line),))
    schema_problems = validate_document(document, "manifest")
    if schema_problems or not isinstance(document.data, dict):
        ruleset_ok = isinstance(document.data, dict) and isinstance(document.data.get("ruleset"), str) \
            and not any(p.json_path[:1] == ("ruleset",) for p in schema_problems)
        # placeholders are read from any shape of data: a draft's unfilled values are named as
        # such even where they also break the schema (a FILL-IN commit is no 40-hex hash)
        return Manifest(path, document.data["ruleset"] if ruleset_ok else None, (),
                        (*_placeholder_problems(document),
                         *(ManifestProblem(p.message, p.line) for p in schema_problems)), document)
    problems = _semantic_problems(document)
    kernels = tuple(_kernel(document, i, k) for i, k in enumerate(document.data.get("kernels", [])))
    ruleset = document.data.get("ruleset")
    return Manifest(path, ruleset if isinstance(ruleset, str) else None, kernels,
                    tuple(problems), document, _vendored(document))


def _vendored(document: YamlDocument) -> tuple[VendoredDeclaration, ...]:
    entries = document.data.get("vendored", [])
    return tuple(VendoredDeclaration(
        path=e["path"].rstrip("/"), repository=e["repository"], commit=str(e["commit"]),
        upstream_path=e.get("upstream_path", "").strip("/"),
        line=getattr(document.mark(("vendored", i)), "line", None)) for i, e in enumerate(entries))


def load_manifest(path: Path) -> Manifest:
    """Read (bounded) and parse the manifest at ``path``; unreadable files become problems."""
    try:
        text = read_yaml_text(path)
    except InputError as exc:
        return Manifest(path, None, (), (ManifestProblem(f"cannot read manifest: {exc.message}", None),))
    return parse_manifest(text, path)
