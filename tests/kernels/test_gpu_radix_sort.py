"""GPU tests of the backward's own sort (radix_sort.cu, ``launch.sort_rows``, issue 37): the
stable sort over only the bits the rows use equals ``torch.sort(keys, stable=True)`` bit for bit,
sorted keys and int64 positions, on fresh random keys: one to four passes (every int32 key),
tiles of both sizes cut anywhere (one key, part of a tile, a tile and one more, millions),
uniform, skewed (a hot key with most of the positions, as Zipf traffic makes), all equal,
already sorted and reversed. Outputs are poisoned first; no call synchronises with the host."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reference_kernels import launch, tuning  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("poison_outputs", "every_size")]


@pytest.fixture
def every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sort for any number of keys (the launcher leaves fewer than RADIX_MIN_KEYS to torch)."""
    monkeypatch.setattr(launch, "RADIX_MIN_KEYS", 1)

TILE, SMALL_TILE = launch.RADIX_TILE, launch.RADIX_TILE_SMALL


def draw(gen: torch.Generator, n: int, max_key: int, kind: str) -> torch.Tensor:
    """n int32 keys in [0, max_key] of the named kind."""
    if kind == "uniform":
        return torch.randint(0, max_key + 1, (n,), generator=gen, device="cuda", dtype=torch.int64).to(torch.int32)
    if kind == "skewed":  # ~70 % of the positions on one key, the rest spread (a Zipf head)
        spread = torch.randint(0, max_key + 1, (n,), generator=gen, device="cuda", dtype=torch.int64)
        hot = torch.rand(n, generator=gen, device="cuda") < 0.7
        return torch.where(hot, max_key // 3, spread).to(torch.int32)
    if kind == "equal":
        return torch.full((n,), max_key, dtype=torch.int32, device="cuda")
    keys = draw(gen, n, max_key, "uniform").sort().values
    return keys if kind == "sorted" else keys.flip(0)


def check(keys: torch.Tensor, max_key: int) -> None:
    expected_keys, expected_positions = torch.sort(keys, stable=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        got_keys, got_positions = launch.sort_rows(keys, max_key)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert got_keys.dtype == torch.int32 and got_positions.dtype == torch.int64
    assert torch.equal(got_keys, expected_keys)
    assert torch.equal(got_positions, expected_positions)


@pytest.mark.parametrize("max_key", [1, 255, 256, 4_000, 65_536, 2**24 - 1, 2**24, 2**27 - 1, 2**31 - 2])
@pytest.mark.parametrize("n", [1, 5, SMALL_TILE - 1, SMALL_TILE + 1, TILE - 1, TILE, TILE + 1, 100_003,
                               launch.RADIX_SMALL_BELOW + 7])
@pytest.mark.parametrize("kind", ["uniform", "skewed", "equal", "sorted", "reversed"])
def test_the_sort_equals_torchs_stable_sort(gen: torch.Generator, max_key: int, n: int, kind: str) -> None:
    check(draw(gen, n, max_key, kind), max_key)


@pytest.mark.parametrize("rows", [8_000_000, 40_000_000], ids=["8M rows", "40M rows"])
@pytest.mark.parametrize("kind", ["uniform", "skewed"])
def test_millions_of_keys_of_a_suite_shape(gen: torch.Generator, kind: str, rows: int) -> None:
    """2.6M keys (8 tables of 1M rows at B16384 L20, the training suite's narrow shape): 3 passes
    over 8M rows, 4 over 40M."""
    check(draw(gen, 2_621_440, rows, kind), rows)


def test_the_knob_off_and_other_keys_take_torchs_sort(gen: torch.Generator) -> None:
    keys = draw(gen, 10_000, 70_000, "uniform")
    with tuning.tuned(own_sort=False):
        got = launch.sort_rows(keys, 70_000)
    expected = torch.sort(keys, stable=True)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    wide = keys.to(torch.int64)  # int64 keys (tables of 2^31 rows or more): torch.sort
    assert torch.equal(launch.sort_rows(wide, 70_000)[1], expected[1])
    empty = keys[:0]
    assert launch.sort_rows(empty, 70_000)[0].numel() == 0
