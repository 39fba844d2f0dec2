"""Layout checks: is the tree shaped like a submission of the rule set's style?"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from compliance.layout import (
    CODE_DIR,
    ENTRY_FILE,
    IMPLEMENTATIONS,
    ORG_DIRS,
    Location,
    Organization,
    code_dirs,
    subdirs,
)
from compliance.rulespecs.checks import ALIAS, STRUCTURE, UNKNOWN_BENCHMARK, UNKNOWN_SYSTEM, VARIANT

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding


_RESULT_FILE = re.compile(r"result_\d+\.txt")


def _subdir_names(path: Path) -> list[str]:
    return [p.name for p in subdirs(path)]


def _files(path: Path) -> list[str]:
    """Regular files (not links) directly in ``path``, sorted."""
    if not path.is_dir():
        return []
    return sorted(p.name for p in path.iterdir() if p.is_file() and not p.is_symlink())


def _rel(org_rel: str, *parts: str) -> str:
    return "/".join(p for p in (org_rel, *parts) if p and p != ".")


MODEL_MAPPING_FILE = "model_mapping.json"
"""``open/<org>/model_mapping.json``: the submitter's own model names -> official models."""
_MAPPING_LIMIT = 1024 * 1024


def submitter_mapping(org_dir: Path) -> dict[str, str]:
    """The organization's ``model_mapping.json`` (names -> official models); empty when absent,
    unreadable, over 1 MiB, or not a JSON object of strings (the checker would fail on it too)."""
    path = org_dir / MODEL_MAPPING_FILE
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAPPING_LIMIT:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def resolved_model(ctx: CheckContext, name: str, division: str | None, mapping: dict[str, str]) -> str | None:
    """The round's model a results directory ``name`` stands for, resolved as the round's MLCommons
    submission checker resolves it (``model_name_rules``), or None."""
    official = ctx.ruleset.official_benchmark(name)
    rules = ctx.ruleset.model_name_rules
    if official is not None or rules is None:
        return official
    if rules.submitter_mapping and division == "open" and name in mapping:
        mapped = ctx.ruleset.official_benchmark(mapping[name])
        if mapped is not None:
            return mapped
    guessed = rules.guess(name)
    return ctx.ruleset.official_benchmark(guessed) if guessed else None


def _benchmark_name(ctx: CheckContext, name: str, rel: str, where: Location,
                    what: str, mapping: dict[str, str] | None = None) -> Iterator[Finding | None]:
    """Unknown benchmark (error) or alias (its level), for a directory named ``name``."""
    official = ctx.ruleset.official_benchmark(name)
    if official is None and mapping is not None:
        checker = resolved_model(ctx, name, where.division, mapping)
        if checker is not None:
            yield ctx.finding(ALIAS.id, rel, f"{what} {name!r} is read as model {checker!r}, as the "
                              f"submission checker of {ctx.ruleset.id} resolves it (official names, the "
                              "round's model mapping, the organization's model_mapping.json, its name "
                              "rules)", location=where)
            return
    if official is None:
        aliases = ", ".join(f"{a}->{b}" for a, b in sorted(ctx.ruleset.benchmark_aliases.items()))
        yield ctx.finding(UNKNOWN_BENCHMARK.id, rel, f"{what} {name!r}, which is not a benchmark of "
                          f"{ctx.ruleset.id} ({', '.join(sorted(ctx.ruleset.benchmarks))}"
                          + (f"; aliases: {aliases}" if aliases else "") + ")", location=where)
    elif name in ctx.ruleset.benchmark_aliases:
        yield ctx.finding(ALIAS.id, rel, f"{what} {name!r} is read as benchmark {official!r} (an "
                          f"alias in {ctx.ruleset.id}); canonical name: {official}", location=where)


def _required_dirs(ctx: CheckContext, org: Organization, org_dir: Path,
                   org_rel: str) -> Iterator[Finding | None]:
    style = ctx.ruleset.layout
    here = Location(division=org.division, submitter=org.name)
    for required in ORG_DIRS[style]:
        if (org_dir / required).is_dir():
            continue
        variant = next((v for v in code_dirs(style)[1:] if (org_dir / v).is_dir()), None) \
            if required == CODE_DIR[style] else None
        if required == "systems" and _entry_systems(org_dir):
            yield ctx.finding(VARIANT.id, _rel(org_rel, "results"), "systems are described by "
                              f"results/<system>/{ENTRY_FILE} (canonical: {org.name}/systems/"
                              "<system>.json)", location=here)
        elif variant is None:
            yield ctx.finding(STRUCTURE.id, org_rel, f"organization {org.name!r} has no {required}/ "
                              "directory", location=here)
        else:
            yield ctx.finding(VARIANT.id, _rel(org_rel, variant), f"{variant}/ is read as {required}/ "
                              f"(canonical: {org.name}/{required}/)", location=here)


def _entry_systems(org_dir: Path) -> set[str]:
    """Systems described the Training v0.5/v0.6 way, by ``results/<system>/entry.json``."""
    return {d.name for d in subdirs(org_dir / "results") if (d / ENTRY_FILE).is_file()}


def _inverted(ctx: CheckContext, org: Organization, base: Path, rel: str) -> Iterator[Finding | None]:
    """``benchmarks/implementations/<system>/<benchmark>/``: the names, and one variant warning."""
    yield ctx.finding(VARIANT.id, rel, "benchmarks/implementations/<system>/<benchmark>/ is read as "
                      "benchmarks/<benchmark>/implementations/<system>/ (the canonical form)",
                      location=Location(org.division, org.name, base.name))
    for system in _subdir_names(base / IMPLEMENTATIONS):
        for bench in _subdir_names(base / IMPLEMENTATIONS / system):
            where = Location(org.division, org.name, base.name, bench, system)
            yield from _benchmark_name(ctx, bench, f"{rel}/{system}/{bench}", where, "benchmark directory")


def _training_benchmark(ctx: CheckContext, org: Organization, bench_dir: Path,
                        rel: str) -> Iterator[Finding | None]:
    """How a training benchmark directory holds its code."""
    where = Location(org.division, org.name, bench_dir.parent.name, bench_dir.name)
    others = [d for d in _subdir_names(bench_dir) if d != IMPLEMENTATIONS]
    has_canonical = (bench_dir / IMPLEMENTATIONS).is_dir()
    flat = ctx.inventory.mapper is not None and ctx.inventory.mapper.is_flat(
        tuple(bench_dir.relative_to(ctx.root).parts))
    if flat:  # the benchmark directory is the implementation: its subdirectories are its parts
        yield ctx.finding(VARIANT.id, rel, f"code directly under {bench_dir.name}/, read as its implementation "
                          f"with its subdirectories (canonical: {bench_dir.name}/implementations/<impl>/)",
                          location=where)
        return
    for other in others:
        yield ctx.finding(VARIANT.id, f"{rel}/{other}", f"{other}/ is read as an implementation "
                          f"directory {'beside' if has_canonical else 'instead of'} implementations/ "
                          f"(canonical: {bench_dir.name}/implementations/<impl>/)", location=where)
    files = _files(bench_dir)
    if files and not has_canonical:
        yield ctx.finding(VARIANT.id, rel, f"{len(files)} file(s) directly under {bench_dir.name}/ "
                          f"(canonical: {bench_dir.name}/implementations/<impl>/)", location=where)
    if not has_canonical and not others and not files:
        yield ctx.finding(STRUCTURE.id, rel, f"benchmark {bench_dir.name!r} has no implementations/ "
                          "directory", location=where)


def _code_findings(ctx: CheckContext, org: Organization, org_dir: Path,
                   org_rel: str) -> Iterator[Finding | None]:
    style = ctx.ruleset.layout
    for code_dir in code_dirs(style):
        base = org_dir / code_dir
        for bench in _subdir_names(base):
            rel = _rel(org_rel, code_dir, bench)
            if style == "training" and bench == IMPLEMENTATIONS:
                yield from _inverted(ctx, org, base, rel)
                continue
            where = Location(org.division, org.name, code_dir, bench)
            if style == "inference" and ctx.ruleset.official_benchmark(bench) is None:
                # Accepted inference submissions keep shared code (common/, harness/,
                # plugin/) beside the per-model directories; results name the models.
                yield ctx.finding(VARIANT.id, rel, f"code/{bench}/ is no model of {ctx.ruleset.id}: "
                                  "read as code shared by the organization's models (canonical: "
                                  "code/<model>/<implementation>/)", location=where)
                continue
            yield from _benchmark_name(ctx, bench, rel, where, "benchmark directory")
            if style == "training" and code_dir != "code":  # code/<b>/<impl>/ is that form's own
                yield from _training_benchmark(ctx, org, base / bench, rel)


def _results_findings(ctx: CheckContext, org: Organization, org_dir: Path,
                      org_rel: str) -> Iterator[Finding | None]:
    has_systems = "systems" in ORG_DIRS[ctx.ruleset.layout]
    systems = {p.stem for p in (org_dir / "systems").glob("*.json")} | _entry_systems(org_dir)
    mapping = submitter_mapping(org_dir) if ctx.ruleset.layout == "inference" else None
    for system in _subdir_names(org_dir / "results"):
        rel = _rel(org_rel, "results", system)
        here = Location(org.division, org.name, "results")
        if has_systems and system not in systems:
            yield ctx.finding(UNKNOWN_SYSTEM.id, rel, f"results for system {system!r}, but there is no "
                              f"systems/{system}.json", location=here)
        loose = [f for f in _files(org_dir / "results" / system) if _RESULT_FILE.fullmatch(f)]
        if loose:
            yield ctx.finding(VARIANT.id, rel, f"{len(loose)} result file(s) directly under "
                              f"results/{system}/ without a benchmark level (canonical: "
                              f"results/{system}/<benchmark>/result_N.txt)", location=here)
        for bench in _subdir_names(org_dir / "results" / system):
            yield from _benchmark_name(ctx, bench, f"{rel}/{bench}",
                                       Location(org.division, org.name, "results", bench), "results for",
                                       mapping)


def _org_findings(ctx: CheckContext, org: Organization) -> Iterator[Finding | None]:
    org_rel = "/".join(org.prefix) or "."
    org_dir = ctx.root.joinpath(*org.prefix)
    yield from _required_dirs(ctx, org, org_dir, org_rel)
    yield from _code_findings(ctx, org, org_dir, org_rel)
    yield from _results_findings(ctx, org, org_dir, org_rel)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Layout findings for every organization (or one if none is found)."""
    if not ctx.inventory.organizations:
        expected = ", ".join(f"{d}/" for d in ORG_DIRS[ctx.ruleset.layout])
        yield ctx.finding(STRUCTURE.id, ".", "no organization found: expected the root, or its "
                          f"subdirectories, to contain {expected} ({ctx.ruleset.layout} layout)")
        return
    for org in ctx.inventory.organizations:
        yield from _org_findings(ctx, org)
