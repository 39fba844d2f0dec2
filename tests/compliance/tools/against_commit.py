"""Run an older commit's ``compliance check`` on today's fixture trees: does each fixture fail there?

Issues 39 and 40 accept a fixture only if it "fails on today's code" (the code when they were
filed, c774147). This tool builds every case (``cases/{positive,negative}/``, with the harness's
overlay and ``generate:`` steps) and every pattern round (``rounds/``) into a temporary
directory, runs the old checkout's CLI and this tree's CLI on it with the options the tests use
(the case's or round's rule set), and prints one Markdown row per fixture: the expected verdict,
the old and the new exit code and rule ids, and whether the old verdict differs from the expected
one. Where old and new differ it also names the paths that carry an error in one and not the
other: a path with an error now and none before is what the old code let through (the bypass);
a path with an error before and none now is a false error the old code gave.

    git worktree add /tmp/old c774147
    PYTHONPATH=$PWD python3 -m tests.compliance.tools.against_commit /tmp/old [--since c774147] [--all]

By default only fixtures added or changed since ``--since`` (default: the old checkout's HEAD)
are run. Nothing runs the old code in-process: each check is a subprocess with the old checkout
alone on PYTHONPATH, with a time limit (a hang is reported as such).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.compliance.treeutil import CASES, build_case, materialise_round

HERE = Path(__file__).resolve().parents[3]
ITEM = re.compile(r"(?:control (?:of|for) )?issue \d+ (?:item|pattern) [\d/]+")
ROUNDS = HERE / "tests" / "compliance" / "rounds"
TIME_LIMIT_S = 120


@dataclass(frozen=True)
class Outcome:
    """One run of ``compliance check --format json``."""

    exit_code: int | str  # "hang" when the time limit ran out
    findings: tuple[tuple[str, str, str], ...] = ()  # (rule id, severity, path)

    def rule_ids(self) -> set[str]:
        return {rule for rule, _, _ in self.findings}

    def error_paths(self) -> set[str]:
        return {path for _, severity, path in self.findings if severity == "error"}

    def verdicts(self) -> dict[str, list[str]]:
        by_path: dict[str, list[str]] = {}
        for rule, severity, path in self.findings:
            by_path.setdefault(path, []).append(f"{rule}/{severity}")
        return {path: sorted(v) for path, v in by_path.items()}


@dataclass
class Fixture:
    name: str  # cases/negative/<x> or rounds/<x>
    source: Path
    rules: str | None
    expected_exit: int
    expected_rules: set[str] = field(default_factory=set)  # cases
    expected_verdicts: dict[str, list[str]] | None = None  # rounds
    item: str = ""  # "issue 40 item 8" (from the description), "existed at <commit>" or ""

    def matches(self, outcome: Outcome) -> bool:
        """The test's own acceptance, applied to ``outcome``."""
        if outcome.exit_code != self.expected_exit:
            return False
        if self.expected_verdicts is not None:
            found = outcome.verdicts()
            wanted = {p: v for p, v in self.expected_verdicts.items() if v}
            return {p: v for p, v in found.items() if p in self.expected_verdicts} == wanted and set(found) <= set(
                self.expected_verdicts
            )
        return outcome.rule_ids() == self.expected_rules

    def materialise(self, dest: Path) -> None:
        if self.expected_verdicts is not None:
            materialise_round(self.source, dest)
        else:
            build_case(self.source, dest)


def check(checkout: Path, tree: Path, rules: str | None) -> Outcome:
    """``compliance check`` of ``checkout`` (alone on PYTHONPATH) on ``tree``."""
    command = [sys.executable, "-m", "compliance", "check", str(tree), "--format", "json"]
    if rules:
        command += ["--rules", rules]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("COMPLIANCE_RULES_PATH", None)
    try:
        done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        return Outcome("hang")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return Outcome(done.returncode)
    return Outcome(done.returncode, tuple((f["rule_id"], f["severity"], f["path"]) for f in report["findings"]))


def fixtures(since: str | None, everything: bool) -> list[Fixture]:
    changed = _changed_since(since) if since and not everything else None
    found: list[Fixture] = []
    for kind in ("positive", "negative"):
        for case_dir in sorted(p for p in (CASES / kind).iterdir() if p.is_dir()):
            rel = case_dir.relative_to(HERE).as_posix()
            if changed is not None and not any(c.startswith(rel + "/") for c in changed):
                continue
            case = yaml.safe_load((case_dir / "case.yaml").read_text())
            rules = case.get("rules")
            if rules and rules.endswith(".yaml"):
                rules = str(case_dir / rules)
            expected = set(case.get("expect") or []) if kind == "negative" else set()
            item = _item(str(case.get("description", "")), rel, since)
            found.append(Fixture(f"cases/{kind}/{case_dir.name}", case_dir, rules, case["exit_code"], expected,
                                 item=item))
    for pattern in sorted(p for p in ROUNDS.iterdir() if p.is_dir()):
        rel = pattern.relative_to(HERE).as_posix()
        if changed is not None and not any(c.startswith(rel + "/") for c in changed):
            continue
        spec = yaml.safe_load((pattern / "round.yaml").read_text())
        verdicts = {path: list(v or []) for path, v in spec["verdicts"].items()}
        found.append(Fixture(f"rounds/{pattern.name}", pattern, spec["rules"], spec["exit_code"], set(), verdicts,
                             item=_item(str(spec.get("description", "")), rel, since)))
    return found


def _item(description: str, rel: str, since: str | None) -> str:
    """Which issue item a fixture is for, from its description; else whether it predates ``since``."""
    named = ITEM.search(description)
    if named:
        return named.group(0)
    if since and subprocess.run(["git", "cat-file", "-e", f"{since}:{rel}"], cwd=HERE,
                                capture_output=True).returncode == 0:
        return f"existed at {since[:7]}"
    return ""


def _changed_since(commit: str) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", commit, "--", "tests/compliance/cases", "tests/compliance/rounds"],
        cwd=HERE, capture_output=True, text=True, check=True,
    ).stdout
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "tests/compliance/cases", "tests/compliance/rounds"],
        cwd=HERE, capture_output=True, text=True, check=True,
    ).stdout
    return (out + untracked).split()


def _describe(outcome: Outcome) -> str:
    rules = ", ".join(sorted(outcome.rule_ids())) or "no finding"
    return f"{outcome.exit_code}: {rules}"


def _difference(old: Outcome, new: Outcome) -> str:
    """The paths whose verdict changed: errors first (a missed kernel, a false error), then the rest."""
    before, after = old.verdicts(), new.verdicts()
    changed = sorted((p for p in set(before) | set(after) if before.get(p) != after.get(p)),
                     key=lambda p: (p not in (old.error_paths() ^ new.error_paths()), p))
    shown = [f"{_short(p)}: {_verdict(before.get(p))} → {_verdict(after.get(p))}" for p in changed[:SHOWN]]
    more = f"; {len(changed) - SHOWN} more path(s)" if len(changed) > SHOWN else ""
    return "; ".join(shown) + more


SHOWN = 2


def _kind(fixture: Fixture, old: Outcome, new: Outcome) -> str:
    """What the old code got wrong, in a few words (judged against the new code's findings)."""
    if fixture.matches(old):
        return "judged right"
    if old.exit_code == "hang":
        return "hang"
    if new.error_paths() - old.error_paths():
        return "let it through (exit 0)" if old.exit_code == 0 else "error elsewhere (failed before too)"
    if old.exit_code == 0 and fixture.expected_exit != 0:
        return "passed a failing tree"
    if old.error_paths() - new.error_paths():
        return "false error"
    if set(new.findings) - set(old.findings):
        return "finding missing"
    return "extra finding" if set(old.findings) - set(new.findings) else "other"



def _short(path: str) -> str:
    parts = [p if len(p) <= 40 else f"{p[:8]}…({len(p)} chars)" for p in path.split("/")]
    return "…/" + "/".join(parts[-2:]) if len(parts) > 2 else "/".join(parts)


def _verdict(verdict: list[str] | None) -> str:
    if not verdict:
        return "nothing"
    counted = {v: verdict.count(v) for v in verdict}
    return "+".join(v + (f"×{n}" if n > 1 else "") for v, n in counted.items())


PROBES = (
    # (issue 40 item 11 trap, arguments before "check", arguments after the tree, what shows it)
    ("rules directory inside the checked tree shadows training/v0.7", ("--rules-dir", "{tree}/rules"),
     ("--rules", "training/v0.7"), "exit 2 (refused)"),
    ("JUnit keeps a raw newline of a file name (a line starting PASS)", (),
     ("--rules", "training/v0.7", "--format", "junit"), "no line starts with PASS"),
    ("--output is a symlink loop", (), ("--rules", "training/v0.7", "-o", "{scratch}/loop"), "exit 2"),
    ("stdout is /dev/full", (), ("--rules", "training/v0.7", ">/dev/full"), "exit 2"),
)


def _probe_tree(scratch: Path) -> Path:
    """The base case, an undeclared kernel, one named with a newline and "PASS", and a rules/
    directory whose training/v0.7 turns undeclared kernels off."""
    tree = scratch / "tree"
    shutil.copytree(CASES / "base", tree)
    impl = tree / "Acme/benchmarks/dlrm/implementations/torch"
    kernel = "__global__ void k(float* x) { x[0] = 1; }\n"
    (impl / "hidden.cu").write_text(kernel)
    (impl / "evil\nPASS.cu").write_text(kernel)
    shipped = (HERE / "rules/training/v0.7.yaml").read_text()
    (tree / "rules/training").mkdir(parents=True)
    (tree / "rules/training/v0.7.yaml").write_text(
        shipped.replace("undeclared-kernel: {level: error}", 'undeclared-kernel: {level: "off"}'))
    os.symlink(scratch / "loop", scratch / "loop")
    return tree


def _probe(checkout: Path, tree: Path, scratch: Path, before: tuple[str, ...], after: tuple[str, ...]) -> str:
    fill = {"tree": str(tree), "scratch": str(scratch)}
    args = [a.format(**fill) for a in (*before, "check", str(tree), *after) if a != ">/dev/full"]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with open("/dev/full" if ">/dev/full" in after else os.devnull, "w") as sink:
        done = subprocess.run([sys.executable, "-m", "compliance", *args], cwd=checkout, env=env,
                              stdout=subprocess.PIPE if sink.name == os.devnull else sink,
                              stderr=subprocess.DEVNULL, timeout=TIME_LIMIT_S)
    pass_lines = sum(line.startswith(b"PASS") for line in (done.stdout or b"").splitlines())
    return f"exit {done.returncode}" + (f", {pass_lines} line(s) starting PASS" if "junit" in after else "")


def probes(old: Path) -> None:
    """Issue 40 item 11's traps that are command behaviour, not verdicts: old and new side by side."""
    print("\n| trap (issue 40 item 11) | fixed when | old | new |\n|---|---|---|---|")
    for title, before, after, fixed in PROBES:
        with tempfile.TemporaryDirectory() as scratch:
            tree = _probe_tree(Path(scratch))
            print(f"| {title} | {fixed} | {_probe(old, tree, Path(scratch), before, after)} "
                  f"| {_probe(HERE, tree, Path(scratch), before, after)} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="a checkout of the older commit (git worktree add DIR COMMIT)")
    parser.add_argument("--since", help="only fixtures changed since this commit (default: the old checkout's HEAD)")
    parser.add_argument("--all", action="store_true", help="every case and round, changed or not")
    parser.add_argument("--only", nargs="*", default=[], help="only fixtures whose name contains one of these")
    parser.add_argument("--probes", action="store_true", help="only the command-behaviour traps of issue 40 item 11")
    args = parser.parse_args(argv)
    old = args.old.resolve()
    if args.probes:
        probes(old)
        return 0
    since = args.since or subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=old, capture_output=True, text=True, check=True
    ).stdout.strip()
    print("| fixture | for | expected | old (exit: rule ids) | new (exit: rule ids) | fails before "
          "| paths judged differently (old → new) |")
    print("|---|---|---|---|---|---|---|")
    failures = 0
    for fixture in fixtures(since, args.all):
        if args.only and not any(o in fixture.name for o in args.only):
            continue
        with tempfile.TemporaryDirectory() as scratch:
            tree = Path(scratch) / "tree"
            fixture.materialise(tree)
            before = check(old, tree, fixture.rules)
            after = check(HERE, tree, fixture.rules)
        wanted = f"{fixture.expected_exit}: " + (
            "per-path verdicts" if fixture.expected_verdicts is not None
            else ", ".join(sorted(fixture.expected_rules)) or "no finding"
        )
        fails_before = not fixture.matches(before)
        passes_now = fixture.matches(after)
        failures += not passes_now
        print(
            f"| {fixture.name} | {fixture.item} | {wanted} | {_describe(before)} | {_describe(after)}"
            f"{'' if passes_now else ' (NOT AS EXPECTED)'}"
            f" | {'yes: ' + _kind(fixture, before, after) if fails_before else 'NO'}"
            f" | {_difference(before, after)} |",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
