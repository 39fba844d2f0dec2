"""Findings: frozen, typed records that every reporter renders the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How much a finding matters; only ``error`` makes a check fail (exit 1)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Sort key: errors first."""
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True, order=False)
class Finding:
    """One thing a check found in a submission tree."""

    rule_id: str
    """The id of the check that produced it (``compliance rules explain ID``)."""
    severity: Severity
    """Error, warning or info, after the rule set's level overrides."""
    path: str
    """POSIX path relative to the checked root; ``"."`` for the tree as a whole."""
    line: int | None
    """1-based line in ``path``, where one applies."""
    message: str
    """What is wrong, in one sentence a person can act on."""
    hint: str
    """How to fix it."""
    submitter: str | None = None
    """Organization the path belongs to, where the layout tells."""
    benchmark: str | None = None
    """Benchmark the path belongs to, where the layout tells."""
    kernel: str | None = None
    """Declared kernel id the finding concerns, if any."""
    details: tuple[tuple[str, Any], ...] = field(default=())
    """Extra machine-readable facts (sorted key/value pairs), e.g. blob hashes."""

    def location(self) -> str:
        """``path:line`` or just ``path``."""
        return f"{self.path}:{self.line}" if self.line else self.path

    def sort_key(self) -> tuple[str, str, str, int, int, str]:
        """Stable order: by submitter, benchmark, path, line, severity, rule."""
        return (self.submitter or "", self.benchmark or "", self.path, self.line or 0,
                self.severity.rank, self.rule_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the shape documented in the report schema)."""
        return {
            "rule_id": self.rule_id,
            "severity": self.severity.value,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "hint": self.hint,
            "submitter": self.submitter,
            "benchmark": self.benchmark,
            "kernel": self.kernel,
            "details": dict(self.details),
        }
