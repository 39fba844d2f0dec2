"""Which rule set fits a tree, when neither ``--rules`` nor a manifest names one.

Training or inference is read from the layout (training organizations hold
``benchmarks/``; inference ones ``code/`` beside ``systems/``, under a
division; Training v0.5 entries ``code/`` and ``results/`` without
``systems/``). The round is read from what the tree holds, and the report says which signal
decided: a README at the root that names the round (any case of ``README``,
``README.md``, ``README.MD``, ``readme.txt``...; a results repository's own, e.g.
"MLPerf Training v4.0"), else the round named in the name of a file at the root
(``MLPerf_Training_v2.0_results.pdf``, ``inference_v2.1.md``), else the set of
benchmark names under ``results/<system>/`` and the code directories, compared
with every adopted rule set of that usage. When several rounds fit the
benchmarks equally (known names; then how fully the tree holds each round's
benchmarks), nothing in the tree breaks the tie, so the STRICTEST of them is
taken (``strictness``: the one whose rules put the most checks at error level,
e.g. undeclared kernels; then the latest) and the reason says AMBIGUOUS, names
them and how to choose with ``--rules``: a tie is never resolved leniently, and
never silently. AMBIGUOUS stays only where no signal exists.

Only directory and file names at the root and the first bytes of one README are read.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compliance.layout import IMPLEMENTATIONS, V05_ROUND_DIR, subdirs
from compliance.ruleset import RuleSet

DIVISIONS = ("closed", "open", "network")
MARKER_FILES = ("readme.md", "readme", "readme.txt", "readme.rst")
"""README names read for the round (compared case-insensitively: ``README.MD`` counts)."""
MARKER_BYTES = 64 * 1024
_MARKER = re.compile(r"MLPerf\W{0,3}(?:TM\W{0,2})?(Training|Inference)\W{0,3}v?(\d+\.\d+)",
                     re.IGNORECASE)
_REPO_MARKER = re.compile(r"(training|inference)_results_v(\d+\.\d+)", re.IGNORECASE)
_NAME_MARKER = re.compile(r"(?:^|[\W_])(training|inference)[\W_]{0,3}(?:results[\W_]{0,3})?v?(\d+\.\d+)(?![\d.]*\d)",
                          re.IGNORECASE)
_LEVEL_RANK = {"error": 2, "warning": 1}
_SHOWN = 8


@dataclass(frozen=True)
class Detection:
    """The outcome of reading a tree for its usage and round."""

    ruleset_id: str | None
    """The rule set chosen; None when no layout was recognised."""
    reason: str
    """Why, in one sentence, for the report."""
    ambiguous: bool = False
    """Several rounds fit equally (the strictest was taken)."""
    signal: str = "none"
    """What decided: readme, file-name, v0.5-directory, benchmarks or none."""
    fitting: tuple[str, ...] = ()
    """Every round the tree's layout and benchmark names fit (the chosen one included)."""
    source: str = ""
    """The root file that named the round (readme and file-name signals)."""


@dataclass(frozen=True)
class _Unit:
    """A directory that looks like one organization (or a v0.5 entry)."""

    path: Path
    """The directory."""
    kind: str
    """Layout style: training, training-v0.5 or inference."""


def _kind(directory: Path, parent_is_division: bool, level: int, in_v05: bool) -> str | None:
    """The layout style ``directory`` has as an organization, if any.

    ``code/`` and ``results/`` without ``systems/`` is a Training v0.5 entry when it sits
    two levels down (``<round>/<org>/<entry>``) or under ``v0.5.0/``, and a Training v0.6
    organization of that form (``<round>/<org>``) otherwise.
    """
    has = {name for name in ("benchmarks", "benchmark", "code", "results", "systems")
           if (directory / name).is_dir()}
    if has & {"benchmarks", "benchmark"}:
        return "training"
    if "code" in has and ("systems" in has or parent_is_division):
        return "inference"
    if {"code", "results"} <= has:
        return "training-v0.5" if in_v05 or level >= 2 else "training"
    if {"systems", "results"} <= has:
        return "training"
    return None


def _units(root: Path, level: int = 0, in_division: bool = False,
           in_v05: bool = False) -> list[_Unit]:
    """Organization-like directories at or below ``root`` (three levels at most)."""
    kind = _kind(root, in_division, level, in_v05)
    if kind is not None:
        return [_Unit(root, kind)]
    if level == 3:
        return []
    found: list[_Unit] = []
    for child in subdirs(root):
        found += _units(child, level + 1, child.name in DIVISIONS,
                        in_v05 or child.name == V05_ROUND_DIR)
    return found


def _names(unit: _Unit) -> set[str]:
    """Benchmark directory names an organization (or entry) uses."""
    names: set[str] = set()
    for system in subdirs(unit.path / "results"):
        names.update(d.name for d in subdirs(system))
    for code_dir in ("benchmarks", "benchmark", "code") if unit.kind == "training" else ("code",):
        if unit.kind == "inference" and names:
            break  # inference code/ also holds shared directories; results name the models
        for bench in subdirs(unit.path / code_dir):
            if bench.name == IMPLEMENTATIONS:  # the inverted layout: implementations/<system>/<b>
                names.update(b.name for system in subdirs(bench) for b in subdirs(system))
            else:
                names.add(bench.name)
    return names


def _root_files(root: Path) -> list[str]:
    """Names of the regular files at the root (never following a link), sorted."""
    try:
        with os.scandir(root) as entries:
            return sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
    except OSError:
        return []


def _read_head(path: Path) -> str | None:
    """The first ``MARKER_BYTES`` of a regular file, opened without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MARKER_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _marker(root: Path) -> tuple[str, str, str, str] | None:
    """(usage, round, signal, where) the root names, e.g. ("training", "v4.0", "readme", "README.MD")."""
    names = _root_files(root)
    for wanted in MARKER_FILES:
        for name in names:
            if name.lower() != wanted:
                continue
            text = _read_head(root / name)
            match = (_MARKER.search(text) or _REPO_MARKER.search(text)) if text else None
            if match:
                return match.group(1).lower(), f"v{match.group(2)}", "readme", name
    for name in names:
        match = _NAME_MARKER.search(name)
        if match:
            return match.group(1).lower(), f"v{match.group(2)}", "file-name", name
    if (root / V05_ROUND_DIR).is_dir() or root.name == V05_ROUND_DIR:
        return "training", "v0.5", "v0.5-directory", V05_ROUND_DIR
    return None


def strictness(ruleset: RuleSet) -> int:
    """How strict a rule set is, read from its data: the levels of every static check it
    configures (error 2, warning 1, info and off 0), summed. Training v0.7, where undeclared
    and non-allowlisted kernels are errors, is stricter than v1.0-v5.1, where they are warnings."""
    from compliance.rulespecs.registry import all_specs

    return sum(_LEVEL_RANK.get(ruleset.check_config(spec.id).level, 0)
               for spec in all_specs() if spec.stage == "static")


def _version(ruleset: RuleSet) -> tuple[int, ...]:
    digits = re.findall(r"\d+", ruleset.round)
    return tuple(int(d) for d in digits)


def _listing(names: Iterable[str]) -> str:
    items = sorted(names)
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _mismatch(ruleset: RuleSet, names: set[str]) -> tuple[int, int]:
    """(names the round does not know, names it knows only as aliases): lower is better."""
    unknown = sum(1 for n in names if ruleset.official_benchmark(n) is None)
    aliased = sum(1 for n in names if n in ruleset.benchmark_aliases)
    return unknown, aliased


def _missing(ruleset: RuleSet, names: set[str]) -> int:
    """Benchmarks of the round the tree does not hold."""
    known = {ruleset.official_benchmark(n) for n in names}
    return sum(1 for b in ruleset.benchmarks if b not in known)


def _fitting(pool: Sequence[RuleSet], names: set[str]) -> list[RuleSet]:
    """Every round whose benchmarks the names fit best (by official name first), oldest first."""
    best = min(_mismatch(rs, names) for rs in pool)
    return sorted((rs for rs in pool if _mismatch(rs, names) == best), key=_version)


def _by_benchmarks(pool: Sequence[RuleSet], names: set[str], what: str) -> Detection:
    """The round whose benchmarks the tree's names fit: every round that knows the names
    (by official name first) is consistent with the tree. Nothing else in the tree tells
    them apart, so of several the strictest is taken (then the latest): ambiguity is
    reported, and never resolved in the submitter's favour."""
    consistent = _fitting(pool, names)
    fullest = min(_missing(rs, names) for rs in consistent)
    tied = [rs for rs in consistent if _missing(rs, names) == fullest]  # the tree holds these most fully
    chosen = max(tied, key=lambda rs: (strictness(rs), _version(rs)))
    unknown = sorted(n for n in names if chosen.official_benchmark(n) is None)
    reason = f"{what}; round from its benchmark names ({_listing(names) or 'none'})"
    if len(consistent) == 1:
        reason += f": only {chosen.id} fits"
    else:
        ids = [rs.id for rs in consistent]
        fits = ", ".join(ids) if len(ids) <= 4 else f"{len(ids)} rounds, {ids[0]} to {ids[-1]},"
        why = "the strictest" + (" of those it holds most fully" if len(tied) < len(consistent) else "")
        reason += (f": AMBIGUOUS, {fits} all fit; took {chosen.id}, {why} (name the round with "
                   f"--rules, e.g. --rules {ids[-1]})")
    if unknown:
        reason += f"; {len(unknown)} name(s) fit no round: {_listing(unknown)}"
    return Detection(chosen.id, reason, ambiguous=len(consistent) > 1, signal="benchmarks",
                     fitting=tuple(rs.id for rs in consistent))


def detect_ruleset(root: Path, candidates: Sequence[RuleSet]) -> Detection:
    """The adopted rule set of ``candidates`` that fits the tree at ``root``, and why."""
    units = _units(root)
    kinds = Counter(u.kind for u in units)
    if not kinds:
        return Detection(None, "no training or inference organization recognised")
    kind = kinds.most_common(1)[0][0]
    # one organization in both divisions, or with several v0.5 entries, counts once (as in the report)
    count = len({(u.path.parent if u.kind == "training-v0.5" else u.path).name for u in units if u.kind == kind})
    usage = "inference" if kind == "inference" else "training"
    what = f"{usage} layout ({count} organization(s)" + (f", {kind}" if kind != usage else "")
    if len(kinds) > 1:
        what += f"; AMBIGUOUS layout, also {', '.join(f'{n} {k}' for k, n in kinds.items() if k != kind)}"
    what += ")"
    pool = [rs for rs in candidates if rs.usage == usage and rs.status == "adopted"
            and (rs.layout == "training-v0.5") == (kind == "training-v0.5")]
    if not pool:
        return Detection(None, f"{what}, but no adopted {usage} rule set is available")
    names = set().union(*(_names(u) for u in units if u.kind == kind))
    marker = _marker(root)
    if marker is not None and marker[0] == usage:
        named = [rs for rs in pool if rs.round == marker[1]]
        if named:
            fitting = tuple(rs.id for rs in _fitting(pool, names))
            source = {"readme": f"the tree's {marker[3]}", "file-name": f"the file name {marker[3]!r}",
                      "v0.5-directory": f"the {marker[3]}/ directory"}[marker[2]]
            return Detection(named[0].id, f"{what}; round {marker[1]} named by {source} "
                                          f"(MLPerf {usage.title()} {marker[1]})",
                             signal=marker[2], fitting=fitting, source=marker[3])
    return _by_benchmarks(pool, names, what)
