"""Layout checks: is the tree shaped like a submission of the rule set's style?"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from compliance.checks.interface import CheckSpec, register
from compliance.layout import CODE_DIR, ORG_DIRS, Location, Organization, subdirs

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

STRUCTURE = register(CheckSpec(
    id="layout-structure", title="Submission directory structure", default_level="error",
    doc="Each organization must have the directories its layout requires (training: "
        "systems/, benchmarks/, results/; inference: systems/, code/, results/ under a "
        "division), and each benchmark directory must hold its implementations "
        "(training: benchmarks/<benchmark>/implementations/<impl>/). A tree where no "
        "organization can be found at all is reported once, at its root.",
    hint="Arrange the tree as <Org>/systems/<system>.json, "
         "<Org>/benchmarks/<benchmark>/implementations/<impl>/, "
         "<Org>/results/<system>/<benchmark>/result_N.txt.",
    passing="Acme/systems/dgx.json\nAcme/benchmarks/dlrm/implementations/pytorch/train.py\n"
            "Acme/results/dgx/dlrm/result_0.txt",
    failing="Acme/benchmarks/dlrm/train.py   (no systems/, results/ or implementations/)",
))
UNKNOWN_BENCHMARK = register(CheckSpec(
    id="layout-unknown-benchmark", title="Benchmark not in the round", default_level="error",
    doc="A benchmark directory (under benchmarks/ or results/<system>/) is not one of the "
        "round's benchmarks as listed by the rule set, so nothing in it can be judged "
        "against the round's allowlist.",
    hint="Rename the directory to the round's benchmark name (see `compliance rules show`), "
         "or check with the rule set for the right round (--rules).",
    passing="Acme/benchmarks/dlrm/...   (dlrm is a benchmark of the round)",
    failing="Acme/benchmarks/dlrm-v2/...",
))
UNKNOWN_SYSTEM = register(CheckSpec(
    id="layout-unknown-system", title="Results for an undescribed system", default_level="error",
    doc="A results/<system>/ directory has no matching systems/<system>.json description.",
    hint="Add systems/<system>.json or rename the results directory to the described system.",
    passing="Acme/systems/dgx.json and Acme/results/dgx/dlrm/result_0.txt",
    failing="Acme/results/dgx/dlrm/result_0.txt without Acme/systems/dgx.json",
))


def _subdir_names(path: Path) -> list[str]:
    return [p.name for p in subdirs(path)]


def _org_findings(ctx: "CheckContext", org: Organization) -> Iterator["Finding | None"]:
    style = ctx.ruleset.layout
    org_rel = "/".join(org.prefix) or "."
    org_dir = ctx.root.joinpath(*org.prefix)
    here = Location(division=org.division, submitter=org.name)
    for required in ORG_DIRS[style]:
        if not (org_dir / required).is_dir():
            yield ctx.finding(STRUCTURE.id, org_rel, f"organization {org.name!r} has no {required}/ directory",
                              location=here)
    benchmarks = set(ctx.ruleset.benchmarks)
    code_dir = CODE_DIR[style]
    for bench in _subdir_names(org_dir / code_dir):
        rel = f"{org_rel}/{code_dir}/{bench}".lstrip("./")
        where = Location(org.division, org.name, code_dir, bench)
        if bench not in benchmarks:
            yield ctx.finding(UNKNOWN_BENCHMARK.id, rel, f"{bench!r} is not a benchmark of "
                              f"{ctx.ruleset.id} ({', '.join(sorted(benchmarks))})", location=where)
        if style == "training" and not (org_dir / code_dir / bench / "implementations").is_dir():
            yield ctx.finding(STRUCTURE.id, rel, f"benchmark {bench!r} has no implementations/ directory",
                              location=where)
    systems = {p.stem for p in (org_dir / "systems").glob("*.json")}
    for system in _subdir_names(org_dir / "results"):
        rel = f"{org_rel}/results/{system}".lstrip("./")
        if system not in systems:
            yield ctx.finding(UNKNOWN_SYSTEM.id, rel, f"results for system {system!r}, but there is no "
                              f"systems/{system}.json", location=Location(org.division, org.name, "results"))
        for bench in _subdir_names(org_dir / "results" / system):
            if bench not in benchmarks:
                yield ctx.finding(UNKNOWN_BENCHMARK.id, f"{rel}/{bench}",
                                  f"results for {bench!r}, which is not a benchmark of {ctx.ruleset.id}",
                                  location=Location(org.division, org.name, "results", bench))


def run(ctx: "CheckContext") -> Iterator["Finding | None"]:
    """Layout findings for every organization (or one if none is found)."""
    if not ctx.inventory.organizations:
        expected = ", ".join(f"{d}/" for d in ORG_DIRS[ctx.ruleset.layout])
        yield ctx.finding(STRUCTURE.id, ".", "no organization found: expected the root, or its "
                          f"subdirectories, to contain {expected} ({ctx.ruleset.layout} layout)")
        return
    for org in ctx.inventory.organizations:
        yield from _org_findings(ctx, org)
