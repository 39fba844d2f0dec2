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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compliance.rulespecs import verify as rules
from compliance.verify.build import BuildError, BuildSpec, ExtensionBuild, parse_build
from compliance.verify.cases import (
    UNDECLARED_MODE,
    Case,
    DomainError,
    generate_cases,
    interface_passes_mode,
    undeclared_mode_cases,
)
from compliance.verify.kernel_process import input_path, result_path
from compliance.verify.options import DEFAULT_BUILD_TIMEOUT_S, Progress
from compliance.verify.run_state import RunRegistry, kernel_key
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
    runs: RunRegistry | None = None
    """This run's private copies, builds and tree snapshots (None: made per kernel)."""


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
    note: str = ""
    """For a case in an undeclared mode: how the kernel answered it (``mean refused``, ``max right``)."""
    refused: bool = False
    """The kernel raised on a mode it does not declare: it computed nothing, so no launch is asked for."""


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
    tree_changes: tuple[str, ...] = ()
    """Files of the checked tree that changed while this kernel's process ran."""

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
    side: tuple[int, Callable[[bytes], None]] | None = None
    """Another pipe drained while waiting (the probe's records), and where its bytes go."""
    buffer: bytes = b""
    closed: bool = False
    dropped: int = 0
    """Lines that were not JSON events."""
    side_open: bool = True
    finished: bool = False
    """The process said it is done (its descendants may still hold the pipe open)."""

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
            watched = [self.fd] + ([self.side[0]] if self.side is not None and self.side_open else [])
            ready, _, _ = select.select(watched, [], [], min(wait, 1.0))
            if self.side is not None and self.side[0] in ready:
                self._read_side()
            if self.fd in ready:
                chunk = os.read(self.fd, 65536)
                self.closed = not chunk
                self.buffer += chunk

    def _read_side(self) -> None:
        assert self.side is not None
        chunk = os.read(self.side[0], 65536)
        self.side_open = bool(chunk)
        self.side[1](chunk)

    def drain_side(self) -> None:
        """Read what is left on the side pipe (every writer is gone)."""
        while self.side is not None and self.side_open:
            ready, _, _ = select.select([self.side[0]], [], [], 0.5)
            if not ready:
                return
            self._read_side()

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


def _job(dk: DeclaredKernel, cases: list[Case], exchange: Path, launch: Any, event_fd: int,
         cache_dir: Path) -> dict[str, Any]:
    """The kernel process's job: its private copy (never the checked tree), the built module's copy, a
    cache directory of its own, the cases, and the number of its progress pipe."""
    return {"build": dict(dk.kernel.build), "language": dk.kernel.language, "sources": list(dk.kernel.sources),
            "staged_root": str(launch.staged_root), "manifest_dir": dk.manifest_dir, "module": launch.module,
            "cache_dir": str(cache_dir), "exchange": str(exchange), "event_fd": event_fd,
            "cases": [c.to_json() for c in cases]}


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
    device_only: bool = False
    """An NVRTC or Triton kernel: it cannot raise, so writing nothing refuses an undeclared mode."""
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
        if UNDECLARED_MODE in case.tags:
            outcome = undeclared_mode_outcome(case, outcome, self.device_only)
        self.judged[index] = outcome
        _say(self.opts, _case_line(self.label, index, len(self.cases), outcome, time.monotonic() - self.started))

    def outcomes(self) -> tuple[CaseOutcome, ...]:
        """Every judged case, in order, after judging whatever results are complete."""
        for index in range(len(self.cases)):
            self.judge(index)
        return tuple(self.judged[i] for i in sorted(self.judged))

    def judged_indices(self) -> list[int]:
        """Indices of the judged cases, in order."""
        return sorted(self.judged)

    def first_missing(self) -> Case | None:
        """The first case without a verdict."""
        return next((c for i, c in enumerate(self.cases) if i not in self.judged), None)


VALUE_RULES = (rules.MISMATCH.id, rules.UNWRITTEN.id, rules.OUTPUT_INVALID.id, rules.NONDETERMINISTIC.id)
"""Problems that say a returned value is wrong (the others say the kernel broke a rule of conduct)."""


def _refused(problems: tuple[dict[str, Any], ...], device_only: bool) -> bool:
    """The kernel refused the call: it raised, or (``device_only``: an NVRTC or Triton kernel, which cannot
    raise) it wrote no output element at all. A host function that can raise must: writing nothing would
    leave a caller's uninitialised output as the answer."""
    if any(p["rule"] == rules.CRASH.id for p in problems):
        return True
    if not device_only:
        return False
    unwritten = [p.get("details", {}) for p in problems if p["rule"] == rules.UNWRITTEN.id]
    others = [p for p in problems if p["rule"] not in (rules.UNWRITTEN.id, rules.MISMATCH.id)]
    return bool(unwritten) and not others and all(
        d.get("elements") and d.get("unwritten") == d.get("elements") for d in unwritten)


def undeclared_mode_outcome(case: Case, outcome: CaseOutcome, device_only: bool) -> CaseOutcome:
    """A case in a mode the kernel does not declare but is handed (``UNDECLARED_MODE``): a refusal (it
    raised; a device-only kernel: wrote nothing) passes; a right result passes; a wrong value is
    verify-undeclared-mode (other problems, such as a write out of bounds, stay what they are)."""
    if _refused(outcome.problems, device_only):
        return replace(outcome, passed=True, problems=(), note=f"{case.mode} refused", refused=True)
    wrong = [p for p in outcome.problems if p["rule"] in VALUE_RULES]
    if not wrong:
        return replace(outcome, note=f"{case.mode} right" if outcome.passed else "")
    merged = {"rule": rules.UNDECLARED_MODE.id, "details": {**wrong[0].get("details", {}), "mode": case.mode},
              "message": f"mode {case.mode!r} is not among the declared modes, but the kernel's interface hands "
                         f"it the mode and it neither refused it (raised) nor computed it: {wrong[0]['message']}"}
    return replace(outcome, problems=(merged, *(p for p in outcome.problems if p not in wrong)))


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


@dataclass
class _Launch:
    """What the verifier prepared for one kernel's process: its private copy, built module, probe."""

    staged_root: Path
    module: tuple[str, str] | None = None
    """(path of the module copy handed over, module name) for a torch extension."""
    symbols: Any = None
    """``compliance.verify.evidence.SymbolMap`` of that module (CPU evidence)."""
    probe: Any = None
    """``compliance.verify.evidence.Probe``."""
    build_seconds: float | None = None


def _prepare_launch(dk: DeclaredKernel, spec: BuildSpec, tree: Any, opts: VerifySettings, tmp: Path,
                    log_path: Path) -> _Launch | tuple[str, str, str]:
    """Check the private copy, build (extension) and hand over the module, build the probe; or
    (rule, message, log excerpt) when the kernel cannot be run from them."""
    from compliance.verify.evidence import SymbolMap, source_objects
    from compliance.verify.run_state import kernel_key
    from compliance.verify.staging import ArtefactChanged, BuildFailedError, hand_over

    staged = tree.staged[kernel_key(dk)]
    probe = tree.probe(spec.device == "cuda")
    if isinstance(probe, str):  # decided before: unavailable_reason
        return rules.NOT_RUN.id, probe, ""
    try:
        tree.directory.check_staged(staged)
        staged_spec = parse_build(dk.kernel.build, language=dk.kernel.language, sources=dk.kernel.sources,
                                  root=staged.root, manifest_rel_dir=dk.manifest_dir)
        if not isinstance(staged_spec, ExtensionBuild):
            return _Launch(staged.root, probe=probe)
        try:
            artefact = tree.directory.extension(staged_spec, staged, timeout_s=opts.build_timeout_s,
                                                instrument=staged_spec.device == "cpu", log=log_path)
        except subprocess.TimeoutExpired:
            return (rules.TIMEOUT.id, f"build time limit of {opts.build_timeout_s} s exceeded; the build was killed",
                    log_excerpt(log_path.read_text(errors="replace")))
        except BuildFailedError as exc:
            return rules.BUILD_FAILED.id, str(exc), log_excerpt(log_path.read_text(errors="replace"))
        module = hand_over(artefact, tmp)
        symbols = SymbolMap.of(module, source_objects(artefact.build_dir, staged_spec.sources))
        return _Launch(staged.root, (str(module), artefact.module), symbols, probe, artefact.seconds)
    except ArtefactChanged as exc:
        return rules.ARTEFACT_CHANGED.id, str(exc), ""


def run_kernel(ctx: CheckContext, dk: DeclaredKernel, spec: BuildSpec, cases: list[Case], seed: int,
               time_limit_s: int, opts: VerifySettings, label: str) -> KernelOutcome:
    """Run one kernel's process to the end (or its deadline) and judge what it sent back."""
    unavailable = unavailable_reason(spec)
    if unavailable is not None:
        return KernelOutcome(dk.kernel.id, seed, (), len(cases), None, unavailable[1], skipped=unavailable[0])
    runs = opts.runs if opts.runs is not None else RunRegistry(opts.build_root)
    tree = runs.for_tree(ctx)  # before anything of this tree runs: private copies, the tree's snapshot
    probe = tree.probe(spec.device == "cuda")
    if isinstance(probe, str):
        return KernelOutcome(dk.kernel.id, seed, (), len(cases), None, f"{probe}; the verifier cannot tell which "
                             "code computed the output", skipped="no launch evidence")
    if kernel_key(dk) not in tree.staged:
        return KernelOutcome(dk.kernel.id, seed, (), len(cases), (rules.BUILD_INVALID.id, "no private copy of the "
                             "kernel's files was made (its build block did not parse before the run)", ""))
    with tempfile.TemporaryDirectory(prefix="compliance-verify-") as tmp_name:
        tmp = Path(tmp_name)
        log_path, exchange = tmp / "log.txt", tmp / "exchange"
        exchange.mkdir()
        started = time.monotonic()
        _say(opts, f"{label} building ({dk.kernel.build.get('kind')})")
        launch = _prepare_launch(dk, spec, tree, opts, tmp, log_path)
        if not isinstance(launch, _Launch):
            return KernelOutcome(dk.kernel.id, seed, (), len(cases), launch, seconds=time.monotonic() - started,
                                 tree_changes=tuple(tree.tree_changes()))
        judging = _Judging(cases, _prepare(ctx, dk, spec, cases, exchange), exchange, opts, label, time.monotonic(),
                           device_only=not isinstance(spec, ExtensionBuild))
        outcome = _run_process(dk, judging, launch, time_limit_s, opts, label, tmp)
        return KernelOutcome(dk.kernel.id, seed, outcome[0], len(cases), outcome[1],
                             build_seconds=launch.build_seconds, seconds=time.monotonic() - started,
                             tree_changes=tuple(tree.tree_changes()))


def _run_process(dk: DeclaredKernel, judging: _Judging, launch: _Launch, time_limit_s: int,
                 opts: VerifySettings, label: str, tmp: Path) -> tuple[tuple[CaseOutcome, ...],
                                                                       tuple[str, str, str] | None]:
    """Run the kernel's cases in its process, judge them, and add the launch evidence. A process that dies
    on a case in an undeclared mode refused that mode (it returned no value for it: a C++ exception can end
    a process where the platform's unwinder fails): the case is a refusal and a new process runs the rest."""
    from compliance.verify.evidence import ProbeRecords

    records = ProbeRecords()
    deadline = time.monotonic() + time_limit_s
    start = 0
    while True:
        limit = time_limit_s if start == 0 else max(1, int(deadline - time.monotonic()))  # restarts: what is left
        stopped, status = _one_process(dk, judging, launch, limit, opts, label, tmp, records, start)
        missing = judging.first_missing()
        if stopped is not None or missing is None:
            break
        index = judging.cases.index(missing)
        if UNDECLARED_MODE not in missing.tags or index < start:
            why = _ending(status)
            why = f"killed by {why}" if why.startswith("signal") else why
            stopped = (rules.CRASH.id, f"the kernel's process ended ({why}) without results for case "
                       f"{missing.describe()}", log_excerpt((tmp / "log.txt").read_text(errors="replace")))
            break
        judging.judged[index] = CaseOutcome(missing.id, missing.describe(), True, (), None, None, None,
                                            note=f"{missing.mode} refused (the process ended: {_ending(status)})",
                                            refused=True)
        start = index + 1
    done = judging.outcomes()
    done = tuple(_with_evidence(c, i, records, dk, launch) for i, c in zip(judging.judged_indices(), done,
                                                                             strict=True))
    return done, stopped


def _ending(status: int | None) -> str:
    """How a kernel process ended, from its supervisor's exit status (128 + N: signal N)."""
    return f"signal {status - 128}" if status and status > 128 else f"exit status {status}"


def _one_process(dk: DeclaredKernel, judging: _Judging, launch: _Launch, time_limit_s: int,
                 opts: VerifySettings, label: str, tmp: Path, records: Any,
                 start: int) -> tuple[tuple[str, str, str] | None, int | None]:
    """Start the kernel's process under its supervisor for the cases from ``start`` on, follow it, kill
    everything it left: (why it stopped early, or None; its exit status)."""
    from compliance.verify.evidence import PROBE_FD
    from compliance.verify.hygiene import Reaper, kernel_environment

    job_path, log_path = tmp / "job.json", tmp / "log.txt"
    (tmp / "cache").mkdir(exist_ok=True)
    read_fd, write_fd = os.pipe()
    probe_read, probe_write = os.pipe()
    job = {**_job(dk, judging.cases, judging.exchange, launch, write_fd, tmp / "cache"), "start": start}
    job_path.write_text(json.dumps(job), encoding="utf-8")
    reaper = Reaper.start()
    supervisor = Path(__file__).with_name("supervisor.py")
    os.dup2(probe_write, PROBE_FD, inheritable=True)
    started = time.monotonic()
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(supervisor), "--preload", str(launch.probe.path), sys.executable,
                 "-m", "compliance.verify.kernel_process", str(job_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=kernel_environment(),
                pass_fds=(write_fd, PROBE_FD), start_new_session=True)
    finally:
        os.close(PROBE_FD)
        os.close(probe_write)
        os.close(write_fd)
    try:
        reader = ProgressReader(read_fd, side=(probe_read, records.feed))
        stopped, build_seconds = _collect(reader, dk, judging, time_limit_s, opts, label, started, log_path)
        launch.build_seconds = (launch.build_seconds or 0.0) + (build_seconds or 0.0)
    finally:
        _stop(proc, reader)
        reaper.kill_new([proc.pid])
        reader.drain_side()
        os.close(read_fd)
        os.close(probe_read)
    return stopped, proc.returncode


def _with_evidence(outcome: CaseOutcome, index: int, records: Any, dk: DeclaredKernel, launch: _Launch) -> CaseOutcome:
    """The case with verify-entry-not-run added for each run whose output no declared entry computed."""
    from compliance.verify.evidence import entry_problem

    if outcome.refused or any(p["rule"] in (rules.CRASH.id, rules.BUILD_FAILED.id, rules.BUILD_INVALID.id)
                              for p in outcome.problems):
        return outcome  # a call that raised computed nothing
    found: list[dict[str, Any]] = []
    # On a GPU the evidence is a launched kernel function: a plugin's entry is its host enqueue, and the
    # __global__ functions it launches are the kernel's declared helpers (both defined by its sources)
    wanted = (*dk.kernel.entry_symbols, *dk.kernel.helpers) if launch.probe.gpu else dk.kernel.entry_symbols
    for run in range(RUNS):
        why = entry_problem(records.calls.get((index, run)), wanted, launch.symbols, launch.probe.gpu)
        if why is not None and not any(p["message"] == why for p in found):
            found.append({"rule": rules.ENTRY_NOT_RUN.id, "message": why, "details": {"run": run}})
    if not found:
        return outcome
    return replace(outcome, passed=False, problems=(*outcome.problems, *found))


def _stop(proc: subprocess.Popen[bytes], reader: ProgressReader) -> None:
    """Wait briefly for the supervisor (the kernel's process has closed its pipe or run out of time), then
    kill its session."""
    try:
        proc.wait(timeout=2 if reader.closed or reader.finished else 10)
    except subprocess.TimeoutExpired:
        pass
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
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
        if kind == "build-done" and phase == "build":
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
        elif kind == "done" and judging.outcomes() and judging.first_missing() is None:
            # Every case has its verdict: stop waiting for the pipe to close (a process the kernel forked
            # may hold it open). A forged "done" before that changes nothing.
            reader.finished = True
            return None, build_seconds
    return None, build_seconds


def _case_line(label: str, index: int, total: int, c: CaseOutcome, elapsed: float) -> str:
    verdict = "pass" if c.passed else "FAIL " + ", ".join(sorted({p["rule"] for p in c.problems}))
    ratio = "" if c.worst_ratio is None else f" err/bound {c.worst_ratio:.2g}"
    return f"{label} case {index + 1}/{total} {c.case}: {verdict}{ratio} [{elapsed:.1f} s]"


def plan(dk: DeclaredKernel, seed: int, large: bool) -> list[Case]:
    """The cases of one kernel: those of its declared semantics, then one per undeclared mode its interface
    hands it, then the large table (a process that dies there has judged everything else)."""
    sem, case_seed = dk.kernel.semantics, kernel_seed(seed, dk.kernel.id)
    declared = generate_cases(sem, case_seed, large)
    probes = undeclared_mode_cases(sem, dk.kernel.build, case_seed)
    return [*(c for c in declared if not c.large), *probes, *(c for c in declared if c.large)]


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
    if not kernels:
        findings += [f for f in [undeclared_code(ctx)] if f is not None]
    for n, dk in enumerate(kernels, 1):
        label = f"[{n}/{len(kernels)} {dk.kernel.id}]"
        findings += [f for f in verify_one(ctx, dk, opts, label) if f is not None]
    return findings


def undeclared_code(ctx: CheckContext) -> Finding | None:
    """verify-no-kernel-declared when the tree ships kernel code (outside proven vendored copies) and no
    manifest declares a kernel: a verification of nothing must not pass."""
    code = [n.path for n in ctx.inventory.native if n.vendored_tree is None or n.not_upstream_of]
    if not code:
        return None
    shown = ", ".join(code[:5]) + (f" and {len(code) - 5} more" if len(code) > 5 else "")
    return ctx.finding(rules.NO_KERNEL_DECLARED.id, code[0], f"the tree ships kernel code ({shown}) but no "
                       "kernel_manifest.yaml declares a kernel: nothing was verified",
                       details={"kernel_files": code[:50]})


def _scrubbed(value: Any) -> Any:
    """``value`` with operator secrets replaced in every string (text from the kernel's process lands in
    messages and details)."""
    from compliance.verify.hygiene import scrub

    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrubbed(v) for v in value]
    return value


def _finding(ctx: CheckContext, dk: DeclaredKernel, rule: str, message: str,
             details: dict[str, Any] | None = None) -> Finding | None:
    return ctx.finding(rule, dk.manifest_path, _scrubbed(message), line=dk.kernel.line, kernel=dk.kernel.id,
                       details=_scrubbed(details) if details is not None else None, location=dk.location)


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
    narrow = coverage_finding(ctx, dk, cases)
    outcome = run_kernel(ctx, dk, spec, cases, seed, limit, opts, label)
    if outcome.unavailable:
        _say(opts, f"{label} skipped ({outcome.skipped}): not verified, {len(cases)} cases not run")
    else:
        verdict = "PASS" if outcome.passed else "FAIL"
        _say(opts, f"{label} {verdict}: {sum(c.passed for c in outcome.cases)}/{len(cases)} cases passed "
                   f"in {outcome.seconds:.1f} s; domain: {dk.kernel.semantics.domain.describe()}")
    return [narrow, *outcome_findings(ctx, dk, outcome, opts.seed, opts.allow_unverified, spec, cases)]


def coverage_finding(ctx: CheckContext, dk: DeclaredKernel, cases: list[Case]) -> Finding | None:
    """verify-coverage-narrow when the kernel's declared semantics leave out part of the rule set's minimum
    for its category (None when there is no minimum or nothing is missing)."""
    from compliance.verify.coverage import covered, missing

    minimum = ctx.ruleset.verification_coverage.get(dk.kernel.category)
    if not minimum:
        return None
    gaps = missing(dk.kernel.semantics, minimum)
    if not gaps:
        return None
    source = minimum.get("provenance", {})
    where = next((d.get("url") for d in source.get("documents", ())), None) or source.get("decision", "")
    return _finding(ctx, dk, rules.COVERAGE_NARROW.id, f"kernel {dk.kernel.id!r} declares less than rule set "
                    f"{ctx.ruleset.id} requires a verification of a {dk.kernel.category} kernel to cover: "
                    f"{', '.join(gaps)} (minimum from {where}); verified only: {covered(cases)}",
                    {"missing": gaps, "covered": covered(cases), "minimum_source": where})


def _compiled_with(dk: DeclaredKernel, spec: BuildSpec | None, base: dict[str, Any]) -> str:
    """The report's words for what was compiled besides the kernel's sources (and ``base`` gets the lists)."""
    said = ""
    if dk.kernel.build.get("kind") == "triton":  # the trust boundary: submission Python that was executed
        base["imported"] = [dk.kernel.build["module"]]
        said = f"; imported only {dk.kernel.build['module']} of the submission"
    for key, label in (("verification_shims", "verified through shim"),
                       ("build_dependencies", "built with build dependency")):
        listed = list(dk.kernel.build.get(key, ()))
        if listed and spec is not None:
            base[key] = listed
            said += "; " + "; ".join(f"{label} {path}" for path in listed)
    return said


def _modes_said(dk: DeclaredKernel, outcome: KernelOutcome) -> str:
    """What the verdict says about the modes a bag kernel does not declare: how it answered each one its
    interface hands it, or that its interface cannot express a mode."""
    sem = dk.kernel.semantics
    if sem.op != "embedding_bag" or sem.backward is not None:
        return ""
    notes = [c.note for c in outcome.cases if c.note]
    if notes:
        return f"; undeclared modes: {', '.join(notes)}"
    if not interface_passes_mode(dk.kernel.build):
        return f"; modes: the interface passes none, so only {', '.join(sem.modes or ('sum',))} can be called"
    return ""


def outcome_findings(ctx: CheckContext, dk: DeclaredKernel, outcome: KernelOutcome, seed: int,
                     allow_unverified: bool = False, spec: BuildSpec | None = None,
                     cases: list[Case] | None = None) -> list[Finding | None]:
    """Findings for one kernel: one per rule broken (listing the cases), or one that it passed."""
    from compliance.verify.coverage import covered

    domain = dk.kernel.semantics.domain.describe()
    base: dict[str, Any] = {"seed": seed, "cases_planned": outcome.planned, "cases_run": len(outcome.cases),
                            "domain": domain}
    if cases:
        base["covered"] = covered(cases)
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
                   f"(first: {first_case.description}; seed {seed}){imported}")
        out.append(_finding(ctx, dk, rule, message, {**base, "cases": listed}))
    if outcome.tree_changes:
        changes = list(outcome.tree_changes)
        out.append(_finding(ctx, dk, rules.TREE_MODIFIED.id, f"while kernel {dk.kernel.id!r} ran, files of the "
                            f"checked tree changed: {', '.join(changes[:5])}{' ...' if len(changes) > 5 else ''}",
                            {**base, "changes": changes[:50]}))
    if outcome.stopped is not None:
        rule, message, excerpt = outcome.stopped
        out.append(_finding(ctx, dk, rule, f"{message} (after {len(outcome.cases)} of {outcome.planned} "
                            f"cases){imported}", {**base, "log_excerpt": excerpt}))
    if not out:
        worst = max((c.worst_ratio or 0.0 for c in outcome.cases), default=0.0)
        out.append(_finding(ctx, dk, rules.PASSED.id, f"all {outcome.planned} cases passed, twice each; "
                            f"worst error {worst:.2g} of its bound (seed {seed}); domain: {domain}; covered: "
                            f"{base.get('covered', 'n/a')}{_modes_said(dk, outcome)}{imported}",
                            {**base, "worst_ratio": worst, "build_seconds": outcome.build_seconds,
                             "seconds": round(outcome.seconds, 2)}))
    return out
