"""Rendering of an ``Inventory`` (``compliance inventory``)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from compliance.inventory import Inventory
from compliance.layout import Location, organization_names
from compliance.report.safetext import one_line

INVENTORY_SCHEMA_VERSION = 1


def _where(location: Location) -> tuple[str, str]:
    return (location.submitter or "(outside any organization)", location.benchmark or "(no benchmark)")


def inventory_dict(inv: Inventory) -> dict[str, Any]:
    """JSON form: items grouped per submitter, then benchmark."""
    groups: dict[str, dict[str, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for n in inv.native:
        if n.vendored_tree is None:
            s, b = _where(n.location)
            groups[s][b]["native"].append({"path": n.path, "languages": list(n.languages), "line": n.line,
                                           "evidence": sorted({e.marker for e in n.evidence})})
    for v in inv.vendored:
        s, b = _where(v.location)
        groups[s][b]["vendored"].append({"path": v.path, "reason": v.reason, "native_files": v.native_files,
                                         "project": v.project, "repository": v.repository, "parent": v.parent,
                                         "files": v.files, "source_files": v.source_files})
    for fork in inv.forks:
        s, b = _where(fork.location)
        groups[s][b]["forks"].append({"path": fork.path, "project": fork.project, "repository": fork.repository,
                                      "native_files": fork.native_files})
    for build in inv.build_directories:
        s, b = _where(build.location)
        groups[s][b]["build_directories"].append({"path": build.path, "products": [p for p, _ in build.products]})
    for x in inv.binaries:
        s, b = _where(x.location)
        groups[s][b]["binaries"].append({"path": x.path, "kind": x.kind, "size": x.size})
    for m in inv.manifests:
        s, b = _where(inv.locate(m))
        groups[s][b]["manifests"].append({"path": m})
    for link in inv.symlinks:
        s, b = _where(link.location)
        groups[s][b]["symlinks"].append({"path": link.path, "target": link.target, "escapes": link.escapes})
    return {"schema_version": INVENTORY_SCHEMA_VERSION, "root": str(inv.root), "layout": inv.style,
            "files": inv.file_count, "organizations": [o.name for o in inv.organizations],
            "unreadable": list(inv.unreadable),
            "submitters": {s: {b: dict(items) for b, items in sorted(bs.items())} for s, bs in sorted(groups.items())}}


def inventory_text(inv: Inventory) -> str:
    """Text form."""
    data = inventory_dict(inv)
    lines = [f"inventory of {inv.root} ({inv.style} layout, {inv.file_count} files, "
             f"{len(organization_names(inv.organizations))} organization(s))"]
    for submitter, benchmarks in data["submitters"].items():
        lines.append(f"{submitter}")
        for benchmark, items in benchmarks.items():
            lines.append(f"  {benchmark}")
            for item in items.get("manifests", []):
                lines.append(f"    manifest  {item['path']}")
            for item in items.get("native", []):
                lines.append(f"    native    {item['path']}:{item['line'] or 1} ({', '.join(item['languages'])})")
            for item in items.get("forks", []):
                lines.append(f"    fork      {item['path'] or '.'}/ of {item['project']} ({item['repository']}); "
                             f"its {item['native_files']} native files are listed one by one")
            for item in items.get("vendored", []):
                nested = "  " if item["parent"] else ""
                upstream = f"{item['project']} {item['repository']}; " if item["project"] else ""
                lines.append(f"    vendored  {nested}{item['path']}/ ({upstream}{item['native_files']} native files; "
                             f"{item['reason']})")
            for item in items.get("build_directories", []):
                lines.append(f"    build     {item['path']}/ ({len(item['products'])} build products)")
            for item in items.get("binaries", []):
                lines.append(f"    binary    {item['path']} ({item['kind']}, {item['size']} bytes)")
            for item in items.get("symlinks", []):
                escape = " LEAVES THE TREE" if item["escapes"] else ""
                lines.append(f"    symlink   {item['path']} -> {item['target']}{escape}")
    for path in inv.unreadable:
        lines.append(f"unreadable: {path}")
    return "\n".join(one_line(line) for line in lines) + "\n"  # names from the tree: escaped
