"""What a check looks like: ``CheckSpec`` (one rule id) and its configuration (``CheckConfig``).

Each check declares its id, default level, options (with defaults and types),
a one-paragraph doc, a fix hint and a passing and a failing example. The rule
set's ``checks:`` section may set a check's ``level`` and its declared options;
unknown ids and options are rejected (yamllint-style). ``compliance.rulespecs.registry``
lists every spec; ``compliance rules explain`` and docs/rule-reference.md are
generated from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compliance.findings import Severity

Level = str  # "error" | "warning" | "info" | "off"


@dataclass(frozen=True)
class OptionSpec:
    """One option a check accepts in a rule set's ``checks:`` section."""

    name: str
    """Key under ``checks.<id>``."""
    type: type
    """Python type the value must have (``bool``, ``int``, ``str``, ``list``)."""
    default: Any
    """Value used when the rule set does not set it."""
    doc: str
    """What it changes."""


@dataclass(frozen=True)
class CheckSpec:
    """Documentation and configuration surface of one rule id."""

    id: str
    """Stable rule id printed with every finding, e.g. ``undeclared-kernel``."""
    title: str
    """A few words."""
    default_level: Level
    """Level when the rule set does not override it."""
    doc: str
    """One paragraph: what it looks for and why."""
    hint: str
    """How to fix a finding."""
    passing: str
    """A short example that passes."""
    failing: str
    """A short example that fails."""
    stage: str = "static"
    """``static`` (plain check), ``upstream`` (--upstream) or ``verify`` (--verify)."""
    options: tuple[OptionSpec, ...] = field(default=())
    """Options beyond ``level``."""

    def option(self, name: str) -> OptionSpec | None:
        """The declared option ``name``, if any."""
        return next((o for o in self.options if o.name == name), None)


@dataclass(frozen=True)
class CheckConfig:
    """A check's effective configuration in one rule set."""

    level: Level
    """error, warning, info or off."""
    options: Mapping[str, Any]
    """Every declared option, defaults filled in."""

    @property
    def severity(self) -> Severity | None:
        """The finding severity, or None when the check is off."""
        return None if self.level == "off" else Severity(self.level)
