"""The rule registry: every check spec of every stage, listed here once, explicitly.

Nothing registers itself on import: the spec constants live in data-only modules below
the code that emits them (``compliance/rulespecs/checks.py``, ``compliance/rulespecs/upstream.py``,
``compliance/rulespecs/verify.py``), and ``specs()`` below is the one list of them.
``compliance rules explain/list``, rule-set validation and the generated
docs/rule-reference.md (``python3 -m compliance.ruletools.reference``) read it;
a test fails when a spec constant anywhere in ``compliance`` is missing here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from compliance.rulespecs import checks as static
from compliance.rulespecs import upstream, verify
from compliance.rulespecs.interface import CheckConfig, CheckSpec


def specs() -> tuple[CheckSpec, ...]:
    """Every check spec, grouped by stage. The spec modules hold data only (no check code), so the
    registry sits below the checks and the rule sets that configure them: no import circle."""
    static_stage = (
        static.STRUCTURE, static.UNKNOWN_BENCHMARK, static.UNKNOWN_SYSTEM, static.VARIANT, static.ALIAS,
        static.MANIFEST_INVALID, static.MANIFEST_MISPLACED, static.UNDECLARED,
        static.NOT_ALLOWLISTED,
        static.LANGUAGE, static.REFERENCE_OP, static.SOURCE_MISSING, static.SOURCE_OUTSIDE,
        static.SOURCE_EMPTY, static.ENTRY_SYMBOL, static.VENDORED, static.UNSHIPPED,
        static.KERNEL_FUNCTION, static.GLUE_COMPUTES,
        static.WITHOUT_SOURCE, static.WITH_SOURCE, static.TOOL_ARTEFACTS, static.SYMLINK,
        static.MISSING, static.MALFORMED, static.HOST, static.NOT_PINNED,
        static.FORK,
        static.PATH_UNREADABLE, static.SETUP_UNPARSEABLE,
        static.PATH_UNSCANNED, static.METADATA_DIRECTORY, static.STRICTER_ROUND,
    )
    upstream_stage = (
        upstream.UNREACHABLE, upstream.AUTH, upstream.CACHE_CORRUPT, upstream.NOT_CACHED,
        upstream.COMMIT_UNKNOWN, upstream.COMMIT_UNMERGED, upstream.PATH_MISSING, upstream.CONTENT_DIFFERS,
        upstream.VERIFIED, upstream.VENDORED_DIFFERS, upstream.VENDORED_VERIFIED,
        upstream.VENDORED_IDENTIFIED,
    )
    verify_stage = (
        verify.PASSED, verify.BUILD_MISSING, verify.BUILD_INVALID, verify.BUILD_FAILED, verify.CRASH,
        verify.TIMEOUT, verify.MISMATCH, verify.UNWRITTEN, verify.INPUT_MODIFIED, verify.OUT_OF_BOUNDS_WRITE,
        verify.OUTPUT_INVALID, verify.NONDETERMINISTIC, verify.SKIPPED, verify.NOT_RUN, verify.GRADIENT_ROWS,
        verify.UPDATE_MISMATCH, verify.UNTOUCHED_MODIFIED, verify.ACCUMULATION_PRECISION, verify.ENTRY_NOT_RUN,
        verify.TREE_MODIFIED, verify.ARTEFACT_CHANGED, verify.NO_KERNEL_DECLARED, verify.COVERAGE_NARROW,
        verify.UNDECLARED_MODE,
    )
    return static_stage + upstream_stage + verify_stage


@functools.cache
def registry() -> Mapping[str, CheckSpec]:
    """Rule id -> spec (ids are unique; a duplicate is a programming error)."""
    by_id: dict[str, CheckSpec] = {}
    for spec in specs():
        if spec.id in by_id:
            raise ValueError(f"check id {spec.id!r} listed twice")
        by_id[spec.id] = spec
    return MappingProxyType(by_id)


def all_specs() -> list[CheckSpec]:
    """Every check, sorted by id."""
    return sorted(registry().values(), key=lambda s: s.id)


def spec_for(check_id: str) -> CheckSpec | None:
    """The spec of ``check_id``, or None if no such check exists."""
    return registry().get(check_id)


def config_problems(check_id: str, raw: Mapping[str, Any]) -> Iterable[tuple[tuple[str, ...], str]]:
    """Problems with one ``checks.<id>`` entry: (sub-path, message) pairs."""
    spec = spec_for(check_id)
    if spec is None:
        known = ", ".join(s.id for s in all_specs())
        yield (), f"unknown check {check_id!r}; known checks: {known}"
        return
    for key, value in raw.items():
        if key == "level":
            continue
        option = spec.option(key)
        if option is None:
            allowed = ", ".join(["level", *(o.name for o in spec.options)])
            yield (key,), f"check {check_id!r} has no option {key!r}; allowed: {allowed}"
        elif not isinstance(value, option.type) or (option.type is int and isinstance(value, bool)):
            yield (key,), f"option {key!r} of {check_id!r} must be {option.type.__name__}, got {value!r}"


def effective_config(check_id: str, raw: Mapping[str, Any] | None) -> CheckConfig:
    """``raw`` (already validated) with defaults filled in."""
    spec = spec_for(check_id)
    if spec is None:
        raise KeyError(check_id)
    raw = raw or {}
    options = {o.name: raw.get(o.name, o.default) for o in spec.options}
    return CheckConfig(level=str(raw.get("level", spec.default_level)), options=options)
