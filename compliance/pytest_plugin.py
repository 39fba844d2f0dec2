"""pytest plugin: ``pytest --kernels PATH`` verifies the kernels declared under PATH.

Registered through the ``pytest11`` entry point ``compliance_kernels``. Without
``--kernels`` it does nothing and imports nothing beyond pytest. With it,
pytest collects, per declared kernel, one ``build`` item and one item per case
of the same case matrix, seeds, builds and tolerances as ``compliance verify``;
each kernel still runs in its own subprocess with its time limit, started by
the first of its items. JUnit XML comes from pytest's own ``--junitxml``.

A kernel this machine cannot run (no torch, no GPU, no NVRTC or Triton runtime) fails its
items, as ``compliance verify`` exits 4 for it: a CI job that verified nothing must not be
green. ``--kernels-allow-unverified`` turns those failures into skips that say so. The
terminal summary and the JUnit XML (testsuite properties ``kernels_verified``,
``kernels_failed``, ``kernels_not_verified``) say how many kernels were verified.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel
    from compliance.verify.cases import Case
    from compliance.verify.driver import KernelOutcome, VerifySettings

_STATE = pytest.StashKey["_KernelSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compliance kernels", "verify declared custom kernels (compliance verify)")
    group.addoption("--kernels", action="append", default=[], metavar="PATH",
                    help="Submission tree (or implementation) whose declared kernels to verify; repeatable.")
    group.addoption("--kernels-only", action="store_true",
                    help="Deselect every other test: run only the kernel items.")
    group.addoption("--kernels-id", action="append", default=[], metavar="ID",
                    help="Verify only this kernel id (repeatable).")
    group.addoption("--kernels-seed", type=int, default=None, metavar="N",
                    help="Seed for the generated inputs (default: fresh, shown in the header).")
    group.addoption("--kernels-rules", default=None, metavar="NAME|FILE", help="Rule set (as --rules).")
    group.addoption("--kernels-build-dir", default=None, metavar="DIR",
                    help="Build directory outside the tree (default: as compliance verify).")
    group.addoption("--kernels-no-large-table", action="store_true",
                    help="Skip the case with a table of more than 2^31 elements.")
    group.addoption("--kernels-allow-unverified", action="store_true",
                    help="A kernel this machine cannot run (no torch, no GPU) is skipped, saying so, "
                         "instead of failing.")


class _KernelSession:
    """What the plugin knows for one pytest session: the trees, options and finished runs."""

    def __init__(self, config: pytest.Config) -> None:
        from compliance.engine import build_context
        from compliance.verify import verify_settings
        from compliance.verify.options import VerifyOptions

        self.config = config
        self.contexts: list[CheckContext] = []
        seed = config.getoption("kernels_seed")
        self.options: dict[str, VerifySettings] = {}
        for raw in config.getoption("kernels"):
            root = Path(raw)
            ctx, _ = build_context(root, config.getoption("kernels_rules"))
            build_dir = config.getoption("kernels_build_dir")
            options = VerifyOptions(seed=seed, build_dir=Path(build_dir) if build_dir else None,
                                    kernels=tuple(config.getoption("kernels_id")),
                                    large=not config.getoption("kernels_no_large_table"), progress=None)
            opts = verify_settings(root, options)
            seed = opts.seed  # one seed for every tree of the session
            self.contexts.append(ctx)
            self.options[str(ctx.root)] = opts
        self.seed = seed
        self.allow_unverified: bool = config.getoption("kernels_allow_unverified")
        self.outcomes: dict[tuple[str, str], KernelOutcome] = {}
        self.verdicts: dict[tuple[str, str], str] = {}
        """Per kernel whose items ran: VERIFIED, FAILED or NOT_VERIFIED (a failing item overrides)."""

    def note(self, ctx: CheckContext, dk: DeclaredKernel, verdict: str) -> None:
        """Record what an item of the kernel found; a failure sticks, whatever its other items say."""
        key = _kernel_key(ctx, dk)
        if self.verdicts.get(key) != FAILED:
            self.verdicts[key] = verdict

    def counts(self) -> dict[str, int]:
        """Kernels per verdict (every verdict named, zero included)."""
        found = list(self.verdicts.values())
        return {verdict: found.count(verdict) for verdict in (VERIFIED, FAILED, NOT_VERIFIED)}

    def outcome(self, ctx: CheckContext, dk: DeclaredKernel, cases: list[Case]) -> KernelOutcome:
        """The kernel's outcome, running its subprocess the first time it is asked for."""
        from compliance.verify.build import parse_build
        from compliance.verify.driver import kernel_seed, run_kernel

        key = _kernel_key(ctx, dk)
        if key not in self.outcomes:
            opts = self.options[str(ctx.root)]
            rel_dir = dk.manifest_dir
            spec = parse_build(dk.kernel.build, language=dk.kernel.language, sources=dk.kernel.sources,
                               root=ctx.root, manifest_rel_dir=rel_dir)
            limit = opts.time_limit_s or spec.time_limit_s
            self.outcomes[key] = run_kernel(ctx, dk, spec, cases, kernel_seed(opts.seed, dk.kernel.id), limit,
                                            opts, dk.kernel.id)
        return self.outcomes[key]


VERIFIED, FAILED, NOT_VERIFIED = "verified", "failed", "not verified"


def _kernel_key(ctx: CheckContext, dk: DeclaredKernel) -> tuple[str, str]:
    return str(ctx.root), dk.manifest_path + "::" + dk.kernel.id


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("kernels"):
        config.stash[_STATE] = _KernelSession(config)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if _STATE not in config.stash:
        return None
    state = config.stash[_STATE]
    return [(f"compliance kernels: seed {state.seed} (repeat with --kernels-seed {state.seed}); "
             f"trees: {', '.join(str(c.root) for c in state.contexts)}")]


class KernelFailure(Exception):
    """A verification problem, shown without a Python traceback."""


class NotVerifiedHere(KernelFailure):
    """The kernel cannot run on this machine: a failure unless --kernels-allow-unverified."""


class ManifestFile(pytest.File):
    """A kernel manifest; its children are the kernels' build and case items."""

    ctx: CheckContext

    def collect(self) -> Iterator[pytest.Item]:
        from compliance.verify.build import BuildError, parse_build
        from compliance.verify.driver import plan

        state = self.config.stash[_STATE]
        opts = state.options[str(self.ctx.root)]
        for dk in self.ctx.kernels():
            if opts.kernels and dk.kernel.id not in opts.kernels:
                continue
            problem = None
            cases: list[Case] = []
            if not dk.kernel.build:
                problem = "declares no `build:` block (verify-build-missing)"
            else:
                rel_dir = dk.manifest_dir
                try:
                    parse_build(dk.kernel.build, language=dk.kernel.language, sources=dk.kernel.sources,
                                root=self.ctx.root, manifest_rel_dir=rel_dir)
                    cases = plan(dk, opts.seed, opts.large)
                except BuildError as exc:
                    problem = f"build block unusable (verify-build-invalid): {exc}"
            yield KernelItem.from_parent(self, name=f"{dk.kernel.id}[build]", dk=dk, cases=cases,
                                         index=None, problem=problem)
            for i, case in enumerate(cases):
                yield KernelItem.from_parent(self, name=f"{dk.kernel.id}[{case.id}]", dk=dk, cases=cases,
                                             index=i, problem=None)


class KernelItem(pytest.Item):
    """The build of a kernel (``index`` None) or one of its cases."""

    def __init__(self, *, dk: DeclaredKernel, cases: list[Case], index: int | None, problem: str | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dk, self.cases, self.index, self.problem = dk, cases, index, problem

    def runtest(self) -> None:
        parent = self.parent
        assert isinstance(parent, ManifestFile)
        state = self.config.stash[_STATE]
        try:
            self._check(state, parent.ctx)
        except NotVerifiedHere:
            state.note(parent.ctx, self.dk, NOT_VERIFIED)
            raise
        except KernelFailure:
            state.note(parent.ctx, self.dk, FAILED)
            raise
        except pytest.skip.Exception:
            state.note(parent.ctx, self.dk, NOT_VERIFIED)
            raise
        # The build item alone proves nothing: a kernel counts as verified once a case passed.
        if self.index is not None:
            state.note(parent.ctx, self.dk, VERIFIED)

    def _check(self, state: _KernelSession, ctx: CheckContext) -> None:
        if self.problem:
            raise KernelFailure(self.problem)
        from compliance.rulespecs import verify as rules
        outcome = state.outcome(ctx, self.dk, self.cases)
        if outcome.unavailable:
            if state.allow_unverified:
                pytest.skip(f"not verified here ({outcome.skipped}; --kernels-allow-unverified): "
                            f"{outcome.unavailable}")
            raise NotVerifiedHere(f"not verified here: {outcome.unavailable} [{rules.NOT_RUN.id}]\n"
                                "a run that verifies nothing is no pass; run where the kernel can run, or "
                                "pass --kernels-allow-unverified to accept it as a skip")
        if self.index is None:
            if outcome.stopped and outcome.stopped[0] in (rules.BUILD_FAILED.id, rules.BUILD_INVALID.id):
                raise KernelFailure(f"{outcome.stopped[1]} [{outcome.stopped[0]}]\n{outcome.stopped[2]}")
            return
        done = {c.case: c for c in outcome.cases}
        case = self.cases[self.index]
        if case.id not in done:
            why = outcome.stopped or (rules.CRASH.id, "the run ended before this case", "")
            raise KernelFailure(f"not run: {why[1]} [{why[0]}]\n{why[2]}")
        result = done[case.id]
        if not result.passed:
            lines = [f"{p['message']} [{p['rule']}]" + _positions(p) for p in result.problems]
            raise KernelFailure(f"{result.description}\n" + "\n".join(lines))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, KernelFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.dk.kernel.line, f"kernel {self.name}"


def _positions(problem: dict[str, Any]) -> str:
    positions = problem.get("details", {}).get("positions") or []
    return "".join(f"\n    at {p['index']}: got {p['got']}, expected {p['expected']} +- {p['bound']}"
                   for p in positions)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if _STATE not in config.stash:
        return
    if config.getoption("kernels_only"):
        config.hook.pytest_deselected(items=list(items))
        items.clear()
    state = config.stash[_STATE]
    for ctx in state.contexts:
        for rel, _manifest in ctx.manifests:
            node = ManifestFile.from_parent(session, path=ctx.root / rel)
            node.ctx = ctx
            items.extend(node.collect())


def _summary_line(state: _KernelSession) -> str:
    counts = state.counts()
    total = sum(counts.values())
    line = (f"compliance kernels: {counts[VERIFIED]} of {total} kernel(s) verified, {counts[FAILED]} failed, "
            f"{counts[NOT_VERIFIED]} not verified here")
    if counts[NOT_VERIFIED]:
        line += (" (skipped: --kernels-allow-unverified)" if state.allow_unverified
                 else " (failures; --kernels-allow-unverified accepts them as skips)")
    return line


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The counts as JUnit testsuite properties (before the junitxml plugin writes its file)."""
    config = session.config
    if _STATE not in config.stash:
        return
    try:  # pytest's own JUnit writer; its stash key is not public API, so its absence is tolerated
        from _pytest.junitxml import xml_key
    except ImportError:
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    for verdict, count in config.stash[_STATE].counts().items():
        xml.add_global_property(f"kernels_{verdict.replace(' ', '_')}", str(count))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if _STATE not in config.stash:
        return
    state = config.stash[_STATE]
    counts = state.counts()
    markup = {"red": True} if counts[FAILED] else {"yellow": True} if counts[NOT_VERIFIED] else {"green": True}
    terminalreporter.write_sep("-", _summary_line(state), **markup)
