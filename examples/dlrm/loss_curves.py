"""How closely two loss curves of ``dlrm_sharded.py`` must agree (docs/sharding.md, "Loss curves").

Runs on different numbers of ranks train the same model on the same global batches, but add
their floats in another order (DDP's all-reduce of per-rank mean gradients instead of one
full-batch mean, per-batch-size GEMM algorithms, the embedding backward's sums), and SGD amplifies
these differences step by step. So the tolerance is measured, not chosen: the **noise envelope**
of a reference run is the largest difference from it of the same model run again with only the
float order changed (``--reverse-blocks``: each global batch's samples in reverse order;
``--as-ranks M``: one process doing M ranks' arithmetic), as a running maximum over the steps.
A curve agrees with the reference when at every step

    |loss - reference loss| <= max(FLOOR, FACTOR * envelope(step)).

``python3 examples/dlrm/loss_curves.py REF.json --noise A.json B.json --check N2.json``: the
per-step table and the verdict (exit 1 when a checked curve is outside the tolerance);
``--exact R.json C.json``: the two curves must be the same floats (exit 1 otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Measured on the CPU (docs/sharding.md, "Loss curves"): each of three noise runs lies within
# 2.35x the envelope of the other two (leave one out), N = 2 within 1.19x that of all three;
# FACTOR leaves a margin of 1.7 over the worst of those.
FACTOR = 4.0
FLOOR = 1e-6  # ~16 float32 ulps of a loss near 0.7: the first steps, where the runs differ by rounding only


def envelope(reference: Sequence[float], noise_runs: Sequence[Sequence[float]]) -> list[float]:
    """Running maximum over the steps of the noise runs' largest difference from ``reference``."""
    if not noise_runs:
        raise ValueError("the envelope needs at least one noise run")
    out: list[float] = []
    worst = 0.0
    for step, ref in enumerate(reference):
        worst = max([worst, *(abs(run[step] - ref) for run in noise_runs)])
        out.append(worst)
    return out


def tolerance(env: Sequence[float], factor: float = FACTOR, floor: float = FLOOR) -> list[float]:
    return [max(floor, factor * e) for e in env]


@dataclass(frozen=True)
class Agreement:
    """A checked curve against the reference: its largest difference, where, and the largest
    ratio of difference to tolerance (at most 1 when it agrees)."""

    max_diff: float
    worst_step: int
    worst_ratio: float
    steps: int

    @property
    def ok(self) -> bool:
        return self.worst_ratio <= 1.0


def agreement(curve: Sequence[float], reference: Sequence[float], tol: Sequence[float]) -> Agreement:
    steps = min(len(curve), len(reference), len(tol))
    if steps == 0:
        raise ValueError("no common steps to compare")
    diffs = [abs(curve[s] - reference[s]) for s in range(steps)]
    ratios = [d / tol[s] for s, d in enumerate(diffs)]
    worst = max(range(steps), key=ratios.__getitem__)
    return Agreement(max(diffs), worst, ratios[worst], steps)


def losses(path: Path) -> list[float]:
    return [float(x) for x in json.loads(path.read_text())["losses"]]


def report(reference: Sequence[float], noise_runs: Sequence[Sequence[float]], checked: dict[str, Sequence[float]],
           every: int = 5) -> tuple[list[str], bool]:
    """The per-step table (every ``every``-th step and the last) and each checked curve's verdict."""
    env = envelope(reference, noise_runs)
    tol = tolerance(env)
    names = list(checked)
    lines = [f"{'step':>5} {'reference':>10} {'envelope':>10} {'tolerance':>10} " +
             " ".join(f"{'|d| ' + n:>14}" for n in names)]
    for s in range(len(reference)):
        if s % every == 0 or s == len(reference) - 1:
            cells = " ".join(f"{abs(checked[n][s] - reference[s]):>14.2e}" if s < len(checked[n]) else f"{'-':>14}"
                             for n in names)
            lines.append(f"{s:>5} {reference[s]:>10.6f} {env[s]:>10.2e} {tol[s]:>10.2e} {cells}")
    ok = True
    for n in names:
        a = agreement(checked[n], reference, tol)
        ok &= a.ok
        lines.append(f"{n}: max |loss - reference| {a.max_diff:.2e} over {a.steps} steps; worst step {a.worst_step} at "
                     f"{a.worst_ratio:.2f} x tolerance (max(FLOOR {FLOOR:g}, {FACTOR:g} x envelope of "
                     f"{len(noise_runs)} noise runs)): {'within' if a.ok else 'OUTSIDE'}")
    return lines, ok


def exact(a: Sequence[float], b: Sequence[float]) -> tuple[str, bool]:
    steps = min(len(a), len(b))
    diff = max(abs(x - y) for x, y in zip(a, b, strict=False)) if steps else float("nan")
    same = steps > 0 and list(a[:steps]) == list(b[:steps])
    verdict = "the same floats" if same else "NOT the same floats"
    return f"max |difference| over {steps} steps: {diff:.2e} ({verdict})", same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("reference", type=Path, nargs="?", help="the reference run's JSON (N = 1, full batch)")
    parser.add_argument("--noise", type=Path, nargs="+", default=[], help="noise runs' JSONs (float order changed)")
    parser.add_argument("--check", type=Path, nargs="+", default=[], help="curves that must agree with the reference")
    parser.add_argument("--exact", type=Path, nargs=2, action="append", default=[], metavar=("A", "B"),
                        help="two runs whose curves must be the same floats")
    args = parser.parse_args(argv)
    ok = True
    for a, b in args.exact:
        line, same = exact(losses(a), losses(b))
        print(f"{b.stem} vs {a.stem}: {line}")
        ok &= same
    if args.check:
        if args.reference is None or not args.noise:
            parser.error("--check needs the reference and --noise runs")
        lines, within = report(losses(args.reference), [losses(p) for p in args.noise],
                               {p.stem: losses(p) for p in args.check})
        print("\n".join(lines))
        ok &= within
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
