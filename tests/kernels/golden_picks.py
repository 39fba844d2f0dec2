"""The launcher's picks over a fixed grid of call shapes, on a described (fake) device.

Every combination of weight dtype, row width, weight alignment, mode, bag length, batch size
and table size (3 x 10 x 3 x 5 x 18 x 2 x 2 = 32,400) is driven through the real launch
entry points (``bag_forward`` for fixed-size, CSR and table-batched bags, ``gather`` and
``backward_passes``) on meta tensors; nothing is compiled or launched: the kernel lookup and
the launch are replaced by recorders. Each launch is written down as its source, entry,
compile-time defines, grid and block. ``tests/kernels/golden/picks.json.xz`` holds the table;
``test_golden_picks.py`` recomputes it and compares, so a change of pick is a visible diff.

Regenerate after an intended change of pick (and say why in the commit):
``PYTHONPATH=$PWD python3 -m tests.kernels.golden_picks --write``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reference_kernels.plan import DeviceProps

GOLDEN = Path(__file__).parent / "golden" / "picks.json.xz"

# The described device: an H100/H200-like part (132 SMs, sm_90). The occupancy of a compiled
# kernel is the device's answer at run time; here it is taken to be the kernel's MIN_BLOCKS
# (its __launch_bounds__ floor), so that the resident-wave grids are recorded too.
SMS = 132
ARCH = "sm_90"
DEVICE = DeviceProps(sms=SMS, arch=90, max_threads_per_sm=2048, max_blocks_per_sm=32, regs_per_sm=65536,
                     smem_per_sm=228 << 10, smem_reserved_per_block=1 << 10)

DTYPES = ("float32", "float16", "bfloat16")
WIDTHS = (1, 3, 16, 32, 64, 96, 128, 192, 256, 1000)
ALIGNMENTS = (0, 4, 8)  # bytes past a 16-byte boundary of the weight's (and gradient's) pointer
MODES = ("sum", "sum+psw", "mean", "max+argmax", "max")
LENGTHS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 20, 24, 32, 40, 64, 96, 150, 300, 1000)
BATCHES = (1024, 131072)  # fewer bags than 2 blocks per SM hold teams, and many more
TABLE_ROWS = (1_000_000, 3_000_000_000)  # 32-bit positions, and 64-bit
TABLES = 4  # the table-batched layout: 4 tables, the batch split among them

Launch = tuple[str, str, str, int, int]  # source, entry, defines, grid, block
RECORDED: list[Launch] = []  # the launches of the call being recorded


def combinations() -> Iterator[tuple[str, int, int, str, int, int, int]]:
    return itertools.product(DTYPES, WIDTHS, ALIGNMENTS, MODES, LENGTHS, BATCHES, TABLE_ROWS)


def _defines_text(defines: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(defines.items()))


@contextmanager
def recording() -> Iterator[None]:
    """Replace the kernel lookup, the device queries and the launch by recorders."""
    from reference_kernels import launch, nvrtc

    saved = {name: getattr(nvrtc, name) for name in ("get_function", "resident_blocks")}
    saved_launch = {name: getattr(launch, name) for name in ("_launch_on", "_launch_packed", "device_props")}

    def get_function(filename: str, name: str, defines: dict[str, Any], device_index: int) -> tuple[str, str, str]:
        return filename, name, _defines_text(defines)

    def resident_blocks(fn: tuple[str, str, str], block: int) -> int:
        return int(dict(item.split("=") for item in fn[2].split())["MIN_BLOCKS"])

    def launch_on(t: Any, fn: tuple[str, str, str], grid: int, args: Any, block: int = launch.BLOCK) -> None:
        RECORDED.append((*fn, grid, block))

    def launch_packed(index: Any, fn: tuple[str, str, str], grid: int, block: int, *args: Any) -> None:
        RECORDED.append((*fn, grid, block))

    nvrtc.get_function = get_function  # type: ignore[assignment]
    nvrtc.resident_blocks = resident_blocks  # type: ignore[assignment]
    launch._launch_on = launch_on  # type: ignore[assignment]
    launch._launch_packed = launch_packed  # type: ignore[assignment]
    launch.device_props = lambda device: DEVICE  # type: ignore[assignment]
    _clear_plan_caches()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(nvrtc, name, value)
        for name, value in saved_launch.items():
            setattr(launch, name, value)
        _clear_plan_caches()


def _clear_plan_caches() -> None:
    from reference_kernels import launch

    launch.clear_plans()


def _weight(dtype: Any, rows: int, dim: int, offset: int) -> Any:
    """A meta tensor [rows, dim] whose data pointer lies ``offset`` bytes past 16."""
    import torch

    size = torch.empty((), dtype=dtype).element_size()
    skip = offset // size
    return torch.empty(rows * dim + skip, dtype=dtype, device="meta")[skip:].view(rows, dim)


def picks_of(combo: tuple[str, int, int, str, int, int, int]) -> dict[str, list[Launch]]:
    """The launches of each path for one combination."""
    import torch

    from reference_kernels import launch

    dtype_name, dim, offset, mode_name, length, batch, rows = combo
    dtype = getattr(torch, dtype_name)
    weight = _weight(dtype, rows, dim, offset)
    mode, _, extra = mode_name.partition("+")
    need_argmax = extra == "argmax"
    meta = {"device": "meta"}
    n = batch * length
    psw = torch.empty(n, dtype=dtype, **meta) if extra == "psw" else None
    out: dict[str, list[Launch]] = {}

    def run(path: str, call: Callable[[], object]) -> None:
        _clear_plan_caches()  # each call planned afresh: the table does not depend on its order
        RECORDED.clear()
        call()
        out[path] = list(RECORDED)

    fixed = torch.empty((batch, length), dtype=torch.int64, **meta)
    forward = {"num_bags": batch, "per_sample_weights": psw, "mode": mode, "padding_idx": -1,
               "need_argmax": need_argmax}
    run("fixed", lambda: launch.bag_forward(weight, fixed, None, **forward))
    flat32 = torch.empty(n, dtype=torch.int32, **meta)
    offsets = torch.empty(batch + 1, dtype=torch.int64, **meta)
    run("csr", lambda: launch.bag_forward(weight, flat32, offsets, **forward))
    flat64 = torch.empty(n, dtype=torch.int64, **meta)
    table_rows = torch.empty(TABLES, dtype=torch.int64, **meta)
    run("tbe", lambda: launch.bag_forward(weight, flat64, offsets, **forward, table_rows=table_rows))
    run("gather", lambda: launch.gather(weight, flat64))
    grad_out = _weight(dtype, batch, dim, offset)
    sorted_rows = torch.empty(n, dtype=torch.int32, **meta)
    bag_scale = torch.empty(batch, dtype=torch.float32, **meta) if mode == "mean" else None
    grad_weight = torch.empty((rows, dim), dtype=dtype, **meta)
    run("backward", lambda: launch.backward_passes(
        grad_out, sorted_rows, flat64, bag_of=None, bag_size=length, per_sample_weights=psw, bag_scale=bag_scale,
        padding_idx=-1, scale=1.0, grad_weight=grad_weight))
    return out


def table() -> dict[str, Any]:
    """The whole table: distinct define sets once, each row naming them by number."""
    defines: dict[str, int] = {}
    rows: list[list[Any]] = []
    with recording():
        for combo in combinations():
            row: list[Any] = list(combo)
            for path, launches in picks_of(combo).items():
                row.append([path, [[src, entry, defines.setdefault(text, len(defines)), grid, block]
                                   for src, entry, text, grid, block in launches]])
            rows.append(row)
    return {"device": {"sms": SMS, "arch": ARCH, "resident_blocks": "MIN_BLOCKS"},
            "defines": list(defines), "rows": rows}


def readable(data: dict[str, Any]) -> list[str]:
    """One line per combination with the defines spelt out (for a diff)."""
    names = data["defines"]
    lines = []
    for row in data["rows"]:
        key, paths = row[:7], row[7:]
        text = " | ".join(
            f"{path}: " + "; ".join(f"{src}:{entry} [{names[d]}] grid={grid} block={block}"
                                    for src, entry, d, grid, block in launches)
            for path, launches in paths)
        lines.append(f"{' '.join(map(str, key))} -> {text}")
    return lines


PATHS = ("fixed", "csr", "tbe", "gather", "backward")  # the order picks_of records them in


def _deltas(values: list[int]) -> list[int]:
    return [b - a for a, b in zip([0, *values], values, strict=False)]


def _sums(deltas: list[int]) -> list[int]:
    return list(itertools.accumulate(deltas))


def pack(data: dict[str, Any]) -> dict[str, Any]:
    """The table as stored: each distinct launch once, in columns (source, entry, defines, grid,
    block), and per path the launch numbers of every combination in ``combinations()`` order. The
    combination keys are left out (the order gives them), and numbers given out in first-seen order
    (launches, define sets) are stored as differences from the one before, which are mostly small:
    xz keeps the table at a fifth of the row-per-combination layout's size."""
    launches: dict[tuple[Any, ...], int] = {}
    picks: dict[str, list[list[int]]] = {path: [] for path in PATHS}
    for row in data["rows"]:
        assert [path for path, _ in row[7:]] == list(PATHS), row[:7]
        for path, recorded in row[7:]:
            picks[path].append([launches.setdefault(tuple(launch), len(launches)) for launch in recorded])
    columns = [list(column) for column in zip(*launches, strict=True)] if launches else [[]] * 5
    columns[2] = _deltas(columns[2])
    stored: dict[str, Any] = {}
    for path, numbers in picks.items():
        flat = _deltas([n for row in numbers for n in row])
        stored[path] = {"per_row": [len(row) for row in numbers], "deltas": flat}
    return {"device": data["device"], "defines": data["defines"], "combinations": len(data["rows"]),
            "launches": dict(zip(("source", "entry", "defines", "grid", "block"), columns, strict=True)),
            "picks": stored}


def unpack(packed: dict[str, Any]) -> dict[str, Any]:
    """The table as ``table()`` builds it, from its stored form."""
    columns = packed["launches"]
    launches = [list(launch) for launch in zip(columns["source"], columns["entry"], _sums(columns["defines"]),
                                               columns["grid"], columns["block"], strict=True)]
    keys = list(combinations())
    if len(keys) != packed["combinations"]:
        raise ValueError(f"{GOLDEN}: {packed['combinations']} combinations stored, the grid has {len(keys)}")
    per_path: dict[str, list[list[int]]] = {}
    for path in PATHS:
        flat = iter(_sums(packed["picks"][path]["deltas"]))
        per_path[path] = [[next(flat) for _ in range(count)] for count in packed["picks"][path]["per_row"]]
    rows = [[*key, *([path, [launches[n] for n in per_path[path][i]]] for path in PATHS)]
            for i, key in enumerate(keys)]
    return {"device": packed["device"], "defines": packed["defines"], "rows": rows}


def load() -> dict[str, Any]:
    with lzma.open(GOLDEN, "rt", encoding="utf-8") as fh:
        return unpack(json.load(fh))


def write(data: dict[str, Any]) -> None:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(pack(data), separators=(",", ":"))
    # xz, the strongest preset (the table was the tree's largest file); no time stamp in the
    # container, so the same table gives the same bytes
    with lzma.open(GOLDEN, "wb", preset=9 | lzma.PRESET_EXTREME) as fh:
        fh.write(text.encode("utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the golden table (else: compare)")
    args = parser.parse_args()
    data = table()
    if args.write:
        write(data)
        print(f"{len(data['rows'])} combinations, {len(data['defines'])} distinct define sets -> {GOLDEN}")
        return
    old, new = readable(load()), readable(data)
    changed = [(a, b) for a, b in zip(old, new, strict=False) if a != b]
    for a, b in changed[:20]:
        print(f"- {a}\n+ {b}")
    print(f"{len(changed)} of {len(new)} combinations differ")


if __name__ == "__main__":
    main()
