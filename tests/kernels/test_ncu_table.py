"""benchmarks ncu_table: Nsight Compute's CSV of ``fbgemm_skew --ncu`` as a Markdown table (CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.experiments import ncu_table

HEADER = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'


def rows(kid: int, name: str, us: float, instr: int) -> list[str]:
    values = {"gpu__time_duration.sum": f"{us * 1000:,.0f}", "dram__bytes_read.sum": "2,000,000",
              "l1tex__t_sector_hit_rate.pct": "40", "lts__t_sector_hit_rate.pct": "50",
              "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "100",
              "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "1,550",
              "sm__warps_active.avg.pct_of_peak_sustained_active": "25",
              "smsp__warps_eligible.avg.per_cycle_active": "0.9",
              "smsp__issue_active.avg.pct_of_peak_sustained_active": "59",
              "smsp__inst_executed.sum": f"{instr:,}", "launch__registers_per_thread": "94"}
    return [f'"{kid}","{name}","{metric}","","{value}"' for metric, value in values.items()]


def test_each_kernel_lands_under_its_case_fbgemm_closing_each() -> None:
    text = "\n".join(["== case A: ours then FBGEMM", "== case B: ours then FBGEMM", HEADER,
                      *rows(0, "embedding_bag_forward", 150.0, 58_700_000),
                      *rows(1, "void split_embedding_codegen_forward_unweighted_kernel<...>", 185.0, 70_700_000),
                      *rows(2, "embedding_bag_forward_segmented", 155.0, 58_300_000),
                      *rows(3, "void split_embedding_codegen_forward_unweighted_kernel<...>", 125.0, 57_700_000)])
    lines = ncu_table.table(text).splitlines()
    assert len(lines) == 2 + 4
    assert lines[2].startswith("| case A | ours (embedding_bag_forward) | 150.0 | 2.0 | 40.0 | 50.0 | 15.5 |")
    assert lines[3].startswith("| case A | FBGEMM | 185.0 |") and lines[3].endswith("| 70.7 | 94.0 |")
    assert lines[4].startswith("| case B | ours (embedding_bag_forward_segmented) |")
    assert lines[5].startswith("| case B | FBGEMM |")


def test_a_file_that_is_not_ncu_output_is_exit_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text('"a","b"\n"1","2"\n')
    assert ncu_table.main([str(bad)]) == 2
    assert "bad.csv" in capsys.readouterr().err
    assert ncu_table.main([str(tmp_path / "missing.csv")]) == 2
