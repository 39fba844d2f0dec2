"""Rule sets: loading, schema validation, ``extends`` resolution, typed model.

Override semantics of ``extends`` (documented in README "Rule format"):

* ``id``, ``usage``, ``round``, ``status``, ``title``, ``note``, ``provenance``
  and ``extends`` belong to each file and are never inherited.
* Other scalars and lists (``layout``, ``divisions``, ``benchmarks``) and the
  ``benchmark_aliases`` mapping replace the parent's value when the child sets
  them (so a round states its aliases whole, and can drop one).
* ``extends`` names an id (``<usage>/<name>``, never a path), looked up beside
  the file and in the rule roots only (``rule_roots``).
* Mappings (``binary_policy``, ``upstream_policy``, ``vendored``, ``verification_coverage``) merge key by
  key; ``checks`` merges per check id and then per option. The child wins.
* ``allowlist`` merges by entry id: a child entry with an inherited id replaces
  that entry whole; new ids are appended; ``remove_allowlist`` drops inherited
  entries (naming an id that is not inherited is an error).
* A cycle or a missing parent is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compliance.errors import InputError, InputErrors
from compliance.rulespecs.interface import CheckConfig
from compliance.rulespecs.registry import config_problems, effective_config
from compliance.schema_validation import problems_as_errors, validate_document
from compliance.yamlsource import YamlDocument, load_yaml

DEFAULT_RULESET = "training/v0.7"
NEVER_INHERITED = frozenset({"id", "usage", "round", "status", "title", "note", "provenance",
                             "extends", "schema_version", "$schema", "remove_allowlist"})
MERGED_MAPPINGS = ("binary_policy", "upstream_policy", "vendored", "verification_coverage")
REQUIRED_AFTER_RESOLUTION = ("layout", "benchmarks")


@dataclass(frozen=True)
class Provenance:
    """Where a decision comes from."""

    decision: str
    """Link to the decision (issue, minutes), or ``none`` for a proposal."""
    date: str
    """ISO date of the decision."""
    round: str | None = None
    """Round it applies to."""
    body: str | None = None
    """Who decided (e.g. ``Training SWG``)."""
    note: str | None = None
    """E.g. "one-time decision, not a rules change"."""
    documents: tuple[Mapping[str, str], ...] | None = None
    """Documents encoded (``url``, ``what``, ``commit`` when recorded)."""

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Provenance:
        documents = data.get("documents")
        return cls(decision=data["decision"], date=data["date"], round=data.get("round"),
                   body=data.get("body"), note=data.get("note"),
                   documents=None if documents is None else tuple(dict(d) for d in documents))


@dataclass(frozen=True)
class Tolerance:
    """Error-bound parameters for one weight dtype."""

    unit_roundoff_multiplier: float | None = None
    """Multiplier on the dtype's unit roundoff times the bag length."""
    absolute_floor: float | None = None
    """Absolute error always accepted (for sums that cancel to ~0)."""


@dataclass(frozen=True)
class VerificationRequirement:
    """Numerical verification an allowlist entry demands."""

    reference_ops: tuple[str, ...]
    """Reference ops a kernel of this category may claim (``embedding_bag``, ``embedding``)."""
    tolerance: Mapping[str, Tolerance] = field(default_factory=dict)
    """Per weight dtype; missing dtypes use the documented defaults."""


@dataclass(frozen=True)
class AllowlistEntry:
    """One category of custom kernels a round admits."""

    id: str
    """Category id that manifests name in ``category``."""
    title: str
    """What the category is."""
    benchmarks: tuple[str, ...]
    """Benchmarks it covers."""
    divisions: tuple[str, ...]
    """Divisions it covers; empty means all."""
    languages: tuple[str, ...]
    """Kernel languages admitted: cuda, cpp, triton, ptx."""
    requires_source: bool
    """Source must ship with the submission."""
    requires_upstream: bool
    """An upstream link (repository + commit + path) is required."""
    verification: VerificationRequirement | None
    """Numerical verification demanded, if any."""
    provenance: Provenance
    """The decision behind the entry."""

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> AllowlistEntry:
        requires = data["requires"]
        verification = requires.get("verification")
        return cls(
            id=data["id"], title=data["title"], benchmarks=tuple(data["benchmarks"]),
            divisions=tuple(data.get("divisions", ())), languages=tuple(data["languages"]),
            requires_source=bool(requires["source"]),
            requires_upstream=bool(requires.get("upstream", False)),
            verification=None if verification is None else VerificationRequirement(
                reference_ops=tuple(verification["reference_ops"]),
                tolerance={k: Tolerance(**v) for k, v in verification.get("tolerance", {}).items()}),
            provenance=Provenance.from_data(data["provenance"]),
        )

    def covers(self, benchmark: str | None, division: str | None) -> bool:
        """True when this entry admits kernels in ``benchmark`` (and ``division``)."""
        if benchmark not in self.benchmarks:
            return False
        return not self.divisions or division is None or division in self.divisions


@dataclass(frozen=True)
class BinaryPolicy:
    """Levels for committed binaries."""

    without_source: str = "error"
    """A binary with no source for it."""
    build_product_with_source: str = "warning"
    """A build product whose source is present."""


@dataclass(frozen=True)
class UpstreamPolicy:
    """What counts as an acceptable upstream link."""

    allowed_hosts: tuple[str, ...] = ("github.com", "gitlab.com")
    """Hosts an upstream repository URL may point at."""
    allowed_schemes: tuple[str, ...] = ("https",)
    """URL schemes an upstream repository URL may use (``ssh`` for ``git@host:path``)."""
    require_commit: bool = True
    """A full 40-hex commit is required; a branch is not a pin."""
    allow_local: bool = False
    """Accept file:// URLs and local paths (mirrors, tests)."""


@dataclass(frozen=True)
class VendoredPolicy:
    """How vendored third-party trees are recognised."""

    min_native_files: int = 50
    """A directory with a licence file and at least this many C/C++/CUDA source files (counted by
    file name, kernel markers or not) is a vendored tree, unless it is an organization's or an
    implementation's own root."""
    markers: tuple[str, ...] = ("third_party", "3rdparty", "thirdparty", "vendor", "external",
                                "extern", "deps", "submodules")
    """Directory names that mark vendored code regardless of size."""


@dataclass(frozen=True)
class ModelNameRules:
    """How the round's MLCommons submission checker resolves a model name (``get_mlperf_model``):
    after the official names and the round's model mapping (``benchmark_aliases``), the
    submitter's ``open/<org>/model_mapping.json`` (open division) and substring guesses."""

    source: str
    """The checker file at the commit the rules were read from."""
    submitter_mapping: bool
    """The open division's ``<org>/model_mapping.json`` maps names to official models."""
    guesses: tuple[tuple[tuple[str, ...], str], ...]
    """(substrings, model) in the checker's order: the first whose substring is in the name wins."""

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> ModelNameRules | None:
        """From a rule set's ``model_name_rules`` (None when absent)."""
        if not data:
            return None
        return cls(data["source"], bool(data["submitter_mapping"]),
                   tuple((tuple(g["contains"]), g["model"]) for g in data.get("guesses", ())))

    def guess(self, name: str) -> str | None:
        """The model the checker's substring guesses give ``name``, if any."""
        return next((model for parts, model in self.guesses if any(p in name for p in parts)), None)


@dataclass(frozen=True)
class RuleSet:
    """A resolved rule set (``extends`` applied), ready for the checker."""

    id: str
    """E.g. ``training/v0.7``."""
    usage: str
    """training, inference or hpc."""
    round: str
    """The round."""
    status: str
    """``adopted`` (a working-group decision) or ``proposal`` (not MLPerf policy)."""
    title: str
    """One line."""
    note: str | None
    """Free text shown with the rule set."""
    provenance: Provenance
    """The decision behind the whole file."""
    extends: str | None
    """Parent id, if any."""
    layout: str
    """training or inference."""
    divisions: tuple[str, ...]
    """Divisions of the round (inference layout)."""
    benchmarks: tuple[str, ...]
    """Benchmarks of the round."""
    benchmark_aliases: Mapping[str, str]
    """Directory name -> official benchmark name it stands for."""
    model_name_rules: ModelNameRules | None
    """Inference: the submission checker's further name resolution (None: official names and
    aliases only)."""
    allowlist: tuple[AllowlistEntry, ...]
    """Custom-kernel categories in force."""
    binary_policy: BinaryPolicy
    """Levels for binaries."""
    upstream_policy: UpstreamPolicy
    """Upstream link policy."""
    vendored: VendoredPolicy
    """Vendored-tree recognition."""
    checks: Mapping[str, Mapping[str, Any]]
    """Raw ``checks:`` configuration after merging (validated)."""
    source: Path
    """The file this rule set was loaded from."""
    chain: tuple[Path, ...]
    """Files from this one up to the root ancestor."""
    origins: Mapping[str, str]
    """Dotted key -> id of the rule set that supplied it (for ``rules show --origin``)."""
    data: Mapping[str, Any]
    """The merged document (what ``rules show`` prints)."""
    verification_coverage: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Category -> the least a verification must cover (schema ``coverage_minimum``; read by
    ``compliance.verify.coverage``)."""

    def entry(self, category: str) -> AllowlistEntry | None:
        """The allowlist entry with id ``category``, if in force."""
        return next((e for e in self.allowlist if e.id == category), None)

    def official_benchmark(self, name: str) -> str | None:
        """The benchmark a directory ``name`` stands for: itself, the target of an alias,
        or (inference) the accuracy family ``bert`` of ``bert-99``/``bert-99.9``;
        None when it is no benchmark of the round."""
        if name in self.benchmarks:
            return name
        if name in self.benchmark_aliases:
            return self.benchmark_aliases[name]
        if self.layout == "inference":
            family = [b for b in self.benchmarks if b.startswith(f"{name}-99")]
            if family:
                return family[0]
        return None

    def check_config(self, check_id: str) -> CheckConfig:
        """Effective level and options of a check in this rule set."""
        return effective_config(check_id, self.checks.get(check_id))

    def summary(self) -> dict[str, Any]:
        """Identity and provenance, as embedded in reports."""
        return {"id": self.id, "round": self.round, "usage": self.usage, "status": self.status,
                "title": self.title, "source": str(self.source),
                "provenance": _provenance_dict(self.provenance)}


def _provenance_dict(p: Provenance) -> dict[str, Any]:
    return {k: v for k, v in vars(p).items() if v is not None}


# --------------------------------------------------------------------------- locating
#
# Who may pick a rule set matters: the submitter writes the tree, so a tree (a
# manifest's ``ruleset:``, a rule file's ``extends:``) may only name a rule-set
# *id*, and ids resolve only among the rule roots the operator controls: the
# directories given with ``--rules-dir``, those in ``$COMPLIANCE_RULES_PATH``
# and the rule sets shipped inside the package. Only the operator's ``--rules``
# may name a file by path.

RULES_PATH_ENV = "COMPLIANCE_RULES_PATH"
"""Environment variable: extra rule directories, separated by ``os.pathsep``."""
_ID_PATTERN = re.compile(r"[a-z][a-z0-9_-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*")


def is_ruleset_id(text: str) -> bool:
    """True when ``text`` is a well-formed id: ``<usage>/<name>``, one slash, no ``..``,
    not a file name (``.yaml``/``.yml``)."""
    return (len(text) <= 200 and _ID_PATTERN.fullmatch(text) is not None and ".." not in text
            and not text.endswith((".yaml", ".yml")))


def shipped_rules_dir() -> Path:
    """The shipped rule sets: ``compliance/rulesets`` in an installed wheel (setup.py copies
    them there), else ``rules/`` beside the package (a source checkout or an editable install)."""
    package = Path(__file__).resolve().parent
    packaged = package / "rulesets"
    # A checkout that predates the move may keep an emptied compliance/rulesets/ (directories git
    # leaves behind): only a packaged copy that holds rule files counts.
    return packaged if any(packaged.glob("*/*.yaml")) else package.parent / "rules"


def env_rules_dirs() -> tuple[Path, ...]:
    """Directories named in ``$COMPLIANCE_RULES_PATH`` (empty entries ignored)."""
    raw = os.environ.get(RULES_PATH_ENV, "")
    return tuple(Path(p) for p in raw.split(os.pathsep) if p)


def refuse_rule_roots_inside(tree: Path, rules_dirs: tuple[Path, ...] = ()) -> None:
    """Raise ``InputError`` when a ``--rules-dir`` or ``$COMPLIANCE_RULES_PATH`` directory lies in
    ``tree`` (or is it): the submitter writes that tree, so a rule set there could shadow a shipped
    id (``training/v0.7``) with lenient levels. Refused rather than ignored, so the operator learns
    that the rules they meant are not the ones that would run."""
    checked = tree.resolve()
    for directory in (*rules_dirs, *env_rules_dirs()):
        resolved = directory.resolve()
        if resolved == checked or checked in resolved.parents:
            raise InputError(f"the rule directory {str(directory)!r} is inside the checked tree; a rule set "
                             "there could shadow a shipped one. Keep rule directories outside the tree",
                             directory)


def rule_roots(extra: list[Path] | None = None) -> list[Path]:
    """Where ids are looked up, first match wins: ``extra`` (the operator's ``--rules-dir``
    directories, passed down by the caller; no module state), the environment variable's
    directories, then the shipped rule sets."""
    return [*(extra or []), *env_rules_dirs(), shipped_rules_dir()]


def available_rulesets(roots: list[Path] | None = None) -> dict[str, Path]:
    """Id -> file of every rule set in the rule roots (an earlier root shadows a later one)."""
    found: dict[str, Path] = {}
    for root in roots if roots is not None else rule_roots():
        if not root.is_dir():
            continue
        for path in sorted(root.glob("*/*.yaml")):
            ruleset_id = f"{path.parent.name}/{path.stem}"
            if is_ruleset_id(ruleset_id) and path.is_file():
                found.setdefault(ruleset_id, path)
    return dict(sorted(found.items()))


def list_shipped(extra_roots: list[Path] | None = None) -> list[str]:
    """Ids of every rule set the rule roots hold (shipped and operator-added), sorted."""
    return list(available_rulesets(rule_roots(extra_roots)))


def _looks_like_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or Path(name).is_file()


def _locate(name: str, roots: list[Path]) -> Path | None:
    """The file of id ``name`` in ``roots``; None for a malformed id or none found."""
    if not is_ruleset_id(name):
        return None
    for root in roots:
        candidate = root / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    return None


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut short (it may come from a hostile tree)."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def named_ruleset_path(name: object, where: str, line: int | None = None,
                       extra_roots: list[Path] | None = None) -> Path:
    """The file of the rule-set id a submission's file ``where`` names (a manifest's
    ``ruleset:``). Only ids resolve, only among the rule roots; anything else is
    an ``InputError`` naming the id and ``where:line``, and no file is opened."""
    if not isinstance(name, str) or not is_ruleset_id(name):
        raise InputError(
            f"names rule set {_shown(str(name))}, which is not a rule-set id "
            "(<usage>/<name>, e.g. training/v0.7); a submission can only name a shipped or "
            "operator-added rule set, never a file (the operator may pass --rules FILE)",
            where, line)
    found = _locate(name, rule_roots(extra_roots))
    if found is None:
        raise InputError(
            f"names rule set {_shown(name)}, which no rule directory holds (known: "
            f"{', '.join(list_shipped(extra_roots)) or 'none'}; an operator adds directories with "
            f"--rules-dir or ${RULES_PATH_ENV})", where, line)
    return found


def _root_of(path: Path, ruleset_id: str) -> Path | None:
    """The rules root ``path`` sits in, if its place matches ``ruleset_id``."""
    parts = Path(ruleset_id).parts
    for candidate in (path, path.resolve()):  # as given first, so reported paths stay relative
        if len(candidate.parts) > len(parts) and \
                candidate.with_suffix("").parts[-len(parts):] == parts:
            return candidate.parents[len(parts) - 1]
    return None


# --------------------------------------------------------------------------- loading
#
# Loading collects every problem it can find before giving up, so that
# ``compliance rules validate`` reports all of them at once: YAML errors stop a
# file; schema errors are all reported (semantics of a malformed document are
# not checked); otherwise every semantic problem of the file, of its
# ``extends`` chain and of the resolved rule set is collected.


@dataclass(frozen=True)
class _EntrySource:
    """Where an allowlist entry of a resolved rule set was written."""

    document: YamlDocument
    """The rule file that defines the entry."""
    index: int
    """Position in that file's ``allowlist``."""


@dataclass(frozen=True)
class _Resolution:
    """The outcome of resolving one file and its ``extends`` chain."""

    merged: dict[str, Any]
    """The merged document ({} when resolution failed)."""
    chain: list[Path]
    """Files from this one up to the root ancestor."""
    origins: dict[str, str]
    """Dotted key -> id of the rule set that supplied it."""
    entries: dict[str, _EntrySource]
    """Allowlist entry id -> where it is defined."""
    errors: list[InputError]
    """Every problem found; non-empty means the file does not load."""
    document: YamlDocument | None = None
    """The parsed file, when it parsed."""


def _failed(errors: list[InputError], document: YamlDocument | None = None) -> _Resolution:
    return _Resolution({}, [], {}, {}, errors, document)


_PARSED: dict[tuple[str, int, int], tuple[YamlDocument | None, list[InputError]]] = {}
"""Parsed rule files by (path, mtime, size): detecting a round loads every rule set, and
their ``extends`` chains share files. Documents are never modified after parsing."""


def _parse_and_validate(path: Path) -> tuple[YamlDocument | None, list[InputError]]:
    """Parse ``path`` and validate it against the schema; all problems, not the first."""
    try:
        stat = path.stat()
    except OSError:
        return _parse_and_validate_uncached(path)
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _PARSED:
        _PARSED[key] = _parse_and_validate_uncached(path)
    document, errors = _PARSED[key]
    return document, list(errors)


def _parse_and_validate_uncached(path: Path) -> tuple[YamlDocument | None, list[InputError]]:
    try:
        document = load_yaml(path)
    except InputErrors as exc:
        return None, list(exc.errors)
    except InputError as exc:
        return None, [exc]
    problems = validate_document(document, "ruleset")
    return document, problems_as_errors(document, problems)


def _own_semantics(document: YamlDocument) -> list[InputError]:
    """Errors a schema cannot express, within one file."""
    errors: list[InputError] = []
    data = document.data
    seen: dict[str, int] = {}
    for index, entry in enumerate(data.get("allowlist", [])):
        if entry["id"] in seen:
            errors.append(document.error(
                f"duplicate allowlist id {entry['id']!r} (also entry {seen[entry['id']]})",
                ("allowlist", index, "id")))
        seen.setdefault(entry["id"], index)
    for check_id, raw in data.get("checks", {}).items():
        for sub, message in config_problems(check_id, raw):
            errors.append(document.error(message, ("checks", check_id, *sub)))
    errors.extend(_provenance_problems(document))
    return errors


def _is_link(decision: str) -> bool:
    return decision.startswith(("https://", "http://"))


def _provenance_problems(document: YamlDocument) -> list[InputError]:
    """An adopted rule set must link every decision it encodes."""
    data = document.data
    if data["status"] != "adopted":
        return []
    errors: list[InputError] = []
    if not _is_link(data["provenance"]["decision"]):
        errors.append(document.error(
            f"adopted rule set without a decision link: provenance.decision is "
            f"{data['provenance']['decision']!r}; link the issue or minutes that adopted it "
            "(or mark the file status: proposal)", ("provenance", "decision")))
    for index, entry in enumerate(data.get("allowlist", [])):
        decision = entry["provenance"]["decision"]
        if not _is_link(decision):
            errors.append(document.error(
                f"allowlist entry {entry['id']!r} has no provenance: decision is {decision!r}, "
                "not a link to the decision that admitted it (adopted rule sets need one)",
                ("allowlist", index, "provenance", "decision")))
    return errors


def _merge(parent: dict[str, Any], child: YamlDocument,
           origins: dict[str, str]) -> tuple[dict[str, Any], list[InputError]]:
    """Apply ``child`` over the resolved ``parent`` (see module doc)."""
    data = child.data
    own_id = data["id"]
    merged = {k: v for k, v in parent.items() if k not in NEVER_INHERITED}
    for key, value in data.items():
        if key in MERGED_MAPPINGS:
            merged[key] = {**parent.get(key, {}), **value}
            origins.update({f"{key}.{k}": own_id for k in value})
        elif key == "checks":
            checks = {cid: dict(cfg) for cid, cfg in parent.get("checks", {}).items()}
            for cid, cfg in value.items():
                checks[cid] = {**checks.get(cid, {}), **cfg}
                origins.update({f"checks.{cid}.{k}": own_id for k in cfg})
            merged["checks"] = checks
        elif key == "allowlist":
            merged["allowlist"] = _merge_allowlist(parent.get("allowlist", []), value)
            origins.update({f"allowlist.{e['id']}": own_id for e in value})
        elif key != "remove_allowlist":
            merged[key] = value
            origins[key] = own_id
    errors = _apply_removals(merged, parent, child, origins)
    return merged, errors


def _apply_removals(merged: dict[str, Any], parent: dict[str, Any], child: YamlDocument,
                    origins: dict[str, str]) -> list[InputError]:
    """Drop the entries ``remove_allowlist`` names; an id the parent lacks is an error."""
    errors: list[InputError] = []
    removed = child.data.get("remove_allowlist", [])
    inherited = {e["id"] for e in parent.get("allowlist", [])}
    for index, entry_id in enumerate(removed):
        if entry_id not in inherited:
            errors.append(child.error(
                f"remove_allowlist names {entry_id!r}, which the parent does not define "
                f"(inherited: {', '.join(sorted(inherited)) or 'none'})", ("remove_allowlist", index)))
            continue
        origins[f"allowlist.{entry_id}"] = f"{child.data['id']} (removed)"
    merged["allowlist"] = [e for e in merged.get("allowlist", []) if e["id"] not in removed]
    return errors


def _merge_allowlist(parent: list[dict[str, Any]], child: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {e["id"]: e for e in parent}
    order = [e["id"] for e in parent]
    for entry in child:
        if entry["id"] not in by_id:
            order.append(entry["id"])
        by_id[entry["id"]] = entry
    return [by_id[i] for i in order]


def _resolve_parent(document: YamlDocument, roots: list[Path],
                    stack: tuple[str, ...]) -> _Resolution:
    """The resolved parent of ``document`` ({} when it extends nothing)."""
    parent_id = document.data.get("extends")
    if parent_id is None:
        return _Resolution({}, [], {}, {}, [])
    own_id = document.data["id"]
    if not is_ruleset_id(parent_id):
        return _failed([document.error(
            f"extends {_shown(parent_id)}, which is not a rule-set id (<usage>/<name>); a rule "
            "file can only extend a rule set in the rule directories, never a path", ("extends",))])
    own_root = _root_of(document.path, own_id)
    search = ([own_root] if own_root else []) + roots
    parent_path = _locate(parent_id, search)
    if parent_path is None:
        return _failed([document.error(
            f"extends {parent_id!r}, but no such rule set exists "
            f"(looked in: {', '.join(str(r) for r in search)})", ("extends",))])
    parent = _resolve(parent_path, roots, (*stack, own_id))
    if parent.errors:
        return parent
    if document.data["status"] == "adopted" and parent.merged.get("status") == "proposal":
        return _failed([document.error(
            f"adopted rule set extends {parent_id!r}, which is a proposal (not MLPerf policy); "
            "an adopted round may only build on adopted rule sets", ("extends",))])
    return parent


def _resolve(path: Path, roots: list[Path], stack: tuple[str, ...]) -> _Resolution:
    document, errors = _parse_and_validate(path)
    if document is None or errors:
        return _failed(errors, document)
    own_id = document.data["id"]
    if own_id in stack:
        cycle = " -> ".join([*stack, own_id])
        return _failed([document.error(f"extends cycle: {cycle}", ("extends",))], document)
    errors = _own_semantics(document)
    parent = _resolve_parent(document, roots, stack)
    if parent.errors:
        return _failed(errors + parent.errors, document)
    origins = parent.origins
    merged, merge_errors = _merge(parent.merged, document, origins)
    entries = {**parent.entries, **{e["id"]: _EntrySource(document, i)
                                    for i, e in enumerate(document.data.get("allowlist", []))}}
    return _Resolution(merged, [path, *parent.chain], origins, entries, errors + merge_errors,
                       document)


def same_file(reported: str | Path | None, path: Path) -> bool:
    """True when an error's ``reported`` path names ``path`` (relative or absolute)."""
    return reported is not None and Path(reported).resolve() == path.resolve()


def _with_pointer(document: YamlDocument, errors: list[InputError]) -> list[InputError]:
    """``errors``, plus a pointer from ``extends`` when some lie in an ancestor's file."""
    elsewhere = [e for e in errors if e.path is not None and not same_file(e.path, document.path)]
    if not elsewhere or "extends" not in document.data:
        return list(errors)
    pointer = document.error(
        f"extends {document.data['extends']!r}, which does not load ({len(elsewhere)} problem(s) "
        "in its chain, listed with their own file)", ("extends",))
    return [pointer, *errors]


def _resolved_problems(resolution: _Resolution) -> list[InputError]:
    """Errors that only show once ``extends`` is applied."""
    merged, document = resolution.merged, resolution.document
    assert document is not None
    missing = [k for k in REQUIRED_AFTER_RESOLUTION if k not in merged]
    if missing:
        return [document.error(f"rule set defines no {', '.join(missing)} (neither itself nor "
                               "through extends)")]
    benchmarks = set(merged["benchmarks"])
    divisions = set(merged.get("divisions", []))
    errors = _alias_problems(document, merged)
    for entry in merged.get("allowlist", []):
        source = resolution.entries[entry["id"]]
        unknown = [b for b in entry["benchmarks"] if b not in benchmarks]
        if unknown:
            errors.append(_entry_error(
                document, source, "benchmarks",
                f"covers unknown benchmark(s) {', '.join(unknown)}; the benchmarks of "
                f"{merged['id']} are: {', '.join(sorted(benchmarks))}"))
        bad_div = [d for d in entry.get("divisions", []) if divisions and d not in divisions]
        if bad_div:
            errors.append(_entry_error(
                document, source, "divisions", f"names unknown division(s) {', '.join(bad_div)}; "
                f"the divisions of {merged['id']} are: {', '.join(sorted(divisions))}"))
    return errors


def _alias_problems(document: YamlDocument, merged: dict[str, Any]) -> list[InputError]:
    """An alias must stand for a benchmark of the round and must not shadow one."""
    benchmarks = set(merged["benchmarks"])
    where = ("benchmark_aliases",) if "benchmark_aliases" in document.data else ("benchmarks",)
    errors: list[InputError] = []
    for alias, target in merged.get("benchmark_aliases", {}).items():
        if target not in benchmarks:
            errors.append(document.error(
                f"benchmark alias {alias!r} stands for {target!r}, which is not a benchmark of "
                f"{merged['id']} ({', '.join(sorted(benchmarks))})", where))
        if alias in benchmarks:
            errors.append(document.error(
                f"benchmark alias {alias!r} is itself a benchmark of {merged['id']}", where))
    return errors


def _entry_error(document: YamlDocument, source: _EntrySource, key: str, what: str) -> InputError:
    """An error about an allowlist entry, located where the fix belongs.

    An entry of this file is pointed at directly; an inherited one at this
    file's ``key`` (the round changed it), naming where the entry is defined.
    """
    entry_id = source.document.data["allowlist"][source.index]["id"]
    if source.document is document:
        return document.error(f"allowlist entry {entry_id!r} {what}",
                              ("allowlist", source.index, key))
    defined = source.document.error("", ("allowlist", source.index)).location()
    return document.error(
        f"inherited allowlist entry {entry_id!r} (defined at {defined}) {what}; change {key} "
        f"or drop the entry with remove_allowlist", (key,))


def _resolve_top(path: Path, roots: list[Path], expected_id: str | None) -> _Resolution:
    """Resolve the file the user named, collecting every problem."""
    resolution = _resolve(path, roots, ())
    document = resolution.document
    if document is None:
        return resolution  # did not parse
    errors = _with_pointer(document, resolution.errors)
    if resolution.merged:  # the extends chain resolved: check the result too
        if expected_id is not None and document.data["id"] != expected_id:
            errors.append(document.error(
                f"file declares id {document.data['id']!r} but is stored as {expected_id!r}",
                ("id",)))
        errors.extend(_resolved_problems(resolution))
    return replace(resolution, errors=errors)


def _build(merged: dict[str, Any], chain: list[Path], origins: dict[str, str]) -> RuleSet:
    return RuleSet(
        id=merged["id"], usage=merged["usage"], round=merged["round"], status=merged["status"],
        title=merged["title"], note=merged.get("note"),
        provenance=Provenance.from_data(merged["provenance"]), extends=merged.get("extends"),
        layout=merged["layout"], divisions=tuple(merged.get("divisions", ())),
        benchmarks=tuple(merged["benchmarks"]),
        benchmark_aliases=dict(merged.get("benchmark_aliases", {})),
        model_name_rules=ModelNameRules.from_data(merged.get("model_name_rules")),
        allowlist=tuple(AllowlistEntry.from_data(e) for e in merged.get("allowlist", [])),
        binary_policy=BinaryPolicy(**merged.get("binary_policy", {})),
        upstream_policy=_upstream_policy(merged.get("upstream_policy", {})),
        vendored=_vendored(merged.get("vendored", {})),
        checks=merged.get("checks", {}), source=chain[0], chain=tuple(chain),
        origins=dict(origins), data=merged, verification_coverage=dict(merged.get("verification_coverage", {})),
    )


def _upstream_policy(raw: Mapping[str, Any]) -> UpstreamPolicy:
    kwargs = dict(raw)
    for key in ("allowed_hosts", "allowed_schemes"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    return UpstreamPolicy(**kwargs)


def _vendored(raw: Mapping[str, Any]) -> VendoredPolicy:
    kwargs = dict(raw)
    if "markers" in kwargs:
        kwargs["markers"] = tuple(kwargs["markers"])
    return VendoredPolicy(**kwargs)


def _find(name_or_path: str | Path, roots: list[Path]) -> tuple[Path, str | None]:
    """The file for an operator's ``--rules`` (an id, else a path), and the id it must
    declare (None for paths)."""
    text = str(name_or_path)
    if not isinstance(name_or_path, Path):
        found = _locate(text, roots)
        if found is not None:
            return found, text
    if isinstance(name_or_path, Path) or _looks_like_file(text):
        path = Path(name_or_path)
        if not path.is_file():
            raise InputError("rule file not found", path)
        return path, None
    known = ", ".join(available_rulesets(roots)) or "none"
    raise InputError(f"unknown rule set {_shown(text)}; known rule sets: {known}")


def ruleset_path(name_or_path: str | Path, extra_roots: list[Path] | None = None) -> Path:
    """The file a rule-set id or path names (``InputError`` when there is none)."""
    return _find(name_or_path, rule_roots(extra_roots))[0]


def ruleset_problems(name_or_path: str | Path,
                     extra_roots: list[Path] | None = None) -> list[InputError]:
    """Every problem of a rule set (YAML, schema, semantic), in file order; [] if it loads.

    Raises ``InputError`` only when ``name_or_path`` names no file at all.
    """
    roots = rule_roots(extra_roots)
    path, expected_id = _find(name_or_path, roots)
    return _sorted(_resolve_top(path, roots, expected_id).errors)


def _sorted(errors: list[InputError]) -> list[InputError]:
    return sorted(errors, key=lambda e: (e.path or "", e.line or 0, e.column or 0, e.message))


def load_ruleset(name_or_path: str | Path, extra_roots: list[Path] | None = None) -> RuleSet:
    """Load a rule set by id (``training/v0.7``) or by file path and resolve ``extends``.

    For the operator's choice (``--rules``, ``rules show``): a path is allowed.
    Raises ``InputError`` (exit 2) naming the file and line for any problem;
    ``InputErrors`` when there are several.
    """
    roots = rule_roots(extra_roots)
    path, expected_id = _find(name_or_path, roots)
    return _load(path, expected_id, roots)


def load_named_ruleset(name: object, where: str, line: int | None = None,
                       extra_roots: list[Path] | None = None) -> RuleSet:
    """Load the rule set a submission's file ``where`` names: an id only, found only in
    the rule roots (see :func:`named_ruleset_path`)."""
    path = named_ruleset_path(name, where, line, extra_roots)
    return _load(path, str(name), rule_roots(extra_roots))


def _load(path: Path, expected_id: str | None, roots: list[Path]) -> RuleSet:
    resolution = _resolve_top(path, roots, expected_id)
    errors = _sorted(resolution.errors)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise InputErrors(errors)
    return _build(resolution.merged, resolution.chain, resolution.origins)
