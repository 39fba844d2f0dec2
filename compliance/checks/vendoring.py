"""Forks of catalogued projects and committed build directories.

Both are reported once per directory, so a reviewer sees one line instead of
hundreds: a fork's native files are still checked one by one by
``undeclared-kernel`` (the fork is never hidden); a build directory's
products are listed in the finding's details.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.checks.interface import CheckSpec

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

LISTED_IN_MESSAGE = 5
"""Build products named in a message (details list them all)."""

FORK = CheckSpec(
    id="implementation-fork", title="Implementation is a fork of a catalogued project",
    default_level="info",
    doc="An organization's or implementation's own root holds the signature files of an upstream "
        "project that submissions copy (compliance/catalogue/vendored.yaml: HugeCTR, "
        "maskrcnn-benchmark, ...). The implementation is then a fork of that project: it is named "
        "here so a reviewer knows where the code came from, and its native files are still checked "
        "one by one (a root is never grouped away as a vendored tree).",
    hint="Declare the implementation's custom kernels in its kernel_manifest.yaml; "
         "`compliance vendored identify DIR` names the upstream commit the fork started from.",
    passing="Acme/benchmarks/dlrm/implementations/hugectr/ holding only Acme's own code",
    failing="Acme/benchmarks/dlrm/implementations/hugectr/HugeCTR/include/... (a HugeCTR fork)",
)
BUILD_DIRECTORY = CheckSpec(
    id="build-directory-committed", title="Committed build directory", default_level="warning",
    doc="A setuptools build directory (`build/temp.*` with object files and ninja logs, "
        "`build/lib.*` with built extension modules) is part of the submission. Its files are "
        "build products, never source: they are reported once per directory, listed in the "
        "finding's details, and not counted as kernel code or as loose binaries.",
    hint="Delete the build directory from the submission; the sources beside it are what is "
         "checked and built.",
    passing="csrc/emb.cu and setup.py only",
    failing="build/temp.linux-x86_64-3.8/csrc/emb.o and build/temp.linux-x86_64-3.8/.ninja_deps",
)


def _forks(ctx: CheckContext) -> Iterator[Finding | None]:
    for fork in ctx.inventory.forks:
        where = fork.path or "."
        yield ctx.finding(FORK.id, where, f"{where} is a fork of {fork.project_name} ({fork.repository}); "
                          f"its {fork.native_files} native file(s) are checked one by one",
                          details={"project": fork.project, "repository": fork.repository,
                                   "native_files": fork.native_files}, location=fork.location)


def _build_directories(ctx: CheckContext) -> Iterator[Finding | None]:
    for build in ctx.inventory.build_directories:
        names = [p[len(build.path) + 1:] for p, _ in build.products]
        listed = ", ".join(names[:LISTED_IN_MESSAGE])
        more = f" and {len(names) - LISTED_IN_MESSAGE} more" if len(names) > LISTED_IN_MESSAGE else ""
        binaries = sum(1 for _, kind in build.products if kind != "file")
        yield ctx.finding(BUILD_DIRECTORY.id, build.path, f"committed build directory with "
                          f"{len(names)} build product(s) ({binaries} binary): {listed}{more}",
                          details={"products": [{"path": p, "kind": k} for p, k in build.products]})


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Fork and build-directory findings."""
    yield from _forks(ctx)
    yield from _build_directories(ctx)
