"""Binary and link checks: no binary-only kernels, no links out of the tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

# The specs live below the checks (compliance.checks.specs); re-exported under their old names.
from compliance.checks.specs import SYMLINK as SYMLINK
from compliance.checks.specs import WITH_SOURCE as WITH_SOURCE
from compliance.checks.specs import WITHOUT_SOURCE as WITHOUT_SOURCE
from compliance.paths import tree_relative

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding
    from compliance.inventory import BinaryFile


def _stem(name: str) -> str:
    base = name.rsplit("/", 1)[-1].split(".", 1)[0]
    return base[3:] if base.startswith("lib") and len(base) > 3 else base


def _scope(path: str, ctx: CheckContext) -> tuple[str | None, ...]:
    where = ctx.inventory.locate(path)
    if where.implementation:
        return where.implementation_key
    return (os.path.dirname(path),)


def _source_names(ctx: CheckContext) -> tuple[set[tuple[tuple[str | None, ...], str]], set[str]]:
    """(scope, stem) of every source and extension, and every declared binary path."""
    names = set()
    for native in ctx.inventory.native:
        names.add((_scope(native.path, ctx), _stem(native.path)))
    for ext in ctx.inventory.setup_extensions:
        if ext.name:
            names.add((_scope(ext.setup_path, ctx), ext.name.rsplit(".", 1)[-1]))
    declared: set[str] = set()
    for item in ctx.kernels():
        declared.update(r for r in (tree_relative(item.manifest_dir, b) for b in item.kernel.binaries) if r)
    return names, declared


def _binary_finding(ctx: CheckContext, binary: BinaryFile, has_source: bool) -> Finding | None:
    if has_source:
        return ctx.finding(WITH_SOURCE.id, binary.path, f"committed build product ({binary.kind}, "
                           f"{binary.size} bytes); its source is present")
    return ctx.finding(WITHOUT_SOURCE.id, binary.path, f"{binary.kind} ({binary.size} bytes) with no "
                       "source in the tree")


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Binary and symlink findings."""
    names, declared = _source_names(ctx)
    for binary in ctx.inventory.binaries:
        has_source = binary.path in declared or (_scope(binary.path, ctx), _stem(binary.path)) in names
        yield _binary_finding(ctx, binary, has_source)
    for link in ctx.inventory.symlinks:
        if link.escapes:
            yield ctx.finding(SYMLINK.id, link.path, f"symbolic link to {link.target!r} leaves the tree")
