"""The benchmark's orchestration, without a GPU: one worker process per group, merged results,
and a failing or silent worker reported by group name."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
from benchmarks import harness as bench  # noqa: E402


def args(**over: object) -> argparse.Namespace:
    base = dict(reps=100, quick=False, seed=7, flush="clean", fbgemm=None)
    base.update(over)
    return argparse.Namespace(**base)


def fake_result(group: str, ours_us: float) -> bench.Result:
    r = bench.Result(f"case of {group}", group, "float32", "sum", False, ours_us, 2 * ours_us, None, 1000, 1200)
    return bench.finish(r, 4000.0)


def option(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_each_group_runs_in_its_own_worker_and_results_merge() -> None:
    commands: list[list[str]] = []

    def runner(cmd: list[str]) -> int:
        commands.append(cmd)
        group = option(cmd, "--only")
        out = {"copy_ceiling_gbps": {"large": 4300.0, "onehot": 4280.0}[group],
               "results": [asdict(fake_result(group, 10.0)), asdict(fake_result(group, 20.0))],
               "compile_plus_load_s": {f"{group}.cu": 0.05}}
        Path(option(cmd, "--worker")).write_text(json.dumps(out))
        return 0

    results, ceilings, compiles = bench.run_isolated(args(quick=True), ["large", "onehot"], runner)
    assert [option(c, "--only") for c in commands] == ["large", "onehot"]
    assert all(option(c, "--seed") == "7" and "--quick" in c and option(c, "--flush") == "clean" for c in commands)
    assert len({option(c, "--worker") for c in commands}) == 2
    assert ceilings == {"large": 4300.0, "onehot": 4280.0}
    assert compiles == {"large.cu": 0.05, "onehot.cu": 0.05}
    assert [(r.group, r.ours_us) for r in results] == [("large", 10.0), ("large", 20.0), ("onehot", 10.0),
                                                       ("onehot", 20.0)]
    assert results[0] == fake_result("large", 10.0)  # every field survives the round trip


def test_a_failing_worker_names_its_group() -> None:
    def runner(cmd: list[str]) -> int:
        if option(cmd, "--only") == "big":
            return 3
        Path(option(cmd, "--worker")).write_text(json.dumps({"copy_ceiling_gbps": 1.0, "results": [],
                                                             "compile_plus_load_s": {}}))
        return 0

    with pytest.raises(bench.WorkerError, match="group 'big': its worker process exited with 3"):
        bench.run_isolated(args(), ["simple", "big", "sweep"], runner)


@pytest.mark.parametrize("written", [None, "not json", '{"results": []}'])
def test_a_worker_without_readable_results_is_an_error(written: str | None) -> None:
    def runner(cmd: list[str]) -> int:
        if written is not None:
            Path(option(cmd, "--worker")).write_text(written)
        return 0

    with pytest.raises(bench.WorkerError, match="group 'dcnv2': unreadable worker output"):
        bench.run_isolated(args(), ["dcnv2"], runner)


@pytest.mark.parametrize("argv, message", [
    (["--charts", "charts"], "--json and --charts are required"),
    (["--json", "r.json", "--charts", "charts", "--only", "large,nope"], "unknown group(s) in --only: nope"),
    (["--json", "r.json", "--charts", "charts", "--reps", "10"], "--reps must be at least 100"),
])
def test_usage_errors_exit_2_before_any_gpu_work(argv: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@given(nbytes=st.integers(0, 1 << 40), align=st.sampled_from([16, 512, 8 << 10, bench.COPY_ALIGN]))
def test_same_size_copy_moves_the_nearest_aligned_size(nbytes: int, align: int) -> None:
    moved = bench.copy_bytes(nbytes, align)
    assert moved % (2 * align) == 0 and moved >= 2 * align
    assert abs(moved - nbytes) <= align or (nbytes < 2 * align and moved == 2 * align)


def test_same_size_copy_figure_uses_the_bytes_the_copy_moved() -> None:
    r = bench.Result("c", "g", "float32", "sum", False, 10.0, 20.0, None, 100_000, 100_000, same_size_copy_us=1.0)
    bench.finish(r, 1000.0)
    assert r.same_size_copy_pct == pytest.approx(100 * bench.copy_bytes(100_000) / 1e-6 / 1e9 / 1000.0)


def test_workers_load_fbgemm_from_the_directory_the_parent_names() -> None:
    cmd = bench.worker_command(args(fbgemm="/tmp/fbgemm-unpacked"), "tables", "/tmp/out.json")
    assert option(cmd, "--fbgemm") == "/tmp/fbgemm-unpacked"
    assert "--fbgemm" not in bench.worker_command(args(), "tables", "/tmp/out.json")


def test_the_fbgemm_summary_leaves_out_per_table_lines_and_names_the_slower_cases() -> None:
    def paired(case: str, ours: float, fbgemm: float | None) -> bench.Result:
        r = fake_result("2-12tables", ours)
        r.case, r.fbgemm_us = case, fbgemm
        return bench.finish(r, 4300.0)

    results = [paired("a TBE", 100.0, 200.0), paired("a per-table", 400.0, 200.0), paired("b TBE", 100.0, 50.0),
               paired("c max TBE", 100.0, None)]
    summary = bench.peer_summary(results)["vs_fbgemm"]
    assert isinstance(summary, dict)
    assert summary["cases"] == 2 and summary["geomean"] == pytest.approx(1.0)
    assert summary["worst"] == pytest.approx(0.5) and summary["slower_than_fbgemm"] == ["b TBE"]
    assert bench.peer_summary([paired("c max TBE", 100.0, None)]) == {"vs_fbgemm": None}
