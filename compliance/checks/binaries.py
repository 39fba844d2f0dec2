"""Binary and link checks: no binary-only kernels, no links out of the tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.checks.interface import CheckSpec
from compliance.paths import tree_relative

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding
    from compliance.inventory import BinaryFile

WITHOUT_SOURCE = CheckSpec(
    id="binary-without-source", title="Binary with no source for it", default_level="error",
    doc="A compiled artifact (ELF shared object, object file or executable, cubin, fatbin, `ar` "
        "archive, PE or Mach-O; recognised by magic bytes whatever its name) has no matching "
        "source in the tree: neither a kernel manifest lists it under `binaries`, nor does a "
        "source file or setup.py extension of the same name exist. Binary-only kernels are not "
        "allowed. The level is set by the rule set's `binary_policy.without_source`.",
    hint="Remove the binary and ship its source (declared in the manifest); the tool builds "
         "from source when verifying.",
    passing="kernels/emb.cu committed (and no emb.so)",
    failing="lib/libemb.so committed with no emb.cu anywhere in the implementation",
)
WITH_SOURCE = CheckSpec(
    id="build-product-with-source", title="Committed build product", default_level="warning",
    doc="A compiled artifact whose source is present (declared under a kernel's `binaries`, or "
        "named like a source file or setup.py extension beside it). Build products are never "
        "used by verification and make review harder. The level is set by the rule set's "
        "`binary_policy.build_product_with_source`.",
    hint="Delete the build product from the submission and build it from source at run time.",
    passing="kernels/emb.cu only",
    failing="kernels/emb.cu and kernels/emb.o",
)
SYMLINK = CheckSpec(
    id="symlink-escapes-tree", title="Symbolic link leaving the tree", default_level="error",
    doc="A symbolic link resolves (or would resolve) outside the checked tree. The tool never "
        "follows links; a submission must contain what it uses.",
    hint="Replace the link with the file it points to, or remove it.",
    passing="kernels/common.cuh -> ../include/common.cuh (inside the tree)",
    failing="kernels/emb.cu -> /home/me/src/emb.cu",
)


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
