"""Forks of catalogued projects: reported once per fork, so a reviewer sees where the code came
from; a fork's native files are still checked one by one by ``undeclared-kernel`` (the fork is
never hidden). Committed build products are the binary check's (``compliance.checks.binaries``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.checks.interface import CheckSpec

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding


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
def _forks(ctx: CheckContext) -> Iterator[Finding | None]:
    for fork in ctx.inventory.forks:
        where = fork.path or "."
        yield ctx.finding(FORK.id, where, f"{where} is a fork of {fork.project_name} ({fork.repository}); "
                          f"its {fork.native_files} native file(s) are checked one by one",
                          details={"project": fork.project, "repository": fork.repository,
                                   "native_files": fork.native_files}, location=fork.location)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Fork findings."""
    yield from _forks(ctx)
