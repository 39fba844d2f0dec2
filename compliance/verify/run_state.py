"""One verification run's state, made before any submission code runs (verifier side, no torch).

Before the first kernel's process starts: this run's own directory, the private copy of every
declared kernel's files (``compliance.verify.staging``), a snapshot of the checked tree, and this
process made the subreaper of whatever the kernels start. Each kernel then runs from its copy;
afterwards its descendants are killed and the tree compared with the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compliance.verify.build import BuildError, parse_build
from compliance.verify.evidence import Probe, build_probe
from compliance.verify.hygiene import TreeSnapshot
from compliance.verify.staging import RunDirectory, Staged, declared_files

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel


def kernel_key(dk: DeclaredKernel) -> str:
    """A declared kernel's identity within a tree."""
    return f"{dk.manifest_path}::{dk.kernel.id}"


@dataclass
class TreeRun:
    """The state of verifying one checked tree."""

    root: Path
    directory: RunDirectory
    staged: dict[str, Staged]
    """Private copy per kernel (kernels whose build block is unusable have none)."""
    watched: tuple[str, ...]
    """Every declared file (hashed in each snapshot)."""
    snapshot: TreeSnapshot
    """The tree as it was after the last kernel (before the first: as it was given)."""
    probes: dict[bool, Probe | str] = field(default_factory=dict)

    def probe(self, gpu: bool) -> Probe | str:
        """The compiled probe for CPU or GPU kernels (or why there is none), built once per run."""
        if gpu not in self.probes:
            self.probes[gpu] = build_probe(self.directory.base, gpu)
        return self.probes[gpu]

    def tree_changes(self) -> list[str]:
        """What changed in the tree since the last call (and remember the new state)."""
        after = TreeSnapshot.take(self.root, self.watched)
        changes = self.snapshot.changes(after)
        self.snapshot = after
        return changes


@dataclass
class RunRegistry:
    """The runs of one ``VerifySettings`` (one per checked tree), created on first use."""

    build_root: Path
    trees: dict[str, TreeRun] = field(default_factory=dict)

    def for_tree(self, ctx: CheckContext) -> TreeRun:
        """The tree's run; the first call stages every declared kernel's files."""
        key = str(ctx.root)
        if key not in self.trees:
            directory = RunDirectory.create(self.build_root)
            staged: dict[str, Staged] = {}
            watched: list[str] = []
            for dk in ctx.kernels():
                if not dk.kernel.build:
                    continue
                try:
                    spec = parse_build(dk.kernel.build, language=dk.kernel.language, sources=dk.kernel.sources,
                                       root=ctx.root, manifest_rel_dir=dk.manifest_dir)
                except BuildError:
                    continue
                files = declared_files(spec, ctx.root)
                watched += files
                staged[kernel_key(dk)] = directory.stage(ctx.root, files)
            self.trees[key] = TreeRun(ctx.root, directory, staged, tuple(watched),
                                      TreeSnapshot.take(ctx.root, watched))
        return self.trees[key]
