"""Charts of a suite run: ``python3 -m benchmarks charts --json RESULTS.json --out DIR``.

Reads the JSON that ``python3 -m benchmarks suite`` writes (``suite --charts DIR`` renders the
same figures at the end of a run) and writes into DIR:

- ``overview.png``: speedup per forward case, sorted, on a log axis with the 1.0 line and the
  geomean; cases below 1.0 are drawn red and named. The top panel is over FBGEMM's
  table-batched embedding where the run has FBGEMM figures (``vs_fbgemm``), the other over torch.
- ``group-<group>.png``, one per suite group present: each case's achieved compulsory bandwidth
  of ours, FBGEMM (where it has the op) and torch side by side, the copy ceiling as a dashed
  line and, as a black tick, what a plain copy of the case's own bytes reaches (launch floor
  included: no kernel moving those bytes does better).
- ``README.md``: the figures, one line each, and the headline numbers.

A panel holds at most ``MAX_PANEL`` cases. A larger group is split by the one or two name
parameters that give the fewest panels within that limit (the sweep by dim and layout, the 12
tables by Zipf alpha), so that every case keeps its own labelled bars with all three engines; a
heatmap would show one quantity per cell and lose the side-by-side comparison. Labels drop the
group's number and the words every case of the panel shares (those go into the panel title).

Exit codes: 0 written; 2 an unreadable, malformed or incomplete results file (the message names
it), or matplotlib missing. Results files from before FBGEMM was a peer (no ``fbgemm_*`` fields)
chart over torch only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

MAX_PANEL = 30  # cases per panel: 3 bars each stay >= 8 px thick at DPI within 1,600 px
DPI = 100
FONT_PT = 9  # 12.5 px at DPI 100
ROW_IN = 0.3  # inches per case (three bars and a gap)
PANEL_WIDTH_IN = 4.0
MAX_WIDTH_IN = 16.0
LISTED_LOSSES = 10  # cases below 1.0 named on the overview
INDEX_HEADING = "# Benchmark charts"  # first line of the README this module writes (and may overwrite)

COLOURS = {"ours": "#1f77b4", "FBGEMM": "#ff7f0e", "torch": "#8c8c8c"}
GROUP_TITLES = {
    "0-simple": "one 1M-row table, issue 3's case",
    "1-large": "one 5M-row table",
    "2-12tables": "12 tables",
    "3-2big": "two 10M-row tables",
    "4-sweep": "sweep over one 1M-row table",
    "5-dcnv2": "DLRM-DCNv2, 26 tables",
    "6-onehot": "unpooled one-hot gather",
    "8-widths": "four tables of one untuned width",
    "8-mixed": "tables of mixed widths in one module",
    "bwd": "backward",
}
REQUIRED = ("case", "group", "ours_us", "torch_us", "ours_gbps", "torch_gbps", "pct_copy", "speedup")


class ChartInputError(ValueError):
    """A results file (or list) that cannot be charted; the message names the file."""


@dataclass(frozen=True)
class Case:
    """The figures of one benchmark case that the charts show."""

    name: str
    group: str
    ours_gbps: float
    torch_gbps: float
    ceiling_gbps: float  # the copy ceiling of the process that measured this case
    speedup: float  # torch time / ours
    fbgemm_gbps: float | None = None
    vs_fbgemm: float | None = None  # FBGEMM time / ours: above 1 ours is faster
    same_size_copy_gbps: float | None = None  # a plain copy of the case's compulsory bytes

    @property
    def forward(self) -> bool:
        return self.group != "bwd"


@dataclass(frozen=True)
class Panel:
    """Cases drawn in one axes: the words they all share form the title, the rest their labels."""

    title: str
    cases: tuple[Case, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Written:
    """One file written, with the line the index gives it."""

    path: Path
    description: str


def _number(record: dict[str, Any], key: str) -> float | None:
    """A numeric field; None where it is absent, None or not finite (json writes NaN for a figure
    that could not be measured: that case is drawn without it, not refused)."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"field {key!r} is {value!r}, not a number")
    return float(value) if math.isfinite(value) else None


def case_from_record(record: dict[str, Any], copy_gbps: float) -> Case:
    """A Case from one result record (a dict of harness.Result's fields). The ceiling is the one
    the record's own percentages used (each worker process measures its own); FBGEMM's figures
    are taken when present and not None, derived from ``fbgemm_us`` where only it is there."""
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise KeyError(f"missing field(s) {', '.join(missing)}")
    if not isinstance(record["case"], str) or not isinstance(record["group"], str):
        raise TypeError("fields 'case' and 'group' must be strings")
    ours_gbps, pct = _number(record, "ours_gbps") or 0.0, _number(record, "pct_copy") or 0.0
    ceiling = 100 * ours_gbps / pct if pct > 0 else copy_gbps
    ours_us, fbgemm_us = _number(record, "ours_us"), _number(record, "fbgemm_us")
    compulsory = _number(record, "compulsory_bytes")
    fbgemm_gbps = _number(record, "fbgemm_gbps")
    if fbgemm_gbps is None and fbgemm_us and compulsory:
        fbgemm_gbps = compulsory / (fbgemm_us * 1e-6) / 1e9
    vs_fbgemm = _number(record, "vs_fbgemm")
    if vs_fbgemm is None and fbgemm_us and ours_us:
        vs_fbgemm = fbgemm_us / ours_us
    copy_pct = _number(record, "same_size_copy_pct")
    return Case(record["case"], record["group"], ours_gbps, _number(record, "torch_gbps") or 0.0, ceiling,
                _number(record, "speedup") or 0.0, fbgemm_gbps, vs_fbgemm,
                None if copy_pct is None or not math.isfinite(ceiling) else copy_pct * ceiling / 100)


def cases_from_records(records: Iterable[Any], copy_gbps: float, source: str) -> list[Case]:
    """Every record as a Case; a malformed one raises ChartInputError naming ``source`` and it."""
    cases = []
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ChartInputError(f"{source}: result {i} is not an object")
        try:
            cases.append(case_from_record(record, copy_gbps))
        except (KeyError, TypeError) as exc:
            name = record.get("case", "?")
            raise ChartInputError(f"{source}: result {i} ({name}): {exc.args[0]}") from exc
    return cases


def load(path: Path) -> tuple[list[Case], dict[str, Any]]:
    """The cases of a results file and its environment record (empty if it has none)."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ChartInputError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ChartInputError(f"{path}: not text: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ChartInputError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ChartInputError(f"{path}: not a suite results file (no 'results' list)")
    summary = data.get("summary") if isinstance(data.get("summary"), dict) else {}
    copy_gbps = summary.get("copy_ceiling_gbps") if isinstance(summary, dict) else None
    if not isinstance(copy_gbps, int | float) or isinstance(copy_gbps, bool) or copy_gbps <= 0:
        copy_gbps = float("nan")  # only needed by a case without a percentage of its own
    env = data.get("environment")
    return cases_from_records(data["results"], float(copy_gbps), str(path)), env if isinstance(env, dict) else {}


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def short_names(names: Sequence[str]) -> list[str]:
    """The names without the suite's leading group number ("4 d32 B1024 ..." -> "d32 B1024 ...")."""
    return [re.sub(r"^\d+\s+", "", n) for n in names]


def split_positions(names: Sequence[str], limit: int = MAX_PANEL) -> tuple[int, ...] | None:
    """Word positions whose values split the names into the fewest panels of at most ``limit``
    (one or two positions; ties go to the more even split, then the earlier position); () when
    no split is needed, None when none works (names of unequal length, or too many per value)."""
    if len(names) <= limit:
        return ()
    words = [n.split() for n in names]
    if len({len(w) for w in words}) != 1:
        return None
    varying = [i for i in range(len(words[0])) if 1 < len({w[i] for w in words}) <= 8]
    for size in (1, 2):
        best: tuple[int, int, tuple[int, ...]] | None = None
        for combo in combinations(varying, size):
            counts = Counter(tuple(w[i] for i in combo) for w in words).values()
            if max(counts) <= limit:
                key = (len(counts), max(counts) - min(counts), combo)
                best = key if best is None or key < best else best
        if best is not None:
            return best[2]
    return None


def common_words(names: Sequence[str]) -> list[str]:
    """Words that every name holds, in the order of the first name."""
    if not names:
        return []
    shared = set(names[0].split()).intersection(*(set(n.split()) for n in names[1:]))
    return [w for w in names[0].split() if w in shared]


def distinct_words(names: Sequence[str]) -> list[str]:
    """Each name without the words every name holds (the whole name if nothing is left)."""
    shared = set(common_words(names))
    return [" ".join(w for w in n.split() if w not in shared) or n for n in names]


def make_panel(cases: Sequence[Case], names: Sequence[str]) -> Panel:
    return Panel(" ".join(common_words(names)), tuple(cases), tuple(distinct_words(names)))


def panels(cases: Sequence[Case], limit: int = MAX_PANEL) -> list[Panel]:
    """The cases of one group in panels of at most ``limit`` (see split_positions); names that
    admit no split are cut into consecutive runs."""
    names = short_names([c.name for c in cases])
    positions = split_positions(names, limit)
    runs: list[Sequence[int]]
    if positions is None:
        runs = [range(i, min(i + limit, len(cases))) for i in range(0, len(cases), limit)]
    else:
        keyed: dict[tuple[str, ...], list[int]] = {}
        for i, n in enumerate(names):
            keyed.setdefault(tuple(n.split()[p] for p in positions), []).append(i)
        runs = list(keyed.values())
    return [make_panel([cases[i] for i in run], [names[i] for i in run]) for run in runs]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ChartInputError("the charts need matplotlib (pip install matplotlib, or the 'bench' extra)") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _engines(cases: Sequence[Case]) -> list[str]:
    return ["ours", "FBGEMM", "torch"] if any(c.fbgemm_gbps for c in cases) else ["ours", "torch"]


def _gbps(case: Case, engine: str) -> float:
    return {"ours": case.ours_gbps, "FBGEMM": case.fbgemm_gbps or 0.0, "torch": case.torch_gbps}[engine]


def group_figure(group: str, cases: Sequence[Case], path: Path) -> str:
    """Bandwidth bars of one group's cases, panel by panel; returns the index line."""
    plt = _pyplot()
    parts = panels(cases)
    engines = _engines(cases)
    known = [c.ceiling_gbps for c in cases if math.isfinite(c.ceiling_gbps)]
    ceiling = statistics.median(known) if known else None  # None: no percentage and no summary to derive it
    top = 1.06 * max([ceiling or 1.0, *(_gbps(c, e) for c in cases for e in engines)])
    rows = max(len(p.cases) for p in parts)
    columns = min(len(parts), 4)
    lines = math.ceil(len(parts) / columns)
    # Panels that label the same cases in the same order share one column of labels.
    shared = len({p.labels for p in parts}) == 1
    label_in = 0.075 * max(len(label) for p in parts for label in p.labels)
    width = min(MAX_WIDTH_IN, max(8.0, label_in * (1 if shared else columns) + 3.2 * columns))
    height = min(16.0, lines * (ROW_IN * rows + 0.6) + 1.0)
    with plt.rc_context({"font.size": FONT_PT}):
        fig, axes = plt.subplots(lines, columns, figsize=(width, height), squeeze=False, sharex=True,
                                 sharey=shared, layout="constrained")
        bar = 0.8 / len(engines)
        for ax, part in zip(axes.flat, parts, strict=False):
            ys = range(len(part.cases))
            for k, engine in enumerate(engines):
                offset = (k - (len(engines) - 1) / 2) * bar
                ax.barh([y + offset for y in ys], [_gbps(c, engine) for c in part.cases], height=bar,
                        color=COLOURS[engine], label=engine)
            copies = [(y, c.same_size_copy_gbps) for y, c in zip(ys, part.cases, strict=True) if c.same_size_copy_gbps]
            if copies:
                ax.plot([x for _, x in copies], [y for y, _ in copies], "k|", markersize=9, markeredgewidth=1.6,
                        label="a copy of the same bytes")
            if ceiling:
                ax.axvline(ceiling, color="k", linestyle="--", linewidth=1, label=f"copy ceiling {ceiling:.0f} GB/s")
            ax.set_yticks(list(ys), part.labels)
            ax.set_ylim(len(part.cases) - 0.5, -0.5)
            ax.set_xlim(0, top)
            ax.set_title(part.title, fontsize=FONT_PT)
            ax.grid(axis="x", alpha=0.3)
            ax.tick_params(axis="y", length=0, labelleft=not shared or ax in axes[:, 0])
        for ax in list(axes.flat)[len(parts):]:
            ax.set_visible(False)
        for ax in axes[-1]:
            ax.set_xlabel("compulsory bandwidth (GB/s)")
        drawn = dict(zip(*reversed(axes.flat[0].get_legend_handles_labels()), strict=True))
        labels = sorted(drawn, key=lambda label: engines.index(label) if label in engines else len(engines))
        fig.legend([drawn[label] for label in labels], labels, loc="outside lower center", ncol=len(labels),
                   frameon=False)
        fig.suptitle(f"{group}: {GROUP_TITLES.get(group, group)}, {len(cases)} cases", fontsize=FONT_PT + 2)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    titles = [p.title for p in parts]
    split = f" in {len(parts)} panels ({', '.join(distinct_words(titles))})" if len(parts) > 1 else ""
    return (f"{group} ({GROUP_TITLES.get(group, group)}): bandwidth of {', '.join(engines)}, "
            f"{len(cases)} cases{split}")


def _speedup_panel(ax: Any, cases: Sequence[Case], values: Sequence[float], peer: str, groups: list[str],
                   colours: dict[str, Any]) -> tuple[float, int]:
    """Sorted bars of ``values`` (ours against ``peer``) coloured by group; returns (geomean,
    cases below 1.0)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    xs = range(len(order))
    ys = [values[i] for i in order]
    losses = [i for i in order if values[i] < 1.0]
    # Bars grow from the 1.0 line: up where ours is faster, down (red edged) where it is slower.
    ax.bar(xs, [y - 1.0 for y in ys], bottom=1.0, width=1.0, color=[colours[cases[i].group] for i in order],
           edgecolor=["#d62728" if values[i] < 1.0 else "none" for i in order], linewidth=1.2)
    ax.set_yscale("log")
    low, high = min(ys + [0.9]) / 1.15, max(ys + [1.1]) * 1.6
    ax.set_ylim(low, high)
    ax.set_xlim(-0.6, len(order) - 0.4)
    if losses:
        ax.axhspan(low, 1.0, color="#d62728", alpha=0.08, linewidth=0)
    ax.axhline(1.0, color="k", linewidth=1)
    mean = geomean(values)
    ax.axhline(mean, color="k", linestyle="--", linewidth=1)
    ax.annotate(f"geomean {mean:.2f}×", (len(order) - 0.5, mean), xytext=(-4, 3), textcoords="offset points",
                ha="right", va="bottom", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_ylabel(f"{peer} time / ours (log)")
    ax.set_xlabel(f"{len(values)} forward cases, sorted" + (f"; {len(losses)} below 1.0 (red)" if losses else ""))
    ax.set_xticks([])
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.yaxis.set_minor_formatter(_times_formatter(minor=True))
    worst = ", ".join(f"{cases[i].name} {values[i]:.2f}×" for i in order[:1])
    ax.set_title(f"ours against {peer}: geomean {mean:.2f}×, worst {worst}", fontsize=FONT_PT + 1)
    if losses:
        listed = [f"{values[i]:.2f}×  {cases[i].name}" for i in losses[:LISTED_LOSSES]]
        if len(losses) > LISTED_LOSSES:
            listed.append(f"… and {len(losses) - LISTED_LOSSES} more")
        ax.text(0.01, 0.97, f"slower than {peer}:\n" + "\n".join(listed), transform=ax.transAxes, va="top",
                ha="left", fontsize=FONT_PT - 1, family="monospace",
                bbox={"facecolor": "white", "edgecolor": "#d62728", "alpha": 0.9})
    return mean, len(losses)


def _times_formatter(minor: bool = False) -> Any:
    from matplotlib.ticker import FuncFormatter

    def label(value: float, _pos: int) -> str:
        if minor and round(value / 10 ** math.floor(math.log10(value)), 6) not in (2, 3, 5, 7):
            return ""
        return f"{value:g}×"

    return FuncFormatter(label)


def overview_figure(cases: Sequence[Case], path: Path) -> str:
    """Speedup per forward case over FBGEMM (where measured) and over torch; returns the index line."""
    plt = _pyplot()
    forward = [c for c in cases if c.forward and c.speedup > 0]
    # as the suite's summary: FBGEMM's one launch against our one launch ("TBE"), not against
    # our one launch per table (those lines are for torch, which has no table-batched op)
    against_fbgemm = [c for c in forward if (c.vs_fbgemm or 0.0) > 0 and not c.name.endswith(" per-table")]
    groups = sorted({c.group for c in forward})
    palette = [plt.get_cmap("tab10")(i) for i in (0, 1, 2, 4, 5, 6, 8, 9, 7)]  # no red: red marks losses
    colours = {g: palette[i % len(palette)] for i, g in enumerate(groups)}
    peers: list[tuple[str, list[Case], list[float]]] = []
    if against_fbgemm:
        peers.append(("FBGEMM", against_fbgemm, [c.vs_fbgemm or 0.0 for c in against_fbgemm]))
    peers.append(("torch", forward, [c.speedup for c in forward]))
    height = 1.2 + 5.0 * len(peers)
    notes = []
    with plt.rc_context({"font.size": FONT_PT}):
        fig, axes = plt.subplots(len(peers), 1, figsize=(14, height), squeeze=False)
        for ax, (peer, chosen, values) in zip(axes[:, 0], peers, strict=True):
            mean, losses = _speedup_panel(ax, chosen, values, peer, groups, colours)
            notes.append(f"over {peer} geomean {mean:.2f}× on {len(values)} cases, {losses} below 1.0")
        handles = [plt.Rectangle((0, 0), 1, 1, color=colours[g]) for g in groups]
        fig.legend(handles, groups, loc="upper center", ncol=len(groups), frameon=False,
                   bbox_to_anchor=(0.5, 1 - 0.1 / height))
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return "speedup per forward case, sorted, log scale, 1.0 line and geomean: " + "; ".join(notes)


def write_index(out: Path, written: Sequence[Written], source: str, environment: dict[str, Any]) -> Path:
    env = ", ".join(f"{k} {environment[k]}".removeprefix("gpu ").removeprefix("time ")
                    for k in ("gpu", "torch", "time") if environment.get(k))
    lines = [INDEX_HEADING, "",
             f"Rendered by `python3 -m benchmarks charts` from `{source}`" + (f" ({env})." if env else "."),
             "Bandwidth is compulsory bytes (unique rows, indices, offsets, weights, output) over the GPU "
             "time; the copy ceiling (dashed) is a 4 GiB device-to-device copy in the same run, the black tick "
             "what a copy of the case's own bytes reaches. Speedup is the other engine's time over ours.", "",
             "| figure | what |", "| --- | --- |"]
    lines += [f"| [{w.path.name}]({w.path.name}) | {w.description} |" for w in written]
    index = out / "README.md"
    index.write_text("\n".join(lines) + "\n")
    return index


def chart_file(results: Path, out: Path) -> list[Path]:
    """Render the figures of a results file into ``out`` and index them; returns the files written.
    Raises ChartInputError on an unreadable or malformed file, one without results, or an index
    that would overwrite a README.md this module did not write."""
    cases, environment = load(results)
    return render(cases, out, str(results), environment)


def render(cases: Sequence[Case], out: Path, source: str, environment: dict[str, Any]) -> list[Path]:
    if not cases:
        raise ChartInputError(f"{source}: no results to chart")
    index = out / "README.md"
    if index.exists() and not index.read_text(errors="replace").startswith(INDEX_HEADING):
        raise ChartInputError(f"{index}: exists and was not written by the charts; choose another --out")
    _pyplot()  # fails before anything is written where matplotlib is missing
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if any(c.forward and c.speedup > 0 for c in cases):
        path = out / "overview.png"
        written.append(Written(path, overview_figure(cases, path)))
    by_group: dict[str, list[Case]] = {}
    for c in cases:
        by_group.setdefault(c.group, []).append(c)
    for group in sorted(by_group):
        path = out / f"group-{re.sub(r'[^A-Za-z0-9_.-]', '_', group)}.png"
        written.append(Written(path, group_figure(group, by_group[group], path)))
    return [w.path for w in written] + [write_index(out, written, source, environment)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks charts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True, type=Path, help="a results file of `python3 -m benchmarks suite`")
    p.add_argument("--out", required=True, type=Path, help="folder for the PNGs and their README.md (created)")
    args = p.parse_args(argv)
    try:
        files = chart_file(args.json, args.out)
    except ChartInputError as exc:
        print(f"benchmarks charts: {exc}", file=sys.stderr)
        return 2
    for f in files:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
