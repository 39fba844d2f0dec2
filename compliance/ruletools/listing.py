"""``compliance rules list``: the shipped rule sets, one line each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compliance.errors import InputError
from compliance.ruleset import available_rulesets, rule_roots, shipped_rules_dir
from compliance.ruletools import JSON_SCHEMA_VERSION
from compliance.yamlsource import load_yaml


@dataclass(frozen=True)
class RuleSetInfo:
    """What ``rules list`` shows about one shipped rule file (read, not resolved)."""

    id: str
    """Rule-set id, ``<usage>/<name>``."""
    usage: str
    """training, inference or hpc (``?`` when the file does not say)."""
    round: str
    """The round (``?`` when the file does not say)."""
    status: str
    """adopted or proposal (``invalid`` when the file cannot be read)."""
    parent: str | None
    """The ``extends`` id, if any."""
    title: str
    """One line; the error when the file cannot be read."""
    path: Path
    """The file."""


def _info(ruleset_id: str, path: Path) -> RuleSetInfo:
    try:
        data = load_yaml(path).data
    except InputError as exc:
        return RuleSetInfo(ruleset_id, "?", "?", "invalid", None, exc.message, path)
    if not isinstance(data, dict):
        return RuleSetInfo(ruleset_id, "?", "?", "invalid", None, "not a mapping", path)
    return RuleSetInfo(
        id=ruleset_id, usage=str(data.get("usage", "?")), round=str(data.get("round", "?")),
        status=str(data.get("status", "?")), parent=data.get("extends"),
        title=str(data.get("title", "")), path=path)


def list_rulesets(extra_roots: list[Path] | None = None) -> tuple[RuleSetInfo, ...]:
    """Every rule set in the rule directories (shipped, ``--rules-dir``,
    ``$COMPLIANCE_RULES_PATH``), sorted by id. Files are read, not validated
    (``rules validate --shipped`` does that), so one broken file does not hide the rest."""
    roots = rule_roots(extra_roots)
    return tuple(_info(ruleset_id, path) for ruleset_id, path in available_rulesets(roots).items())


def render_text(infos: tuple[RuleSetInfo, ...]) -> str:
    """An aligned table with a header; proposals are flagged as not MLPerf policy."""
    rows = [("ID", "USAGE", "ROUND", "STATUS", "EXTENDS", "TITLE")]
    rows += [(i.id, i.usage, i.round, i.status, i.parent or "-", i.title) for i in infos]
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    lines = ["  ".join([*(r[c].ljust(widths[c]) for c in range(5)), r[5]]).rstrip() for r in rows]
    if any(i.status == "proposal" for i in infos):
        lines.append("")
        lines.append("status 'proposal': not MLPerf policy; 'adopted': encodes a working-group decision.")
    return "\n".join(lines) + "\n"


def to_json(infos: tuple[RuleSetInfo, ...], extra_roots: list[Path] | None = None) -> dict[str, Any]:
    """The JSON document of ``rules list --format json``."""
    return {"schema_version": JSON_SCHEMA_VERSION, "rules_dir": str(shipped_rules_dir()),
            "rules_path": [str(p) for p in rule_roots(extra_roots)],
            "rulesets": [{"id": i.id, "usage": i.usage, "round": i.round, "status": i.status,
                          "extends": i.parent, "title": i.title, "path": str(i.path)}
                         for i in infos]}
