"""The benchmark's charts (benchmarks/charts.py), without a GPU: which files a results file gives,
with and without FBGEMM's figures, how groups split into panels, and bad input exiting 2."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import charts
from benchmarks.__main__ import main as benchmarks_main

CEILING = 4300.0


def record(case: str, group: str, ours_us: float, torch_us: float, fbgemm_us: float | None = None,
           compulsory: int = 100_000_000, ceiling: float = CEILING, with_fbgemm_fields: bool = True) -> dict[str, Any]:
    """A result as harness.finish() leaves it (the fields the charts read), FBGEMM's as the lead's
    peer writes them: None where FBGEMM has no such op."""
    ours_gbps, torch_gbps = compulsory / ours_us / 1e3, compulsory / torch_us / 1e3
    r: dict[str, Any] = {
        "case": case, "group": group, "dtype": "float32", "mode": "sum", "psw": False, "ours_us": ours_us,
        "torch_us": torch_us, "ours_check_us": None, "compulsory_bytes": compulsory, "logical_bytes": compulsory,
        "ours_gbps": ours_gbps, "torch_gbps": torch_gbps, "pct_copy": 100 * ours_gbps / ceiling,
        "speedup": torch_us / ours_us, "same_size_copy_us": 30.0, "same_size_copy_pct": 80.0}
    if with_fbgemm_fields:
        r |= {"fbgemm_us": fbgemm_us, "vs_fbgemm": None if fbgemm_us is None else fbgemm_us / ours_us,
              "fbgemm_gbps": None if fbgemm_us is None else compulsory / fbgemm_us / 1e3,
              "fbgemm_pct_copy": None}
    return r


def suite_records(fbgemm: bool) -> list[dict[str, Any]]:
    """A small suite: a sweep large enough to be split (36 cases), 12 tables, a backward group."""
    out = []
    for i, (dim, batch, alpha, layout) in enumerate(
            (d, b, a, lay) for d in (32, 128) for b in (1024, 32768, 131072) for a in (0.0, 1.05, 1.15)
            for lay in ("fixed", "csr")):
        ours = 20.0 + i
        out.append(record(f"4 d{dim} B{batch} L16 a{alpha} {layout} sum f32", "4-sweep", ours, 2.5 * ours,
                          ours * (0.8 if i % 5 == 0 else 1.4) if fbgemm else None, with_fbgemm_fields=fbgemm))
    for mode in ("sum", "mean", "max"):
        for kind in ("TBE", "per-table"):
            peer = 300.0 if fbgemm and kind == "TBE" and mode != "max" else None
            out.append(record(f"2 12x500Kx128 a1.05 {mode} float32 {kind}", "2-12tables", 200.0, 900.0, peer,
                              with_fbgemm_fields=fbgemm))
    out.append(record("1 bwd 5Mx128 B2048 L150 sum float32 backward", "bwd", 500.0, 1100.0,
                      with_fbgemm_fields=fbgemm))
    return out


def write_results(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"environment": {"gpu": "NVIDIA H200", "torch": "2.11"},
                                "summary": {"copy_ceiling_gbps": CEILING}, "results": records}))
    return path


@pytest.fixture
def pyplot() -> None:
    pytest.importorskip("matplotlib")


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG that is not blank."""
    from matplotlib.image import imread

    pixels = imread(path)
    assert pixels.std() > 0.01, f"{path.name} is blank"
    return pixels.shape[1], pixels.shape[0]


@pytest.mark.parametrize("fbgemm", [True, False], ids=["with-fbgemm", "old-file"])
def test_a_results_file_gives_an_overview_a_figure_per_group_and_an_index(tmp_path: Path, pyplot: None,
                                                                          fbgemm: bool) -> None:
    results = write_results(tmp_path / "r.json", suite_records(fbgemm))
    written = charts.chart_file(results, tmp_path / "charts")
    names = sorted(p.name for p in written)
    assert names == ["README.md", "group-2-12tables.png", "group-4-sweep.png", "group-bwd.png", "overview.png"]
    for png in (p for p in written if p.suffix == ".png"):
        width, height = image_size(png)
        assert 250 <= width <= 1600 and 150 <= height <= 1600, (png.name, width, height)
    index = (tmp_path / "charts" / "README.md").read_text()
    assert all(f"[{n}]({n})" in index for n in names if n.endswith(".png"))
    assert "36 cases in 2 panels" in index  # the sweep, split by dim
    assert ("over FBGEMM geomean" in index) is fbgemm and "over torch geomean" in index
    assert ("8 below 1.0" if fbgemm else "0 below 1.0") in index  # every fifth sweep case
    # With FBGEMM the overview has its panel on top of torch's, so it is taller.
    _, overview_height = image_size(tmp_path / "charts" / "overview.png")
    assert (overview_height > 800) is fbgemm


def test_a_group_without_cases_gets_no_figure_and_backward_alone_no_overview(tmp_path: Path, pyplot: None) -> None:
    only_backward = [r for r in suite_records(fbgemm=False) if r["group"] == "bwd"]
    written = charts.chart_file(write_results(tmp_path / "r.json", only_backward), tmp_path / "out")
    assert sorted(p.name for p in written) == ["README.md", "group-bwd.png"]
    assert "sweep" not in (tmp_path / "out" / "README.md").read_text()


def test_a_file_without_a_ceiling_charts_without_its_line(tmp_path: Path, pyplot: None) -> None:
    bare = record("0 1Mx128 B2048 fixed sum f32", "0-simple", 10.0, 20.0) | {"pct_copy": 0.0}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"results": [bare]}))  # no summary: no copy ceiling to fall back on
    assert charts.load(path)[0][0].same_size_copy_gbps is None
    written = charts.chart_file(path, tmp_path / "out")
    assert image_size(tmp_path / "out" / "group-0-simple.png")[0] > 0 and len(written) == 3


def test_the_harness_records_chart_as_they_are(tmp_path: Path, pyplot: None) -> None:
    """Records written by the suite itself (harness.Result through finish and asdict) are read."""
    pytest.importorskip("torch")
    from dataclasses import asdict

    from benchmarks import harness

    r = harness.finish(harness.Result("0 1Mx128 B2048 L20 fixed sum f32", "0-simple", "float32", "sum", False,
                                      10.0, 20.0, None, 20_000_000, 21_000_000, same_size_copy_us=8.0), CEILING)
    written = charts.chart_file(write_results(tmp_path / "r.json", [asdict(r)]), tmp_path / "out")
    assert sorted(p.name for p in written) == ["README.md", "group-0-simple.png", "overview.png"]


def test_fbgemm_figures_are_derived_from_its_time_and_absent_when_none() -> None:
    full = charts.case_from_record(record("c", "g", 10.0, 20.0, 25.0), CEILING)
    assert full.vs_fbgemm == pytest.approx(2.5) and full.fbgemm_gbps == pytest.approx(1e8 / 25.0 / 1e3)
    only_time = record("c", "g", 10.0, 20.0, 25.0)
    del only_time["vs_fbgemm"], only_time["fbgemm_gbps"]
    derived = charts.case_from_record(only_time, CEILING)
    assert derived.vs_fbgemm == pytest.approx(full.vs_fbgemm) and derived.fbgemm_gbps == pytest.approx(full.fbgemm_gbps)
    for r in (record("c", "g", 10.0, 20.0, None), record("c", "g", 10.0, 20.0, with_fbgemm_fields=False)):
        case = charts.case_from_record(r, CEILING)
        assert case.vs_fbgemm is None and case.fbgemm_gbps is None
    # The ceiling is the one the case's own percentage used (each worker process measures its own).
    assert charts.case_from_record(record("c", "g", 10.0, 20.0, ceiling=4100.0), CEILING).ceiling_gbps == \
        pytest.approx(4100.0)
    assert full.same_size_copy_gbps == pytest.approx(0.8 * CEILING)
    # A figure json wrote as NaN is left out, a field of the wrong type is refused.
    assert charts.case_from_record(record("c", "g", 10.0, 20.0, float("nan")), CEILING).vs_fbgemm is None
    with pytest.raises(TypeError, match="field 'speedup' is '2', not a number"):
        charts.case_from_record(record("c", "g", 10.0, 20.0) | {"speedup": "2"}, CEILING)


def test_the_sweep_splits_by_dim_and_layout_and_labels_drop_shared_words() -> None:
    names = [f"d{d} B{b} L{p} a{a} {lay} sum f32" for d in (32, 128) for b in (1024, 32768, 131072)
             for p in (1, 16, 64) for a in (0.0, 1.05, 1.15) for lay in ("fixed", "csr")]
    assert charts.split_positions(names) == (0, 4)
    cases = [charts.Case(f"4 {n}", "4-sweep", 1.0, 1.0, CEILING, 1.0) for n in names]
    parts = charts.panels(cases)
    assert [p.title for p in parts] == ["d32 fixed sum f32", "d32 csr sum f32", "d128 fixed sum f32",
                                        "d128 csr sum f32"]
    assert parts[0].labels[:2] == ("B1024 L1 a0.0", "B1024 L1 a1.05")
    assert charts.split_positions(names[:30]) == ()  # small enough for one panel
    assert charts.split_positions([*names[:40], "one name of another length"]) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", "c", "d32", "d64", "x1", "x2"]), min_size=1, max_size=4)
                .map(" ".join), min_size=1, max_size=90),
       st.integers(1, 40))
def test_panels_hold_every_case_once_and_at_most_the_limit(names: list[str], limit: int) -> None:
    cases = [charts.Case(n, "g", float(i), 1.0, CEILING, 1.0) for i, n in enumerate(names)]
    parts = charts.panels(cases, limit)
    drawn = [c for p in parts for c in p.cases]
    assert sorted(c.ours_gbps for c in drawn) == [c.ours_gbps for c in cases]
    assert all(0 < len(p.cases) <= limit and len(p.labels) == len(p.cases) for p in parts)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = benchmarks_main(["charts", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ('{"results": [', "not JSON: Expecting value at line 1"),
    ('[1, 2]', "not a suite results file"),
    ('{"results": []}', "no results to chart"),
    ('{"results": [{"case": "x", "group": "g"}]}', "result 0 (x): missing field(s) ours_us"),
    ('{"results": [7]}', "result 0 is not an object"),
])
def test_bad_results_exit_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            content: str | None, message: str) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    code, err = run_cli(["--json", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert f"benchmarks charts: {path}: " in err and message in err
    assert not (tmp_path / "out").exists()


def test_a_readme_the_charts_did_not_write_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "README.md").write_text("# Someone's notes\n")
    results = write_results(tmp_path / "r.json", suite_records(fbgemm=False))
    code, err = run_cli(["--json", str(results), "--out", str(tmp_path)], capsys)
    assert code == 2 and "README.md: exists and was not written by the charts" in err
    assert (tmp_path / "README.md").read_text() == "# Someone's notes\n"


def test_the_cli_renders_again_into_its_own_folder(tmp_path: Path, pyplot: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "r.json", suite_records(fbgemm=True)[:3])
    for _ in range(2):  # a second run overwrites its own README.md
        assert benchmarks_main(["charts", "--json", str(results), "--out", str(tmp_path / "out")]) == 0
    assert str(tmp_path / "out" / "overview.png") in capsys.readouterr().out



def test_without_matplotlib_the_cli_says_so_and_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    results = write_results(tmp_path / "r.json", suite_records(fbgemm=False))
    code, err = run_cli(["--json", str(results), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "the charts need matplotlib" in err
    assert not (tmp_path / "out").exists()
