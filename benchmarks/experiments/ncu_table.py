"""Nsight Compute CSV (``ncu --csv --metrics ...``) of ``fbgemm_skew --ncu`` as a Markdown table.

    python3 -m benchmarks ncu_table CSV [--out FILE]

One row per profiled kernel, in profile order, under the case it belongs to (the ``== case``
lines the experiment prints into the same output; each case's kernels end with FBGEMM's):
time, DRAM bytes read, L1 and L2 hit rates, sectors per load request, achieved occupancy,
eligible warps per scheduler, issue-slot use, warp instructions and registers.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

COLUMNS = [  # (metric, header, scale)
    ("gpu__time_duration.sum", "µs", 1e-3),
    ("dram__bytes_read.sum", "DRAM read MB", 1e-6),
    ("l1tex__t_sector_hit_rate.pct", "L1 hit %", 1.0),
    ("lts__t_sector_hit_rate.pct", "L2 hit %", 1.0),
    ("sectors/request", "sectors/req", 1.0),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "occupancy %", 1.0),
    ("smsp__warps_eligible.avg.per_cycle_active", "eligible warps", 1.0),
    ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue %", 1.0),
    ("smsp__inst_executed.sum", "M warp instr", 1e-6),
    ("launch__registers_per_thread", "regs", 1.0),
]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def table(text: str) -> str:
    """The Markdown table of one ncu CSV output (with the experiment's case lines in it)."""
    cases: list[str] = []
    kernels: dict[str, dict[str, str]] = {}
    order: list[tuple[str, str, str]] = []  # (kernel id, kernel name, case)
    lines = [line for line in text.splitlines() if line.startswith('"') or line.startswith("== ")]
    header: list[str] | None = None
    for line in lines:
        if line.startswith("== "):
            cases.append(line[3:].split(":")[0])
            continue
        row = next(csv.reader([line]))
        if header is None:
            header = row
            continue
        record = dict(zip(header, row, strict=False))
        kid = record["ID"]
        if kid not in kernels:
            kernels[kid] = {}
            order.append((kid, record["Kernel Name"], ""))
        kernels[kid][record["Metric Name"]] = record["Metric Value"]
    # ncu prints its table after the run: each case's kernels, FBGEMM's last, in case order
    case_of, k = [], 0
    for _kid, name, _ in order:
        case_of.append(cases[k] if k < len(cases) else "")
        k += "split_embedding" in name
    order = [(kid, name, case) for (kid, name, _), case in zip(order, case_of, strict=True)]
    out = ["| case | kernel | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
           "|---|---|" + "---|" * len(COLUMNS)]
    for kid, name, case in order:
        m = kernels[kid]
        cells = []
        for metric, _, scale in COLUMNS:
            if metric == "sectors/request":
                req = number(m.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "0"))
                value = number(m.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "0")) / req if req else 0
            else:
                value = number(m[metric]) * scale if metric in m else float("nan")
            cells.append(f"{value:.1f}" if value < 1000 else f"{value:.0f}")
        who = "FBGEMM" if "split_embedding" in name else f"ours ({name.split('(')[0]})"
        out.append(f"| {case} | {who} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--out")
    args = p.parse_args(argv)
    try:
        text = Path(args.csv).read_text()
    except OSError as exc:
        print(f"ncu_table: {exc}", file=sys.stderr)
        return 2
    try:
        result = table(text)
    except (KeyError, ValueError, IndexError) as exc:
        print(f"ncu_table: {args.csv}: not an ncu --csv output with the expected metrics ({exc})", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(result)
    else:
        print(result, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
