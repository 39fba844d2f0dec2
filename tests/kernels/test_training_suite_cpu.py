"""CPU tests of the training suite's pure parts (benchmarks/training_suite.py): its cases, the
check of FBGEMM's against our updated rows, and the report."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks import training_suite as ts  # noqa: E402


def test_cases_cover_the_issue_and_quick_is_a_subset() -> None:
    cases = ts.all_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert {c.alpha for c in cases} == {0.0, 1.05, 1.2}
    assert {c.optimizer for c in cases} == set(ts.OPTIMIZERS)
    assert any(c.weights == "fp16" for c in cases) and any(c.psw for c in cases)
    assert not any(c.psw and c.weights == "fp16" for c in cases)  # FBGEMM's per-sample weights are float32
    dcn = [c for c in cases if c.name.startswith("DCNv2")]
    assert dcn and all(len(c.rows) == 26 and max(c.rows) == 4_000_000 for c in dcn)
    quick = ts.quick_cases()
    assert set(quick) <= set(cases) and len(quick) == len(ts.QUICK)


def _inputs(starts: list[int]) -> ts.Inputs:
    empty = torch.empty(0)
    return ts.Inputs(empty.long(), empty.long(), None, empty, starts)


def test_compare_updates_accepts_summation_order_and_refuses_a_wrong_row() -> None:
    case = ts.Case("c", (4, 6), 3, 2, (1, 1), 0.0, "sgd")
    gen = torch.Generator().manual_seed(0)
    before = torch.randn(10, 3, generator=gen)
    ours = before.clone()
    touched = torch.tensor([1, 4, 9])
    ours[touched] -= 0.01 * torch.randn(3, 3, generator=gen)
    fbgemm = [ours[:4].clone(), ours[4:].clone()]
    fbgemm[1][0] += 1e-7  # row 4: within 1e-3 of the largest change
    verdict = ts.compare_updates(case, _inputs([0, 4]), ours, fbgemm, before[touched], touched)
    assert verdict.startswith("ok"), verdict
    fbgemm[1][5] += 1e-3  # row 9 (table 1, row 5): a real difference
    verdict = ts.compare_updates(case, _inputs([0, 4]), ours, fbgemm, before[touched], touched)
    assert verdict.startswith("MISMATCH"), verdict
    verdict = ts.compare_updates(case, _inputs([0, 4]), before, [before[:4], before[4:]], before[touched], touched)
    assert verdict.startswith("MISMATCH"), "no change at all is not an agreement"


def test_report_ratios_and_table() -> None:
    r = ts.CaseResult("case a", "sgd", "fp32", False, 0.0, 100,
                      ours=ts.Figures(100.0, 150.0, 80.0), fbgemm=ts.Figures(120.0, 300.0, 200.0),
                      torch=ts.Figures(error="OutOfMemoryError: x"), check="ok (...)")
    ts._ratios(r)
    assert r.gpu_vs_fbgemm == pytest.approx(1.2) and r.wall_vs_fbgemm == pytest.approx(2.0)
    assert r.gpu_vs_torch is None
    summary = ts.summary([r])
    assert summary["gpu_vs_fbgemm"]["geomean"] == pytest.approx(1.2) and summary["gpu_vs_torch"]["cases"] == 0
    assert summary["wall_over_gpu_ours"] == {"case a": 1.5}
    assert summary["host_over_gpu_ours"] == {"case a": 0.8}
    assert summary["host_us"]["ours"] == {"median": 80.0, "min": 80.0, "max": 80.0}
    assert summary["host_us"]["fbgemm"]["median"] == 200.0
    text = ts.text_table([r], summary)
    assert "case a" in text and "torch: OutOfMemoryError" in text and "update checks failed: none" in text
    assert "host us per step, ours: median 80, min 80, max 80" in text


def test_fbgemm_unavailable_reasons(tmp_path: Path) -> None:
    """No FBGEMM is a recorded reason, never a crash: no folder, no package in it, no loader."""
    assert "not given" in ts.load_fbgemm(None)
    assert "fbgemm_gpu missing" in ts.load_fbgemm(str(tmp_path))
    (tmp_path / "fbgemm_gpu").mkdir()
    assert "fbgemm_training.py not found" in ts.load_fbgemm(str(tmp_path), str(tmp_path))


def test_the_dlrm_case_is_the_examples_full_model_and_its_check_separates_agreement() -> None:
    """The whole-model case builds examples/dlrm's full configuration; its check passes equal
    losses and rows that agree within 1e-3 of the largest change, and fails a loss or a row off."""
    import torch

    from benchmarks import training_dlrm

    cfg = training_dlrm.example().Config.full()
    assert len(cfg.rows) == 26 and cfg.dim == 64 and cfg.batch == 8192
    assert "DLRM" in training_dlrm.NAME and "sgd" in training_dlrm.NAME
    before = torch.zeros(5, 4)
    ours = before + torch.arange(20.0).view(5, 4) / 100
    loss = torch.tensor(0.69)
    assert ts.dlrm_check(loss, loss.clone(), ours, ours + 1e-5, before).startswith("ok")
    assert ts.dlrm_check(loss, loss.clone(), ours, ours + 1e-3, before).startswith("MISMATCH")
    assert ts.dlrm_check(loss, loss + 1e-3, ours, ours.clone(), before).startswith("MISMATCH")
    assert ts.dlrm_check(loss, loss.clone(), before, before.clone(), before).startswith("MISMATCH")  # nothing moved


def test_wall_loops_of_the_libraries_are_taken_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_side_by_side: each library's GPU and host figures, and its wall loops of STEPS
    steps alternated with the other's (A B A B ...), the median of WALL_LOOPS loops each."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(ts.harness, "host_us_unqueued", lambda step: 7.0)
    timer = type("Timer", (), {"median_us": lambda self, step: 3.0})()
    first, second = ts.measure_side_by_side([lambda: calls.append("a"), lambda: calls.append("b")], timer)
    runs = "".join(calls)
    assert runs == ("a" * ts.STEPS + "b" * ts.STEPS) * ts.WALL_LOOPS
    assert (first.gpu_us, first.host_us, second.gpu_us, second.host_us) == (3.0, 7.0, 3.0, 7.0)
    assert first.wall_us is not None and second.wall_us is not None


@pytest.mark.parametrize("wakes_after, expected", [
    ({20: False}, "first"), ({20: True, 5: False}, "second"), ({20: True, 5: True, 2: True, 1: True}, None)])
def test_host_time_is_taken_over_fewer_steps_where_the_gpu_woke_first(monkeypatch: pytest.MonkeyPatch,
                                                                      wakes_after: dict[int, bool],
                                                                      expected: str | None) -> None:
    """harness.host_us_unqueued: 20 calls while the GPU sleeps; where the sleep was over before
    they were enqueued (the launch queue was full, or a call synchronised), 5, 2, then 1; None if
    even one call waited."""
    from benchmarks import harness

    calls: list[int] = []
    attempts: list[int] = []  # the calls made by each attempt, as its event sees them

    class Event:
        def record(self) -> None:
            self.start = len(calls)

        def query(self) -> bool:
            attempts.append(len(calls) - self.start)
            return wakes_after[attempts[-1]]

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)

    def fn() -> None:
        calls.append(1)

    host = harness.host_us_unqueued(fn)
    assert sum(attempts) + 1 == len(calls)  # one warm-up call, then each attempt's calls
    if expected is None:
        assert host is None and attempts == [20, 5, 2, 1]
    else:
        assert host is not None and host >= 0 and attempts == ([20] if expected == "first" else [20, 5])
