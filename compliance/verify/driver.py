"""The verifier's side: one kernel process per kernel, tensors in, verdicts and findings out.

Importing this module loads no torch: it plans the cases (plain data). Verifying a
kernel does, in this process, which never loads submission code: it decides
whether the kernel can run here at all (torch, a GPU, the runtime), makes every
case's inputs and float64 reference (``compliance.verify.judge``), starts
``python -m compliance.verify.kernel_process`` in its own process group, follows
its progress pipe with a deadline (one for the build, one for the cases), kills
the group when a deadline passes, and judges the tensors the kernel's process
wrote back. Progress lines on the pipe are hints for display and deadlines; a
malformed one is dropped, and none can make a case pass or a kernel be skipped.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compliance.rulespecs import verify as rules
from compliance.verify.build import BuildError, BuildSpec, parse_build
from compliance.verify.cases import Case, DomainError, generate_cases
from compliance.verify.kernel_process import EVENT_FD_VARIABLE, input_path, result_path
from compliance.verify.options import DEFAULT_BUILD_TIMEOUT_S, Progress
from compliance.verify.tolerance import bounds_for

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel
    from compliance.findings import Finding

EXCERPT_LINES = 15
"""Log lines quoted in a finding (matching lines, then the tail)."""
CASES_IN_DETAILS = 10
"""Failing cases listed in a finding's details."""
RUNS = 2
"""Calls per case (``compliance.verify.judge.RUNS``; kept here so that planning loads no torch)."""


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
    allow_unverified: bool = False
    """A kernel this machine cannot run is a warning (verify-skipped), not an error (verify-not-run)."""


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
    """What verifying one kernel gave (judged in the verifier's process)."""

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
    """Why it could not run here at all (no torch, no GPU), as the verifier's process found."""
    skipped: str = ""
    """Short form of ``unavailable`` for progress lines: ``no GPU``, ``no torch``."""
    seconds: float = 0.0
    """Wall time of the subprocess."""
    build_seconds: float | None = None
    """Time of the build step."""

    @property
    def passed(self) -> bool:
        """Every planned case ran and passed."""
        return (self.stopped is None and self.unavailable is None and len(self.cases) == self.planned
                and all(c.passed for c in self.cases))


MAX_LINE = 1 << 20
"""Longest event line kept; longer runs without a newline are dropped (the pipe is the kernel's to write)."""


@dataclass
class ProgressReader:
    """Line reader over the progress pipe with deadlines. The kernel's code can write to this pipe too, so
    a line is only ever a hint: malformed lines are dropped, and nothing read here makes a case pass."""

    fd: int
    buffer: bytes = b""
    closed: bool = False
    dropped: int = 0
    """Lines that were not JSON events."""

    def events(self, deadline: Callable[[], float]) -> Iterator[dict[str, Any] | None]:
        """Events as they arrive; None when the current deadline passes."""
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                event = self._parse(line)
                if event is not None:
                    yield event
            if len(self.buffer) > MAX_LINE:
                self.buffer, self.dropped = b"", self.dropped + 1
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

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except ValueError:  # not JSON (or not UTF-8): the submission's own output, not ours
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            self.dropped += 1
            return None
        return event


def kernel_seed(seed: int, kernel_id: str) -> int:
    """The seed of one kernel's cases."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{kernel_id}".encode()).digest()[:8], "little") >> 1


def log_excerpt(text: str) -> str:
    """Lines that mention an error, then the tail of the log."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    marked = [ln for ln in lines if re.search(r"error|illegal|fault|abort|exception|killed", ln, re.IGNORECASE)]
    picked = marked[:EXCERPT_LINES] + ["..."] + lines[-EXCERPT_LINES:] if marked else lines[-EXCERPT_LINES:]
    return "\n".join(ln[:300] for ln in picked)[-4000:]


def _job(ctx: CheckContext, dk: DeclaredKernel, cases: list[Case], opts: VerifySettings,
         exchange: Path) -> dict[str, Any]:
    return {"build": dict(dk.kernel.build), "language": dk.kernel.language, "sources": list(dk.kernel.sources),
            "root": str(ctx.root), "manifest_dir": dk.manifest_dir, "build_root": str(opts.build_root),
            "exchange": str(exchange), "cases": [c.to_json() for c in cases]}


def _say(opts: VerifySettings, text: str) -> None:
    if opts.progress is not None:
        opts.progress(text)


def unavailable_reason(spec: BuildSpec) -> tuple[str, str] | None:
    """(short label, message) when this machine cannot run the kernel, decided here, in the verifier's
    process, before the kernel's process starts (None: it can)."""
    try:
        import torch
    except ImportError as exc:
        return "no torch", f"torch is not installed ({exc}); pip install 'mlperf-kernel-compliance[kernels]'"
    if spec.device == "cuda" and not torch.cuda.is_available():
        return "no GPU", "this kernel needs an NVIDIA GPU and torch sees none"
    try:
        if spec.kind == "nvrtc":
            from compliance.verify.nvrtc import bindings

            bindings()
        elif spec.kind == "triton":
            import triton  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        return f"no {spec.kind}", f"the {spec.kind} runtime is not installed ({exc})"
    return None


@dataclass
class _Judging:
    """The verifier's side of one kernel's run: the prepared cases, and those judged so far."""

    cases: list[Case]
    prepared: dict[int, Any]
    """``compliance.verify.judge.Prepared`` by case index, dropped once judged."""
    exchange: Path
    opts: VerifySettings
    label: str
    started: float
    judged: dict[int, CaseOutcome] = field(default_factory=dict)

    def judge(self, index: int) -> None:
        """Judge case ``index`` if its results are complete (both runs, or a run that did not return)."""
        from compliance.verify.judge import judge, read_result

        if index in self.judged or index not in self.prepared:
            return
        paths = [result_path(self.exchange, index, run) for run in range(RUNS)]
        if not paths[0].exists():
            return
        results = [read_result(paths[0])]
        if not (isinstance(results[0], dict) and "error" in results[0]):
            if not paths[1].exists():
                return
            results.append(read_result(paths[1]))
        verdict = judge(self.prepared.pop(index), results)
        case = self.cases[index]
        outcome = CaseOutcome(case.id, case.describe(), verdict["status"] == "pass", tuple(verdict["problems"]),
                              verdict["worst_ratio"], verdict["max_error"], verdict["seconds"])
        self.judged[index] = outcome
        _say(self.opts, _case_line(self.label, index, len(self.cases), outcome, time.monotonic() - self.started))

    def outcomes(self) -> tuple[CaseOutcome, ...]:
        """Every judged case, in order, after judging whatever results are complete."""
        for index in range(len(self.cases)):
            self.judge(index)
        return tuple(self.judged[i] for i in sorted(self.judged))

    def first_missing(self) -> Case | None:
        """The first case without a verdict."""
        return next((c for i, c in enumerate(self.cases) if i not in self.judged), None)


def _prepare(ctx: CheckContext, dk: DeclaredKernel, spec: BuildSpec, cases: list[Case],
             exchange: Path) -> dict[int, Any]:
    """Every case's inputs and reference, made here; the input files the kernel's process reads."""
    import torch

    from compliance.verify.judge import case_bound, prepare, write_inputs

    # The verifier's tensors are small: one intra-op thread avoids the spin-waits of an oversubscribed
    # pool (the kernel's process runs beside this one), which on a busy CI machine made them 30 times slower.
    torch.set_num_threads(1)
    bounds = bounds_for(ctx.ruleset.entry(dk.kernel.category))
    returns = getattr(spec, "returns_output", False)
    prepared = {}
    for index, case in enumerate(cases):
        prepared[index] = prepare(case, case_bound(case, bounds), returns)
        write_inputs(prepared[index], input_path(exchange, index))
    return prepared


def run_kernel(ctx: CheckContext, dk: DeclaredKernel, spec: BuildSpec, cases: list[Case], seed: int,
               time_limit_s: int, opts: VerifySettings, label: str) -> KernelOutcome:
    """Run one kernel's process to the end (or its deadline) and judge what it sent back."""
    unavailable = unavailable_reason(spec)
    if unavailable is not None:
        return KernelOutcome(dk.kernel.id, seed, (), len(cases), None, unavailable[1], skipped=unavailable[0])
    opts.build_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compliance-verify-") as tmp:
        job_path, log_path, exchange = Path(tmp) / "job.json", Path(tmp) / "log.txt", Path(tmp) / "exchange"
        exchange.mkdir()
        judging = _Judging(cases, _prepare(ctx, dk, spec, cases, exchange), exchange, opts, label, time.monotonic())
        job_path.write_text(json.dumps(_job(ctx, dk, cases, opts, exchange)), encoding="utf-8")
        read_fd, write_fd = os.pipe()
        env = {**os.environ, EVENT_FD_VARIABLE: str(write_fd), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "compliance.verify.kernel_process", str(job_path)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                                    env=env, pass_fds=(write_fd,), start_new_session=True)
        os.close(write_fd)
        try:
            stopped, build_seconds = _collect(ProgressReader(read_fd), dk, judging, time_limit_s, opts, label, started,
                                              log_path)
        finally:
            os.close(read_fd)
            _stop(proc)
        done = judging.outcomes()
        missing = judging.first_missing()
        if stopped is None and missing is not None:
            status = proc.returncode
            why = (f"killed by signal {-status}" if status and status < 0 else f"exit status {status}")
            stopped = (rules.CRASH.id, f"the kernel's process ended ({why}) without results for case "
                       f"{missing.describe()}", log_excerpt(log_path.read_text(errors="replace")))
        return KernelOutcome(dk.kernel.id, seed, done, len(cases), stopped, build_seconds=build_seconds,
                             seconds=time.monotonic() - started)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the kernel subprocess's process group (compilers included) if it is still there."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if proc.returncode is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


STOPPING_EVENTS = {"build-failed": rules.BUILD_FAILED.id, "invalid": rules.BUILD_INVALID.id,
                   "runner-error": rules.CRASH.id, "aborted": rules.CRASH.id}
"""Progress events that end a kernel's run early, and the rule each gives (they can only fail a kernel)."""


def _collect(reader: ProgressReader, dk: DeclaredKernel, judging: _Judging, time_limit_s: int, opts: VerifySettings,
             label: str, started: float, log_path: Path) -> tuple[tuple[str, str, str] | None, float | None]:
    """Follow the progress pipe until the process ends or a deadline passes: (why it stopped early, or
    None; build seconds). Cases are judged as their results arrive."""
    phase, deadline = "build", started + opts.build_timeout_s
    build_seconds: float | None = None
    current = "the build"
    for event in reader.events(lambda: deadline):  # noqa: B023  (reads the current deadline on purpose)
        if event is None:
            limit = opts.build_timeout_s if phase == "build" else time_limit_s
            message = f"{phase} time limit of {limit} s exceeded during {current}; the process was killed"
            return (rules.TIMEOUT.id, message, log_excerpt(log_path.read_text(errors="replace"))), build_seconds
        kind, index = event["event"], event.get("index")
        if kind == "build-start":
            _say(opts, f"{label} building ({dk.kernel.build.get('kind')})")
        elif kind == "build-done" and phase == "build":
            seconds = event.get("seconds")
            build_seconds = float(seconds) if isinstance(seconds, (int, float)) else None
            phase, deadline = "run", time.monotonic() + time_limit_s
            _say(opts, f"{label} built in {build_seconds or 0:.1f} s; {len(judging.cases)} cases, {RUNS} runs each")
        elif kind in STOPPING_EVENTS:
            message = str(event.get("message", kind))[:2000]
            return (STOPPING_EVENTS[kind], message, log_excerpt(log_path.read_text(errors="replace"))), build_seconds
        elif kind == "case-start" and isinstance(index, int) and 0 <= index < len(judging.cases):
            current = f"case {judging.cases[index].id}"
        elif kind == "case-done" and isinstance(index, int):
            judging.judge(index)
    return None, build_seconds


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
    outcome = run_kernel(ctx, dk, spec, cases, seed, limit, opts, label)
    if outcome.unavailable:
        _say(opts, f"{label} skipped ({outcome.skipped}): not verified, {len(cases)} cases not run")
    else:
        verdict = "PASS" if outcome.passed else "FAIL"
        _say(opts, f"{label} {verdict}: {sum(c.passed for c in outcome.cases)}/{len(cases)} cases passed "
                   f"in {outcome.seconds:.1f} s; domain: {dk.kernel.semantics.domain.describe()}")
    return outcome_findings(ctx, dk, outcome, opts.seed, opts.allow_unverified, spec)


def _compiled_with(dk: DeclaredKernel, spec: BuildSpec | None, base: dict[str, Any]) -> str:
    """The report's words for what was compiled besides the kernel's sources (and ``base`` gets the lists)."""
    said = ""
    if dk.kernel.build.get("kind") == "triton":  # the trust boundary: submission Python that was executed
        base["imported"] = [dk.kernel.build["module"]]
        said = f"; imported only {dk.kernel.build['module']} of the submission"
    for key, label in (("build_dependencies", "build dependencies (shipped, not this kernel)"),
                       ("verification_shims", "verification shims (not shipped code)")):
        listed = list(dk.kernel.build.get(key, ()))
        if listed and spec is not None:
            base[key] = listed
            said += f"; compiled with {label}: {', '.join(listed)}"
    return said


def outcome_findings(ctx: CheckContext, dk: DeclaredKernel, outcome: KernelOutcome, seed: int,
                     allow_unverified: bool = False, spec: BuildSpec | None = None) -> list[Finding | None]:
    """Findings for one kernel: one per rule broken (listing the cases), or one that it passed."""
    domain = dk.kernel.semantics.domain.describe()
    base: dict[str, Any] = {"seed": seed, "cases_planned": outcome.planned, "cases_run": len(outcome.cases),
                            "domain": domain}
    imported = _compiled_with(dk, spec, base)
    if outcome.unavailable:
        rule = rules.SKIPPED.id if allow_unverified else rules.NOT_RUN.id
        allowed = " (allowed by --allow-unverified)" if allow_unverified else ""
        return [_finding(ctx, dk, rule, f"kernel {dk.kernel.id!r} was not verified{allowed}: "
                         f"{outcome.unavailable}; {outcome.planned} cases not run", base)]
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
