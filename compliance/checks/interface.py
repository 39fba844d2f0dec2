"""The check registry: every rule id the tool can emit is declared here once.

Each check declares its id, default level, options (with defaults and types),
a one-paragraph doc, a fix hint and a passing and a failing example. The rule
set's ``checks:`` section may set a check's ``level`` and its declared options;
unknown ids and options are rejected (yamllint-style). ``compliance rules
explain`` and the README's rule reference are generated from these specs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compliance.findings import Severity

Level = str  # "error" | "warning" | "info" | "off"
LEVELS = ("error", "warning", "info", "off")


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


REGISTRY: dict[str, CheckSpec] = {}


def register(spec: CheckSpec) -> CheckSpec:
    """Add ``spec`` to the registry (ids are unique)."""
    if spec.id in REGISTRY and REGISTRY[spec.id] != spec:
        raise ValueError(f"check id {spec.id!r} registered twice")
    REGISTRY[spec.id] = spec
    return spec


def all_specs() -> list[CheckSpec]:
    """Every registered check, sorted by id (importing the check modules first)."""
    import compliance.checks.builtin  # noqa: F401  (registers the built-in checks)

    return sorted(REGISTRY.values(), key=lambda s: s.id)


def spec_for(check_id: str) -> CheckSpec | None:
    """The spec of ``check_id``, or None if no such check exists."""
    all_specs()
    return REGISTRY.get(check_id)


def config_problems(check_id: str, raw: Mapping[str, Any]) -> Iterable[tuple[tuple[str, ...], str]]:
    """Problems with one ``checks.<id>`` entry: (sub-path, message) pairs."""
    spec = spec_for(check_id)
    if spec is None:
        known = ", ".join(s.id for s in all_specs())
        yield (), f"unknown check {check_id!r}; known checks: {known}"
        return
    for key, value in raw.items():
        if key == "level":
            continue
        option = spec.option(key)
        if option is None:
            allowed = ", ".join(["level", *(o.name for o in spec.options)])
            yield (key,), f"check {check_id!r} has no option {key!r}; allowed: {allowed}"
        elif not isinstance(value, option.type) or (option.type is int and isinstance(value, bool)):
            yield (key,), f"option {key!r} of {check_id!r} must be {option.type.__name__}, got {value!r}"


def effective_config(check_id: str, raw: Mapping[str, Any] | None) -> CheckConfig:
    """``raw`` (already validated) with defaults filled in."""
    spec = spec_for(check_id)
    if spec is None:
        raise KeyError(check_id)
    raw = raw or {}
    options = {o.name: raw.get(o.name, o.default) for o in spec.options}
    return CheckConfig(level=str(raw.get("level", spec.default_level)), options=options)


CheckFunction = Callable[..., Iterable[Any]]
