"""The launcher's picks (entry, defines, grid, block of every launch) over 32,400 call shapes
on a described device equal the committed golden table (tests/kernels/golden_picks.py): a
change of pick shows here as a diff, to be regenerated on purpose and explained."""

from __future__ import annotations

import pytest

from tests.kernels import golden_picks


@pytest.mark.slow  # 32,400 plans: about 10 s on 2 cores; .ci/run's slow step runs it
def test_the_launcher_picks_what_the_golden_table_records() -> None:
    golden = golden_picks.load()
    now = golden_picks.table()
    assert len(now["rows"]) == 32_400
    if now == golden:
        return
    old_lines, new_lines = golden_picks.readable(golden), golden_picks.readable(now)
    changed = [f"- {a}\n+ {b}" for a, b in zip(old_lines, new_lines, strict=False) if a != b]
    assert len(old_lines) == len(new_lines)
    assert not changed, (f"{len(changed)} combinations pick differently (first 5 below); if intended, regenerate "
                         "with python3 -m tests.kernels.golden_picks --write\n" + "\n".join(changed[:5]))


def test_the_golden_table_covers_every_forward_entry_and_both_position_widths() -> None:
    """The table is worth comparing: each kernel path and variant family occurs in it."""
    data = golden_picks.load()
    entries = {launch[1] for row in data["rows"] for _, launches in row[7:] for launch in launches}
    assert entries == {"embedding_bag_forward", "embedding_bag_forward_short", "embedding_bag_forward_segmented",
                       "embedding_bag_forward_bulk", "embedding_gather", "embedding_gather_bulk",
                       "embedding_bag_backward", "embedding_bag_backward_combine"}
    assert any("POS32=0" in d for d in data["defines"]) and any("POS32=1" in d for d in data["defines"])
    assert any("PERSISTENT=1" in d for d in data["defines"]) and any("PERSISTENT=0" in d for d in data["defines"])
