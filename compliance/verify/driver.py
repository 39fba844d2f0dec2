"""The parent side of verification: one subprocess per kernel, events in, findings out.

Nothing here imports torch: the parent plans the cases (plain data), starts
``python -m compliance.verify.kernel_process`` per kernel in its own process group,
reads its JSON events with a deadline (one for the build, one for the cases),
kills the group when a deadline passes, and turns what came back into findings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compliance.verify import specs as rules
from compliance.verify.build import BuildError, parse_build
from compliance.verify.cases import Case, DomainError, generate_cases
from compliance.verify.kernel_process import EVENT_FD_VARIABLE
from compliance.verify.options import DEFAULT_BUILD_TIMEOUT_S, Progress
from compliance.verify.tolerance import bounds_for, bounds_to_json

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel
    from compliance.findings import Finding

EXCERPT_LINES = 15
"""Log lines quoted in a finding (matching lines, then the tail)."""
CASES_IN_DETAILS = 10
"""Failing cases listed in a finding's details."""


@dataclass(frozen=True)
class VerifySettings:
    """What to verify and how: ``VerifyOptions`` resolved (seed drawn, build root chosen)."""

    seed: int
    """Master seed; each kernel's cases derive from it and the kernel id."""
    build_root: Path
    """Where builds go (outside the checked tree)."""
    kernels: tuple[str, ...] = ()
    """Kernel ids to verify; empty: all."""
    build_timeout_s: int = DEFAULT_BUILD_TIMEOUT_S
    """Limit for the build step."""
    time_limit_s: int | None = None
    """Limit for running the cases; None: the manifest's ``time_limit_s`` or the default."""
    large: bool = True
    """Include the table of more than 2^31 elements."""
    progress: Progress | None = None
    """Where progress lines go (None: nowhere)."""


@dataclass(frozen=True)
class CaseOutcome:
    """What one case gave."""

    case: str
    """Case id."""
    description: str
    """Shapes and flags."""
    passed: bool
    """No problem found."""
    problems: tuple[dict[str, Any], ...]
    """rule, message, details per problem."""
    worst_ratio: float | None
    """Largest error/bound."""
    max_error: float | None
    """Largest absolute error."""
    seconds: float | None
    """Time for both runs."""


@dataclass(frozen=True)
class KernelOutcome:
    """Everything the subprocess of one kernel reported."""

    kernel_id: str
    """Declared id."""
    seed: int
    """Seed of its cases."""
    cases: tuple[CaseOutcome, ...]
    """Cases that finished."""
    planned: int
    """Cases planned."""
    stopped: tuple[str, str, str] | None
    """(rule, message, log excerpt) when the run ended early: build failure, crash, timeout."""
    unavailable: str | None = None
    """Why it could not run here at all (no torch, no GPU)."""
    seconds: float = 0.0
    """Wall time of the subprocess."""
    build_seconds: float | None = None
    """Time of the build step."""

    @property
    def passed(self) -> bool:
        """Every planned case ran and passed."""
        return (self.stopped is None and self.unavailable is None and len(self.cases) == self.planned
                and all(c.passed for c in self.cases))


@dataclass
class _Reader:
    """Line reader over the event pipe with deadlines."""

    fd: int
    buffer: bytes = b""
    closed: bool = False

    def events(self, deadline: Callable[[], float]) -> Iterator[dict[str, Any] | None]:
        """Events as they arrive; None when the current deadline passes."""
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)
            if self.closed:
                return
            wait = deadline() - time.monotonic()
            if wait <= 0:
                yield None
                return
            ready, _, _ = select.select([self.fd], [], [], min(wait, 1.0))
            if ready:
                chunk = os.read(self.fd, 65536)
                self.closed = not chunk
                self.buffer += chunk


def kernel_seed(seed: int, kernel_id: str) -> int:
    """The seed of one kernel's cases."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{kernel_id}".encode()).digest()[:8], "little") >> 1


def log_excerpt(text: str) -> str:
    """Lines that mention an error, then the tail of the log."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    marked = [ln for ln in lines if re.search(r"error|illegal|fault|abort|exception|killed", ln, re.IGNORECASE)]
    picked = marked[:EXCERPT_LINES] + ["..."] + lines[-EXCERPT_LINES:] if marked else lines[-EXCERPT_LINES:]
    return "\n".join(ln[:300] for ln in picked)[-4000:]


def _job(ctx: CheckContext, dk: DeclaredKernel, cases: list[Case], opts: VerifySettings) -> dict[str, Any]:
    rel_dir = dk.manifest_dir
    return {"build": dict(dk.kernel.build), "language": dk.kernel.language, "sources": list(dk.kernel.sources),
            "root": str(ctx.root), "manifest_dir": rel_dir, "build_root": str(opts.build_root),
            "bounds": bounds_to_json(bounds_for(ctx.ruleset.entry(dk.kernel.category))),
            "cases": [c.to_json() for c in cases]}


def _say(opts: VerifySettings, text: str) -> None:
    if opts.progress is not None:
        opts.progress(text)


def run_kernel(ctx: CheckContext, dk: DeclaredKernel, cases: list[Case], seed: int, time_limit_s: int,
               opts: VerifySettings, label: str) -> KernelOutcome:
    """Run one kernel's subprocess to the end (or its deadline)."""
    opts.build_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compliance-verify-") as tmp:
        job_path, log_path = Path(tmp) / "job.json", Path(tmp) / "log.txt"
        job_path.write_text(json.dumps(_job(ctx, dk, cases, opts)), encoding="utf-8")
        read_fd, write_fd = os.pipe()
        env = {**os.environ, EVENT_FD_VARIABLE: str(write_fd), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "compliance.verify.kernel_process", str(job_path)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                                    env=env, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        try:
            outcome = _collect(_Reader(read_fd), dk, cases, seed, time_limit_s, opts, label, started, log_path)
        finally:
            os.close(read_fd)
            _stop(proc)
        if outcome.stopped is None and not outcome.unavailable and len(outcome.cases) < len(cases):
            status = proc.returncode
            why = (f"killed by signal {-status}" if status and status < 0 else f"exit status {status}")
            text = log_path.read_text(errors="replace")
            last = cases[len(outcome.cases)].describe() if len(outcome.cases) < len(cases) else "-"
            message = f"the kernel's process died ({why}) during case {last}"
            outcome = _replace(outcome, stopped=(rules.CRASH.id, message, log_excerpt(text)))
        return _replace(outcome, seconds=time.monotonic() - started)


def _replace(outcome: KernelOutcome, **changes: Any) -> KernelOutcome:
    from dataclasses import replace

    return replace(outcome, **changes)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the kernel subprocess's process group (compilers included) if it is still there."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if proc.returncode is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _collect(reader: _Reader, dk: DeclaredKernel, cases: list[Case], seed: int, time_limit_s: int,
             opts: VerifySettings, label: str, started: float, log_path: Path) -> KernelOutcome:
    phase, deadline = "build", started + opts.build_timeout_s
    done: list[CaseOutcome] = []
    stopped, unavailable, build_seconds = None, None, None
    current = "the build"
    for event in reader.events(lambda: deadline):  # noqa: B023  (reads the current deadline on purpose)
        if event is None:
            text = log_path.read_text(errors="replace")
            limit = opts.build_timeout_s if phase == "build" else time_limit_s
            message = (f"{phase} time limit of {limit} s exceeded during {current}; "
                       "the process was killed")
            stopped = (rules.TIMEOUT.id, message, log_excerpt(text))
            break
        kind = event["event"]
        if kind == "build-start":
            _say(opts, f"{label} building ({dk.kernel.build.get('kind')})")
        elif kind == "build-done":
            build_seconds = event["seconds"]
            phase, deadline = "run", time.monotonic() + time_limit_s
            _say(opts, f"{label} built in {build_seconds:.1f} s; {len(cases)} cases, 2 runs each")
        elif kind in ("build-failed", "invalid", "runner-error"):
            rule = {"build-failed": rules.BUILD_FAILED.id, "invalid": rules.BUILD_INVALID.id,
                    "runner-error": rules.CRASH.id}[kind]
            stopped = (rule, event["message"], log_excerpt(log_path.read_text(errors="replace")))
        elif kind == "unavailable":
            unavailable = event["message"]
        elif kind == "case-start":
            current = f"case {event['case']}"
        elif kind == "case-result":
            outcome = _case_outcome(cases[event["index"]], event)
            done.append(outcome)
            _say(opts, _case_line(label, event["index"], len(cases), outcome, time.monotonic() - started))
        elif kind == "aborted":
            stopped = (rules.CRASH.id, event["message"], log_excerpt(log_path.read_text(errors="replace")))
    return KernelOutcome(dk.kernel.id, seed, tuple(done), len(cases), stopped, unavailable,
                         build_seconds=build_seconds)


def _case_outcome(case: Case, event: dict[str, Any]) -> CaseOutcome:
    return CaseOutcome(case.id, case.describe(), event["status"] == "pass", tuple(event.get("problems", ())),
                       event.get("worst_ratio"), event.get("max_error"), event.get("seconds"))


def _case_line(label: str, index: int, total: int, c: CaseOutcome, elapsed: float) -> str:
    verdict = "pass" if c.passed else "FAIL " + ", ".join(sorted({p["rule"] for p in c.problems}))
    ratio = "" if c.worst_ratio is None else f" err/bound {c.worst_ratio:.2g}"
    return f"{label} case {index + 1}/{total} {c.case}: {verdict}{ratio} [{elapsed:.1f} s]"


def plan(dk: DeclaredKernel, seed: int, large: bool) -> list[Case]:
    """The cases of one kernel."""
    return generate_cases(dk.kernel.semantics, kernel_seed(seed, dk.kernel.id), large)


def selected_kernels(ctx: CheckContext, opts: VerifySettings) -> list[DeclaredKernel]:
    """The declared kernels to verify (``--kernel``), in manifest order."""
    kernels = list(ctx.kernels())
    if opts.kernels:
        kernels = [k for k in kernels if k.kernel.id in opts.kernels]
    return kernels


def verify_kernels(ctx: CheckContext, opts: VerifySettings) -> list[Finding]:
    """Findings of every selected kernel."""
    findings: list[Finding] = []
    kernels = selected_kernels(ctx, opts)
    _say(opts, f"verification seed {opts.seed} (reproduce with --seed {opts.seed}); "
               f"{len(kernels)} kernel(s); builds in {opts.build_root}")
    for n, dk in enumerate(kernels, 1):
        label = f"[{n}/{len(kernels)} {dk.kernel.id}]"
        findings += [f for f in verify_one(ctx, dk, opts, label) if f is not None]
    return findings


def _finding(ctx: CheckContext, dk: DeclaredKernel, rule: str, message: str,
             details: dict[str, Any] | None = None) -> Finding | None:
    return ctx.finding(rule, dk.manifest_path, message, line=dk.kernel.line, kernel=dk.kernel.id,
                       details=details, location=dk.location)


def verify_one(ctx: CheckContext, dk: DeclaredKernel, opts: VerifySettings, label: str) -> list[Finding | None]:
    """Build, run and judge one kernel."""
    if not dk.kernel.build:
        _say(opts, f"{label} no build block: not verified")
        return [_finding(ctx, dk, rules.BUILD_MISSING.id, f"kernel {dk.kernel.id!r} declares no `build:` "
                         "block, so it cannot be built and verified")]
    rel_dir = dk.manifest_dir
    try:
        spec = parse_build(dk.kernel.build, language=dk.kernel.language, sources=dk.kernel.sources,
                           root=ctx.root, manifest_rel_dir=rel_dir)
    except BuildError as exc:
        return [_finding(ctx, dk, rules.BUILD_INVALID.id, f"build block of {dk.kernel.id!r}: {exc}",
                         {"problems": list(exc.problems)})]
    seed = kernel_seed(opts.seed, dk.kernel.id)
    try:
        cases = plan(dk, opts.seed, opts.large)
    except DomainError as exc:
        return [_finding(ctx, dk, rules.BUILD_INVALID.id, f"semantics of {dk.kernel.id!r}: {exc}")]
    limit = opts.time_limit_s or spec.time_limit_s
    outcome = run_kernel(ctx, dk, cases, seed, limit, opts, label)
    verdict = "PASS" if outcome.passed else "not verified" if outcome.unavailable else "FAIL"
    _say(opts, f"{label} {verdict}: {sum(c.passed for c in outcome.cases)}/{len(cases)} cases passed "
               f"in {outcome.seconds:.1f} s; domain: {dk.kernel.semantics.domain.describe()}")
    return outcome_findings(ctx, dk, outcome, opts.seed)


def outcome_findings(ctx: CheckContext, dk: DeclaredKernel, outcome: KernelOutcome,
                     seed: int) -> list[Finding | None]:
    """Findings for one kernel: one per rule broken (listing the cases), or one that it passed."""
    domain = dk.kernel.semantics.domain.describe()
    base: dict[str, Any] = {"seed": seed, "cases_planned": outcome.planned, "cases_run": len(outcome.cases),
                            "domain": domain}
    imported = ""
    if dk.kernel.build.get("kind") == "triton":  # the trust boundary: submission Python that was executed
        base["imported"] = [dk.kernel.build["module"]]
        imported = f"; imported only {dk.kernel.build['module']} of the submission"
    if outcome.unavailable:
        return [_finding(ctx, dk, rules.SKIPPED.id, f"kernel {dk.kernel.id!r} was not verified: "
                         f"{outcome.unavailable}", base)]
    out: list[Finding | None] = []
    by_rule: dict[str, list[tuple[CaseOutcome, dict[str, Any]]]] = {}
    for c in outcome.cases:
        for p in c.problems:
            hits = by_rule.setdefault(p["rule"], [])
            if not hits or hits[-1][0] is not c:  # one entry per case (the two runs may word it differently)
                hits.append((c, p))
    for rule, hits in sorted(by_rule.items()):
        first_case, first = hits[0]
        listed = [{"case": c.description, "message": p["message"], **p.get("details", {})}
                  for c, p in hits[:CASES_IN_DETAILS]]
        message = (f"{len(hits)} of {outcome.planned} case(s): {first['message']} "
                   f"(first: {first_case.description}; seed {seed})")
        out.append(_finding(ctx, dk, rule, message, {**base, "cases": listed}))
    if outcome.stopped is not None:
        rule, message, excerpt = outcome.stopped
        out.append(_finding(ctx, dk, rule, f"{message} (after {len(outcome.cases)} of {outcome.planned} "
                            "cases)", {**base, "log_excerpt": excerpt}))
    if not out:
        worst = max((c.worst_ratio or 0.0 for c in outcome.cases), default=0.0)
        out.append(_finding(ctx, dk, rules.PASSED.id, f"all {outcome.planned} cases passed, twice each; "
                            f"worst error {worst:.2g} of its bound (seed {seed}); domain: {domain}{imported}",
                            {**base, "worst_ratio": worst, "build_seconds": outcome.build_seconds,
                             "seconds": round(outcome.seconds, 2)}))
    return out
