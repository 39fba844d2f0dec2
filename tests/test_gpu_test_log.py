"""The GPU test log (docs/perf/gpu-tests.md): tests/conftest.py appends a row when cuda tests ran
on a GPU; the row's cells are escaped for the Markdown table, and the file holds the table."""

from __future__ import annotations

from tests import conftest


def test_a_row_has_the_five_cells_and_escapes_table_bars() -> None:
    row = conftest.gpu_test_row("NVIDIA H200", "python3 -m pytest -q -m cuda -k 'a or b|c'", "3 passed in 9 s",
                                "abc1234")
    cells = row.rstrip("\n").split(" | ")
    assert row.startswith("| 20") and row.endswith(" |\n") and len(cells) == 5
    assert cells[1:] == ["abc1234", "NVIDIA H200", "`python3 -m pytest -q -m cuda -k 'a or b\\|c'`",
                         "3 passed in 9 s |"]


def test_the_log_is_a_table_with_the_seeded_runs() -> None:
    text = conftest.GPU_TEST_LOG.read_text(encoding="utf-8")
    assert "| date (UTC) | commit | card | command | result |" in text
    rows = [line for line in text.splitlines() if line.startswith("| 20")]
    assert len(rows) >= 17 and all(line.count(" | ") == 4 for line in rows)
