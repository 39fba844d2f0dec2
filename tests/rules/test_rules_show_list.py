"""``compliance rules list`` and ``compliance rules show``."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from compliance.ruleset import list_shipped, load_ruleset
from compliance.ruletools import listing
from compliance.ruletools.show import render_text, to_json, view
from tests.rules.helpers import VALID, fixture, invoke, invoke_json


class TestList:
    def test_shipped_rule_sets_with_status_and_parent(self) -> None:
        infos = {i.id: i for i in listing.list_rulesets()}
        assert set(infos) == set(list_shipped())
        assert (infos["training/v0.5"].status, infos["training/v0.5"].parent) == ("adopted", None)
        assert (infos["training/v1.0"].status, infos["training/v1.0"].parent) == (
            "adopted", "training/v0.7")
        rounds = {"training": ["v0.5", "v0.6", "v0.7", "v1.0", "v1.1", "v2.0", "v2.1", "v3.0",
                               "v3.1", "v4.0", "v4.1", "v5.0", "v5.1"],
                  "inference": ["v0.5", "v0.7", "v1.0", "v1.1", "v2.0", "v2.1", "v3.0", "v3.1",
                                "v4.0", "v4.1", "v5.0", "v5.1"]}
        for usage, names in rounds.items():
            for previous, current in itertools.pairwise(names):
                assert infos[f"{usage}/{current}"].parent == f"{usage}/{previous}"
                assert infos[f"{usage}/{current}"].status == "adopted"
        assert infos["training/proposal-custom-kernels"].status == "proposal"

    def test_rules_dir_override_and_a_broken_file(self, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        shutil.copytree(VALID, tmp_path / "rules")
        (tmp_path / "rules" / "training" / "broken.yaml").write_text("id: [unclosed\n")
        monkeypatch.setenv("COMPLIANCE_RULES_PATH", str(tmp_path / "rules"))
        infos = {i.id: i for i in listing.list_rulesets()}
        assert {"training/base", "training/child", "training/proposal",
                "training/broken"} <= set(infos)
        assert "training/v0.7" in infos  # the shipped ones stay
        assert infos["training/broken"].status == "invalid"
        assert infos["training/proposal"].parent == "training/child"

    def test_text_table(self) -> None:
        result = invoke("list")
        assert result.exit_code == 0
        header, *rows = result.stdout.splitlines()
        assert header.split() == ["ID", "USAGE", "ROUND", "STATUS", "EXTENDS", "TITLE"]
        v10 = next(r for r in rows if r.startswith("training/v1.0 "))
        assert v10.split()[1:5] == ["training", "v1.0", "adopted", "training/v0.7"]
        assert "not MLPerf policy" in result.stdout

    def test_json(self) -> None:
        doc = invoke_json("list")
        assert doc["schema_version"] == 1
        assert [r["id"] for r in doc["rulesets"]] == list_shipped()


class TestShow:
    def test_resolved_values_and_entry_provenance(self) -> None:
        text = render_text(view(load_ruleset(fixture("child"))))
        assert "benchmarks:" in text and "dlrm, bert, unet3d" in text
        assert "https://example.org/decisions/4" in text  # the entry's decision link
        assert "Now with upstream and verification." in text
        assert "removed attn:" in text and "(removed by training/child)" in text
        assert "[from" not in text and "training/base  " not in text

    def test_origin_column_names_the_file_each_value_comes_from(self) -> None:
        lines = render_text(view(load_ruleset(fixture("child"))), with_origin=True).splitlines()

        def origin_of(label: str) -> str:
            line = next(ln for ln in lines if ln.split()[1:2] == [f"{label}:"])
            return line.split()[0]

        assert origin_of("layout") == "training/base"
        assert origin_of("benchmarks") == "training/child"
        assert origin_of("require_commit") == "training/base"
        assert origin_of("allowed_hosts") == "training/child"
        assert origin_of("markers") == "default"
        assert origin_of("emb") == "training/child"

    def test_json_with_origins(self) -> None:
        doc = to_json(view(load_ruleset(fixture("proposal"))), with_origin=True)
        assert doc["schema_version"] == 1
        assert doc["ruleset"]["chain"] == ["training/proposal", "training/child", "training/base"]
        assert doc["ruleset"]["status"] == "proposal"
        entries = {e["id"]: e for e in doc["allowlist"]}
        assert entries["conv"]["origin"] == "training/proposal"
        assert entries["emb"]["origin"] == "training/child"
        assert entries["emb"]["requires"]["verification"]["reference_ops"] == ["embedding_bag"]
        assert doc["origins"]["layout"] == "training/base"
        assert doc["origins"]["vendored.markers"] == "default"
        assert "allowlist.attn" not in doc["origins"]  # removed: not in force
        assert doc["removed_allowlist"] == [{"id": "attn", "removed_by": "training/child"}]

    def test_json_without_origin_has_no_origins(self) -> None:
        doc = invoke_json("show", "training/v1.0")
        assert "origins" not in doc and doc["allowlist"] == []
        assert doc["removed_allowlist"] == [{"id": "dlrm-embedding", "removed_by": "training/v1.0"}]

    def test_cli_by_name_and_by_file(self) -> None:
        by_name = invoke("show", "training/v0.7")
        assert by_name.exit_code == 0
        assert "training_policies/issues/291" in by_name.stdout
        by_file = invoke("show", "--origin", fixture("child"))
        assert by_file.exit_code == 0 and "training/base" in by_file.stdout

    def test_proposal_is_marked(self) -> None:
        result = invoke("show", "training/proposal-custom-kernels")
        assert "proposal (NOT MLPerf policy)" in result.stdout

    def test_a_rule_file_that_does_not_load_exits_2(self) -> None:
        bad = str(VALID.parent / "invalid" / "extends-cycle" / "training" / "a.yaml")
        result = invoke("show", bad)
        assert result.exit_code == 2 and "extends cycle" in result.stderr
