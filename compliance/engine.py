"""The check pipeline: walk once, read manifests, pick the rule set, run the stages.

Only orchestration lives here; the options and the report are in
``compliance.model``, the stages behind ``compliance.rulespecs.interface.Stage``.
Nothing here imports torch, CUDA bindings or git; the optional stages
(``--upstream``, ``--verify``) import their heavy modules only when they run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from compliance.checks.builtin import StaticStage
from compliance.context import CheckContext, Stage, declared_vendored_dirs
from compliance.errors import InputError
from compliance.findings import Finding, Severity
from compliance.inventory import Walk, classify, walk_tree
from compliance.manifest import Manifest, load_manifest
from compliance.model import CheckOptions, CheckReport, RuleSetChoice
from compliance.ruleset import (
    DEFAULT_RULESET,
    RuleSet,
    available_rulesets,
    load_named_ruleset,
    load_ruleset,
    refuse_rule_roots_inside,
    rule_roots,
)
from compliance.rulespecs.checks import STRICTER_ROUND, VENDORED, WITH_SOURCE, WITHOUT_SOURCE
from compliance.upstream import UpstreamStage
from compliance.verify import VerifyStage


def read_manifests(walk: Walk) -> tuple[tuple[str, Manifest], ...]:
    """Every manifest the walk found, parsed."""
    return tuple((rel, load_manifest(walk.root / rel)) for rel in sorted(walk.manifests))


def _named(manifests: tuple[tuple[str, Manifest], ...]) -> dict[str, tuple[str, int | None]]:
    """Rule-set names the manifests give -> (manifest, line of its ``ruleset:``)."""
    named: dict[str, tuple[str, int | None]] = {}
    for rel, manifest in manifests:
        if manifest.ruleset:
            mark = manifest.document.mark(("ruleset",)) if manifest.document else None
            named.setdefault(manifest.ruleset, (rel, mark.line if mark else None))
    return named


def _candidates(roots: list[Path]) -> list[RuleSet]:
    return [load_ruleset(ruleset_id, roots) for ruleset_id in available_rulesets(rule_roots(roots))]


def _detected(root: Path, roots: list[Path]) -> RuleSetChoice:
    """The round read from the tree (``compliance.detect``), else the default."""
    from compliance.detect import detect_ruleset

    candidates = _candidates(roots)
    detection = detect_ruleset(root, candidates)
    if detection.ruleset_id is None:
        return RuleSetChoice(load_ruleset(DEFAULT_RULESET, roots), f"default ({detection.reason})", signal="default")
    chosen = load_ruleset(detection.ruleset_id, roots)
    stricter = _stricter(chosen, detection.fitting, candidates) if detection.signal != "benchmarks" else None
    return RuleSetChoice(chosen, f"detected: {detection.reason}", signal=detection.signal,
                         source=detection.source, stricter=stricter)


def _stricter(chosen: RuleSet, fitting: tuple[str, ...], candidates: list[RuleSet]) -> str | None:
    """The strictest round of ``fitting``, when it is stricter than ``chosen``."""
    from compliance.detect import strictness

    pool = [rs for rs in candidates if rs.id in fitting]
    if not pool:
        return None
    strictest = max(pool, key=lambda rs: (strictness(rs), rs.id))
    return strictest.id if strictness(strictest) > strictness(chosen) else None


def choose_ruleset(rules: str | None, manifests: tuple[tuple[str, Manifest], ...],
                   root: Path | None = None, rules_dirs: tuple[Path, ...] = ()) -> RuleSetChoice:
    """``--rules`` wins (an id or a file: the operator's choice); else the rule-set id the
    manifests name (they must agree; an id only, resolved among the rule roots); else
    the round detected from the tree at ``root``; else the default. When the tree named
    the round (a manifest, README or file name), a stricter round that fits the tree is
    recorded in ``stricter``. ``rules_dirs``: the operator's rule directories (``--rules-dir``),
    searched first and kept in the choice (the stricter round is loaded from them too)."""
    return replace(_choice(rules, manifests, root, rules_dirs), rules_dirs=tuple(rules_dirs))


def _choice(rules: str | None, manifests: tuple[tuple[str, Manifest], ...],
            root: Path | None, rules_dirs: tuple[Path, ...]) -> RuleSetChoice:
    roots = list(rules_dirs)
    if rules:
        return RuleSetChoice(load_ruleset(rules, roots), "--rules", signal="rules-option")
    named = _named(manifests)
    if len(named) > 1:
        listing = "; ".join(f"{rel} names {name!r}" for name, (rel, _) in sorted(named.items()))
        raise InputError(f"manifests name different rule sets ({listing}); choose one with --rules")
    if named:
        name, (rel, line) = next(iter(named.items()))
        chosen = load_named_ruleset(name, rel, line, roots)
        stricter = None
        if root is not None:
            from compliance.detect import detect_ruleset

            candidates = _candidates(roots)
            stricter = _stricter(chosen, detect_ruleset(root, candidates).fitting, candidates)
        return RuleSetChoice(chosen, f"named by {rel}", signal="manifest", source=rel, stricter=stricter)
    if root is not None:
        return _detected(root, roots)
    return RuleSetChoice(load_ruleset(DEFAULT_RULESET, roots), "default", signal="default")


def _context(walk: Walk, manifests: tuple[tuple[str, Manifest], ...], ruleset: RuleSet,
             root: Path, proof: str) -> CheckContext:
    declared_vendored = declared_vendored_dirs(manifests)
    inventory = classify(walk, ruleset.layout, ruleset.divisions,
                         vendored_markers=ruleset.vendored.markers,
                         min_vendored_native=ruleset.vendored.min_native_files,
                         declared_vendored=declared_vendored)
    overrides = {WITHOUT_SOURCE.id: ruleset.binary_policy.without_source,
                 WITH_SOURCE.id: ruleset.binary_policy.build_product_with_source}
    if proof != "static":  # an unproven copy is no longer a warning once proof is asked for
        overrides[VENDORED.id] = "error"
    return CheckContext(root.resolve(), ruleset, inventory, manifests, overrides, proof, walk)


def build_context(root: Path, rules: str | None, rules_dirs: tuple[Path, ...] = (),
                  proof: str = "static", scan_cache: Path | None = None) -> tuple[CheckContext, RuleSetChoice]:
    """Walk ``root`` once and assemble everything checks need (``proof``: see
    ``CheckContext.proof``; rule directories inside ``root`` are refused: ``InputError``, exit 2;
    ``scan_cache``: the scan cache's directory, None to read every file)."""
    refuse_rule_roots_inside(root, rules_dirs)
    walk = walk_tree(root, scan_cache_dir=scan_cache)
    manifests = read_manifests(walk)
    choice = choose_ruleset(rules, manifests, root, rules_dirs)
    return _context(walk, manifests, choice.ruleset, root, proof), choice


def _stricter_verdict(ctx: CheckContext, choice: RuleSetChoice) -> Finding | None:
    """The static verdict under the stricter round that also fits, as a finding naming it."""
    if choice.stricter is None or ctx.walk is None:
        return None
    stricter = load_ruleset(choice.stricter, list(choice.rules_dirs))  # where the candidate was found
    other = _context(ctx.walk, ctx.manifests, stricter, ctx.root, ctx.proof)
    findings = StaticStage().run(other)
    errors = sum(1 for f in findings if f.severity is Severity.ERROR)
    verdict = "FAIL" if errors else "PASS"
    return ctx.finding(STRICTER_ROUND.id, choice.source or ".", f"the tree named {choice.ruleset.id} "
                       f"({choice.signal}), but the stricter {stricter.id} also fits its layout and "
                       f"benchmarks: under {stricter.id} it would {verdict} with {errors} error(s)",
                       hint=f"Name the round with --rules (e.g. --rules {stricter.id}); CI should always do so.",
                       details={"stricter_round": stricter.id, "stricter_errors": errors})


def stages_for(options: CheckOptions) -> list[Stage]:
    """The stages ``options`` asks for, in the order they run: static, then upstream, then verify."""
    stages: list[Stage] = [StaticStage()]
    if options.upstream is not None:
        stages.append(UpstreamStage(options.upstream))
    if options.verify is not None:
        stages.append(VerifyStage(options.verify))
    return stages


def report_for(ctx: CheckContext, choice: RuleSetChoice, stages: list[Stage]) -> CheckReport:
    """Run ``stages`` on ``ctx``: the report every reporter renders (findings sorted)."""
    findings = [f for stage in stages for f in stage.run(ctx)]
    stricter = _stricter_verdict(ctx, choice)
    if stricter is not None:
        findings.append(stricter)
    return CheckReport(ctx.root, choice, tuple(sorted(findings, key=Finding.sort_key)), ctx.inventory,
                       tuple(stage.name for stage in stages))


def run_check(root: Path, options: CheckOptions | None = None) -> CheckReport:
    """The whole ``compliance check``: static checks plus the stages asked for (None: static only)."""
    options = options or CheckOptions()
    ctx, choice = build_context(root, options.rules, options.rules_dirs, options.proof, options.scan_cache)
    return report_for(ctx, choice, stages_for(options))
