"""Synthetic whole-round trees: every benchmark of a rule set, for any number of submitters.

Used by the per-round tests (small trees) and by ``benchmarks/compliance/round_speed.py``
(a round of realistic size). Trees are data only: no manifest, so the check
must detect the round itself unless told.
"""

from __future__ import annotations

from pathlib import Path

from compliance.ruleset import RuleSet

SCENARIOS = ("Offline", "Server")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _training_org(org: Path, ruleset: RuleSet, files_per_benchmark: int) -> None:
    system = f"{org.name.lower()}_sys"
    _write(org / "systems" / f"{system}.json", "{}\n")
    for bench in ruleset.benchmarks:
        impl = org / "benchmarks" / bench / "implementations" / "pytorch"
        for n in range(files_per_benchmark):
            _write(impl / f"mod{n % 10}" / f"f{n}.py", f"def f{n}(x):\n    return x + {n}\n")
        for n in range(5):
            _write(org / "results" / system / bench / f"result_{n}.txt", ":::MLLOG {}\n")


def _v05_org(org: Path, ruleset: RuleSet, files_per_benchmark: int) -> None:
    for bench in ruleset.benchmarks:
        entry = org / f"{bench}-entry"
        for n in range(files_per_benchmark):
            _write(entry / "code" / bench / "model" / f"f{n}.py", f"x = {n}\n")
        _write(entry / "results" / "sys" / "entry.json", "{}\n")
        _write(entry / "results" / "sys" / bench / "result_0.txt", ":::MLPv0.5.0\n")


def _inference_org(org: Path, ruleset: RuleSet, files_per_benchmark: int) -> None:
    system = f"{org.name.lower()}_sys"
    _write(org / "systems" / f"{system}.json", "{}\n")
    for bench in ruleset.benchmarks:
        for n in range(files_per_benchmark):
            _write(org / "code" / bench / "impl" / f"f{n}.py", f"x = {n}\n")
        for scenario in SCENARIOS:
            run = org / "results" / system / bench / scenario / "performance" / "run_1"
            _write(run / "mlperf_log_summary.txt", "Result is : VALID\n")
            _write(org / "measurements" / system / bench / scenario / "user.conf", "\n")


def write_round(root: Path, ruleset: RuleSet, submitters: int = 1,
                files_per_benchmark: int = 2) -> Path:
    """A tree holding every benchmark of ``ruleset`` for ``submitters`` organizations."""
    for index in range(submitters):
        name = f"Org{index:02d}"
        if ruleset.layout == "inference":
            _inference_org(root / "closed" / name, ruleset, files_per_benchmark)
        elif ruleset.layout == "training-v0.5":
            _v05_org(root / name, ruleset, files_per_benchmark)
        else:
            _training_org(root / name, ruleset, files_per_benchmark)
    return root
