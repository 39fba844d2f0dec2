"""Rule-set loading: schema errors with file:line, safe YAML, extends semantics."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance.errors import InputError
from compliance.ruleset import list_shipped, load_ruleset

V07 = Path(__file__).parents[2] / "rules" / "training" / "v0.7.yaml"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def minimal(rid: str, extra: str = "") -> str:
    return (f"schema_version: 1\nid: {rid}\nusage: training\nround: r\nstatus: proposal\ntitle: t\n"
            f"provenance: {{decision: none, date: '2026-01-01'}}\n{extra}")


def test_every_shipped_rule_set_loads() -> None:
    names = list_shipped()
    assert {"training/v0.7", "training/v1.0"} <= set(names)
    for name in names:
        assert load_ruleset(name).id == name


def test_v07_encodes_the_swg_decision() -> None:
    rs = load_ruleset("training/v0.7")
    entry = rs.entry("dlrm-embedding")
    assert entry is not None and entry.benchmarks == ("dlrm",) and entry.requires_source
    assert "training_policies/issues/291" in entry.provenance.decision
    assert entry.provenance.date == "2020-06-11"
    assert "one-time" in (entry.provenance.note or "").lower()
    assert rs.status == "adopted"


def test_v10_drops_the_one_time_exception() -> None:
    rs = load_ruleset("training/v1.0")
    assert rs.entry("dlrm-embedding") is None
    assert rs.layout == "training"  # inherited
    assert rs.origins["layout"] == "training/v0.6"


def test_schema_error_names_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", V07.read_text().replace("languages: [cuda]", "languages: [fortran]"))
    with pytest.raises(InputError) as info:
        load_ruleset(path)
    text = str(info.value)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "fortran" in text)
    assert f"{path}:{line}:" in text and "allowlist[0].languages[0]" in text and "'fortran'" in text


def test_python_tags_are_rejected_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write(tmp_path, "x.yaml", minimal("t/x", f"note: !!python/object/apply:os.system ['touch {marker}']\n"))
    with pytest.raises(InputError, match="constructor"):
        load_ruleset(path)
    assert not marker.exists()


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", minimal("t/x", "layout: training\nlayout: inference\n"))
    with pytest.raises(InputError, match="duplicate key 'layout'"):
        load_ruleset(path)


def test_extends_cycle_and_missing_parent(tmp_path: Path) -> None:
    write(tmp_path, "t/a.yaml", minimal("t/a", "extends: t/b\n"))
    write(tmp_path, "t/b.yaml", minimal("t/b", "extends: t/a\n"))
    with pytest.raises(InputError, match="extends cycle"):
        load_ruleset(tmp_path / "t/a.yaml")
    write(tmp_path, "t/c.yaml", minimal("t/c", "extends: t/nowhere\n"))
    with pytest.raises(InputError, match="no such rule set"):
        load_ruleset(tmp_path / "t/c.yaml")


def test_extends_overrides(tmp_path: Path) -> None:
    child = write(tmp_path, "training/child.yaml", minimal("training/child", (
        "extends: training/v0.7\nbenchmarks: [dlrm]\nupstream_policy: {allow_local: true}\n"
        "checks: {vendored-unproven: {level: error}}\n")))
    rs = load_ruleset(child)
    assert rs.benchmarks == ("dlrm",)  # lists replace
    assert rs.upstream_policy.allow_local and rs.upstream_policy.require_commit  # mappings merge
    assert rs.check_config("vendored-unproven").level == "error"
    assert rs.entry("dlrm-embedding") is not None  # allowlist inherited
    assert rs.status == "proposal"  # never inherited


def test_unknown_check_or_option_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", minimal("t/x", "layout: training\nbenchmarks: [dlrm]\n"
                                               "checks: {undeclared-kernel: {colour: red}}\n"))
    with pytest.raises(InputError, match="no option 'colour'"):
        load_ruleset(path)


def test_unknown_rule_set_name_lists_the_shipped_ones() -> None:
    with pytest.raises(InputError, match="training/v0.7"):
        load_ruleset("training/v9.9")


def test_shipped_schemas_are_valid_json_schemas() -> None:
    from jsonschema import Draft202012Validator

    from compliance.schema_validation import SCHEMA_NAMES, load_schema

    for name in SCHEMA_NAMES:
        Draft202012Validator.check_schema(load_schema(name))
