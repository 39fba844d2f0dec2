"""CPU tests for reference_kernels: the kernels compile (nvcc and NVRTC), the launch
configuration, the disk cache, the API's argument checking and a cheap import."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import reference_kernels
from reference_kernels import KERNEL_DIR, KERNEL_SOURCES
from reference_kernels.plan import DeviceProps, RowTiling, Variant
from reference_kernels.tuning import Tuning
from tests.kernels import nvcc_sweep

KNOBS = Tuning()  # the defaults (not the environment's overrides)
# An H100/H200-like device: 132 SMs, Hopper's per-SM limits.
HOPPER = DeviceProps(sms=132, arch=90, max_threads_per_sm=2048, max_blocks_per_sm=32, regs_per_sm=65536,
                     smem_per_sm=228 << 10, smem_reserved_per_block=1 << 10)


def _variant(code: int, mode: str, psw: bool, argmax: bool, tiling: RowTiling, index_type: str = "i64") -> Variant:
    return Variant(weight_dtype=code, index_type=index_type, mode=mode, has_psw=psw, need_argmax=argmax,
                   tiling=tiling)

# Representative compile-time variants of every kernel (the defaults of each file first).
NVCC_VARIANTS: dict[str, list[str]] = {
    "embedding_bag_forward.cu": [
        "",
        "-DUNROLL=16",
        "-DWEIGHT_DTYPE=1 -DVEC=8 -DROW_LANES=16 -DUNROLL=16 -DINDEX_T=int",
        "-DWEIGHT_DTYPE=2 -DVEC=8 -DROW_LANES=16 -DMODE=2 -DWRITE_ARGMAX=1 -DUNROLL=8 -DMIN_BLOCKS=2",
        "-DWEIGHT_DTYPE=2 -DVEC=8 -DROW_LANES=8 -DCHUNKS=3 -DUNROLL=4 -DMIN_BLOCKS=2",
        "-DMODE=1 -DUNROLL=16 -DMIN_BLOCKS=2",
        "-DMODE=1 -DVEC=4 -DROW_LANES=16 -DCHUNKS=3 -DUNROLL=4",
        "-DHAS_PSW=1 -DVEC=1 -DROW_LANES=4 -DTEAM=32 -DUNROLL=4",
        "-DBAGS_PER_STEP=8 -DBAG_LEN=1 -DMIN_BLOCKS=3",
        "-DBAGS_PER_STEP=2 -DBAG_LEN=3 -DWEIGHT_DTYPE=1 -DVEC=8 -DROW_LANES=16 -DTEAM=16 -DHAS_PSW=1 -DINDEX_T=int",
    ],
    "embedding_bag_backward.cu": ["", "-DWEIGHT_DTYPE=2 -DVEC=8 -DROW_LANES=16 -DHAS_PSW=1 -DHAS_SCALE=1",
                                  "-DBACKWARD_PASS=1 -DVEC=4 -DROW_LANES=16 -DCHUNKS=3 -DUNROLL=1",
                                  "-DBACKWARD_PASS=1 -DVEC=4 -DROW_LANES=16 -DCHUNKS=3 -DASYNC_AHEAD=3 -DBLOCK=128 "
                                  "-DMIN_BLOCKS=5 -DHAS_PSW=1 -DROW_T=int",
                                  "-DBACKWARD_PASS=1 -DWEIGHT_DTYPE=1 -DVEC=8 -DROW_LANES=32 -DCHUNKS=2 "
                                  "-DASYNC_AHEAD=3 -DBLOCK=128 -DMIN_BLOCKS=4 -DGRAD_F32=1 -DHAS_SCALE=1",
                                  "-DBACKWARD_PASS=3 -DFILL_BYTES=2 -DINDEX_T=int",
                                  "-DBACKWARD_PASS=1 -DROW_T=int -DCHUNK_POS=32 -DHAS_SCALE=1 -DSTREAMING_ROWS=0",
                                  "-DBACKWARD_PASS=1 -DGRAD_F32=1 -DWEIGHT_DTYPE=1 -DVEC=8 -DROW_LANES=16 -DROW_T=int",
                                  "-DBACKWARD_PASS=2 -DGRAD_F32=1 -DWEIGHT_DTYPE=2 -DVEC=8 -DROW_LANES=16 -DROW_T=int",
                                  "-DBACKWARD_PASS=1 -DFUSED_OPT=1 -DOPTIMIZER=2 -DVEC=4 -DROW_LANES=16 -DCHUNKS=3 "
                                  "-DUNROLL=1 -DROW_T=int",
                                  "-DBACKWARD_PASS=1 -DFUSED_OPT=1 -DOPTIMIZER=1 -DWEIGHT_DTYPE=2 -DVEC=8 "
                                  "-DROW_LANES=16 -DSTOCHASTIC=1 -DROW_T=int",
                                  "-DBACKWARD_PASS=1 -DFUSED_OPT=1 -DOPTIMIZER=0 -DROW_T=int -DUNROLL=4",
                                  "-DBACKWARD_PASS=2 -DFUSED_OPT=1 -DOPTIMIZER=1 -DWEIGHT_DTYPE=1 -DVEC=8 "
                                  "-DROW_LANES=8 -DSTOCHASTIC=1",
                                  # the combine pass as plan_backward compiles it (blocks of 512, 256)
                                  "-DBACKWARD_PASS=2 -DBLOCK=512 -DCOMBINE_ITEMS=16 -DROW_T=int -DCHUNK_POS=64",
                                  "-DBACKWARD_PASS=2 -DBLOCK=512 -DCOMBINE_ITEMS=32 -DVEC=4 -DROW_LANES=16 -DCHUNKS=3",
                                  "-DBACKWARD_PASS=2 -DBLOCK=512 -DCOMBINE_ITEMS=32 -DVEC=4 -DROW_LANES=1",
                                  "-DBACKWARD_PASS=2 -DFUSED_OPT=1 -DOPTIMIZER=1 -DBLOCK=512 -DCOMBINE_ITEMS=16 "
                                  "-DROW_T=int",
                                  "-DBACKWARD_PASS=2 -DFUSED_OPT=1 -DOPTIMIZER=2 -DWEIGHT_DTYPE=1 -DVEC=8 -DCHUNKS=4 "
                                  "-DBLOCK=256 -DCOMBINE_ITEMS=8 -DROW_T=int"],
    "embedding_gather.cu": ["", "-DCHUNK_BYTES=2 -DROW_LANES=4 -DINDEX_T=int"],
    # as quantized_tbe.LAUNCH_SHAPE compiles it: one variant a format, poolings, outputs, weights
    "quantized_forward.cu": ["-DTABLE_FORMAT=0 -DMIN_BLOCKS=4", "-DTABLE_FORMAT=1 -DPOOLING=1 -DMIN_BLOCKS=4",
                             "-DTABLE_FORMAT=2 -DOUT_DTYPE=1 -DINDEX64=0 -DMIN_BLOCKS=3",
                             "-DTABLE_FORMAT=3 -DPSW=1 -DOUT_DTYPE=2 -DMIN_BLOCKS=2",
                             "-DTABLE_FORMAT=4 -DPOOLING=2 -DPSW=1 -DMIN_BLOCKS=3",
                             "-DTABLE_FORMAT=5 -DPOOLING=1 -DOUT_DTYPE=1 -DMIN_BLOCKS=3",
                             "-DTABLE_FORMAT=6 -DPSW=1 -DOUT_DTYPE=2 -DMIN_BLOCKS=3",
                             "-DTABLE_FORMAT=2 -DPIPELINE=1 -DROWS_IN_FLIGHT=2 -DMIN_BLOCKS=3",
                             "-DTABLE_FORMAT=3 -DPIPELINE=1 -DROWS_IN_FLIGHT=2 -DMIN_BLOCKS=2",
                             # the 4-byte-word layouts quantized_suite --compare times (LANE_BYTES=4)
                             "-DTABLE_FORMAT=2 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=8 -DMIN_BLOCKS=5",
                             "-DTABLE_FORMAT=2 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=4 -DMIN_BLOCKS=6 -DINDEX64=0 "
                             "-DOUT_DTYPE=1",
                             "-DTABLE_FORMAT=3 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=4 -DMIN_BLOCKS=5 -DPSW=1 -DOUT_DTYPE=2",
                             "-DTABLE_FORMAT=3 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=8 -DMIN_BLOCKS=4 -DINDEX64=0 "
                             "-DOUT_DTYPE=1",
                             "-DTABLE_FORMAT=3 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=4 -DPIPELINE=1 -DMIN_BLOCKS=4 "
                             "-DPOOLING=2",
                             "-DTABLE_FORMAT=4 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=4 -DMIN_BLOCKS=6 -DPOOLING=2",
                             "-DTABLE_FORMAT=5 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=8 -DMIN_BLOCKS=5 -DPOOLING=1",
                             "-DTABLE_FORMAT=6 -DLANE_BYTES=4 -DROWS_IN_FLIGHT=4 -DMIN_BLOCKS=6 -DOUT_DTYPE=2 -DPSW=1"],
    "index_check.cu": ["", "-DINDEX_T=int", "-DCLEAN_T=int", "-DINDEX_T=int -DCLEAN_T=int -DTABLE_CAP=64",
                       "-DCLEAN_T=int -DTABLE_CAP=4096", "-DTABLE_CAP=-1"],
    "lookup_prepare.cu": ["", "-DINDEX_T=int -DMEAN=1", "-DKEY_T=i64 -DMEAN=1"],
    "radix_sort.cu": [""],
    "sparse_update.cu": ["", "-DOPTIMIZER=1 -DROW_T=int -DITERS=2", "-DOPTIMIZER=2 -DWEIGHT_DTYPE=1 -DSTOCHASTIC=1",
                         "-DOPTIMIZER=1 -DWEIGHT_DTYPE=2 -DSTOCHASTIC=1 -DVEC=2 -DITERS=3"],
}
# Entries that need sm_90 (the bulk-copy engine): compiled for sm_90 only. The bulk gather
# and the one-row-bag entry at the row sizes the launcher admits (128 B to 4 KB: 32 rows to
# 1 row per stage).
SM90_VARIANTS: dict[str, list[str]] = {
    "embedding_gather.cu": ["-DBULK_ROWS=32 -DROW_BYTES=128 -DBLOCK=128 -DINDEX_T=int",
                            "-DBULK_ROWS=8 -DROW_BYTES=512 -DBLOCK=128",
                            "-DBULK_ROWS=1 -DROW_BYTES=4096 -DBLOCK=128",
                            "-DBULK_ROWS=1 -DROW_BYTES=4000 -DBLOCK=128 -DINDEX_T=int",
                            # embedding_bag_forward_bulk: one-row CSR bags, each mode and dtype once
                            "-DBULK_ROWS=32 -DROW_BYTES=128 -DBLOCK=128 -DINDEX_T=int -DBULK_BAGS=1 -DMODE=2",
                            "-DBULK_ROWS=8 -DROW_BYTES=512 -DBLOCK=128 -DBULK_BAGS=1 -DMODE=1 -DWEIGHT_DTYPE=2",
                            "-DBULK_ROWS=1 -DROW_BYTES=4096 -DBLOCK=128 -DBULK_BAGS=1 -DMODE=0 -DWEIGHT_DTYPE=1"],
}


def _nvcc() -> str | None:
    return shutil.which("nvcc")


def _ptxas_report(output: str) -> str:
    regs = re.findall(r"Used (\d+) registers", output)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", output)
    return f"registers={','.join(regs)} spills(stores,loads)={spills}"


def compile_problem(label: str, proc: subprocess.CompletedProcess[str],
                    spill_allowed: bool = False) -> str | None:
    """What is wrong with one sweep compile, None when nothing is: a failed compile shows nvcc's
    own error (the end of its output), not an empty register report; else a spill, with the report."""
    output = proc.stderr + proc.stdout
    if proc.returncode != 0:
        return f"{label}: nvcc exited {proc.returncode}:\n{output.strip()[-2000:]}"
    if re.search(r"[1-9]\d* bytes spill (stores|loads)", output) and not spill_allowed:
        return f"{label}: spills ({_ptxas_report(output)})"
    return None


def test_a_failed_sweep_compile_shows_nvccs_error() -> None:
    failed = subprocess.CompletedProcess(["nvcc"], 2, "", 'x.cu(3): error: identifier "undefined_thing" is undefined\n')
    problem = compile_problem("x.cu sm_90 -DA=1", failed)
    assert problem is not None and "nvcc exited 2" in problem and 'identifier "undefined_thing"' in problem
    spilled = subprocess.CompletedProcess(["nvcc"], 0, "", "ptxas info: Used 96 registers, 8 bytes spill stores, "
                                                            "8 bytes spill loads\n")
    assert "spills (registers=96" in (compile_problem("x.cu", spilled) or "")
    assert compile_problem("x.cu", spilled, spill_allowed=True) is None


def _compile(job: nvcc_sweep.Job, out_dir: Path) -> subprocess.CompletedProcess[str]:
    cmd = ["nvcc", "-std=c++17", "-cubin", f"-arch={job.arch}", "-Xptxas", "-v", *job.flags.split(),
           "-o", str(out_dir / f"{job.key}.cubin"), str(KERNEL_DIR / job.source)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


SpillAllowance = Callable[[str, str], bool]  # (flags, ptxas output) -> the spill is one measured faster


def _sweep(test: str, jobs: list[nvcc_sweep.Job], tmp_path: Path, allowed: SpillAllowance | None = None) -> None:
    """Compile the jobs this run selects (tests/kernels/nvcc_sweep.py: what changed plus a sample,
    or all of them), print each one's registers and spills (pytest -s) and fail on any problem."""
    chosen = nvcc_sweep.select(test, jobs)
    failures, passed = [], []
    with ThreadPoolExecutor(max_workers=nvcc_sweep.workers()) as pool:
        for job, proc in zip(chosen, pool.map(lambda job: _compile(job, tmp_path), chosen), strict=True):
            print(f"{job.source:28s} {job.arch} [{job.flags or 'defaults'}] {_ptxas_report(proc.stderr + proc.stdout)}")
            spill_allowed = allowed is not None and allowed(job.flags, proc.stderr)
            problem = compile_problem(f"{job.source} {job.arch} {job.flags}", proc, spill_allowed=spill_allowed)
            if problem is None:
                nvcc_sweep.remember([job])  # at once: an interrupted sweep keeps what it proved
                passed.append(job)
            else:
                failures.append(problem)
    nvcc_sweep.record(test, jobs, passed)
    assert not failures, "\n".join(failures)


@pytest.mark.nvcc_sweep
@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not on PATH")
def test_nvcc_compiles_every_kernel_for_sm80_and_sm90(tmp_path: Path) -> None:
    """Every .cu file (all listed variants) compiles with nvcc for sm_80 and sm_90 (the bulk
    gather for sm_90 only), without spills; registers and spills are printed (pytest -s) for
    the resource report."""
    assert set(NVCC_VARIANTS) == set(KERNEL_SOURCES)
    jobs = [nvcc_sweep.Job(src, flags, arch) for src, variants in NVCC_VARIANTS.items() for flags in variants
            for arch in ("sm_80", "sm_90")]
    jobs += [nvcc_sweep.Job(src, flags, "sm_90") for src, variants in SM90_VARIANTS.items() for flags in variants]
    source, flags, arch, limit = INDEX_CHECK_SPILL
    spilling = [job for job in jobs if (job.source, job.flags, job.arch) == (source, flags, arch)]
    assert len(spilling) == 1
    _sweep("every_kernel", [job for job in jobs if job not in spilling], tmp_path)
    allowed = nvcc_sweep.Job(source, flags, arch, f"spills allowed: {limit}")
    _sweep("every_kernel_allowed_spill", [allowed], tmp_path, lambda _flags, ptxas: _spilled(ptxas) <= limit)


# The one variant allowed to spill in the sweep above, and how many bytes: ptxas spills 4 bytes at
# 40 registers in this index check pass since its bag test also requires offsets[0] == 0 (torch's
# rule). Four other spellings of the same test were tried: each moved a spill to another variant.
INDEX_CHECK_SPILL = ("index_check.cu", "-DINDEX_T=int -DCLEAN_T=int -DTABLE_CAP=64", "sm_90", 4)


def _spilled(ptxas: str) -> int:
    return max((int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", ptxas)), default=0)


def _launcher_picks() -> list[str]:
    """The forward variants the launcher itself picks with more than two blocks per SM (short
    bags: fewer rows in flight, a tighter register cap), and every short-bag and segmented
    kernel variant, one per register-relevant shape."""
    from reference_kernels import plan

    picks: dict[tuple[object, ...], str] = {}
    for code, size in ((0, 4), (1, 2), (2, 2)):
        for dim in (20, 32, 64, 128, 192, 200, 256, 392, 520, 776):
            tiling = plan.RowTiling.for_row(dim, plan.vector_width(dim, size, 0))
            for mode, psw, argmax in (("sum", 0, 0), ("sum", 1, 0), ("mean", 0, 0), ("max", 0, 1), ("max", 0, 0)):
                variant = _variant(code, mode, bool(psw), bool(argmax), tiling)
                for avg_len in (1, 2, 3, 4, 8, 16, 32, 64, 150):
                    for pos32 in (True, False):
                        d = plan.forward_defines(variant, avg_len=avg_len, pos32=pos32, tuning=KNOBS)
                        shape = tuple(d[k] for k in ("WEIGHT_DTYPE", "MODE", "HAS_PSW", "VEC", "ROW_LANES", "CHUNKS",
                                                     "UNROLL", "MIN_BLOCKS", "POS32", "PERSISTENT"))
                        if int(d["MIN_BLOCKS"]) > 2:  # type: ignore[call-overload]
                            picks.setdefault(shape, " ".join(f"-D{k}={v}" for k, v in d.items()))
                        if pos32 and mode != "max":  # the variant that checks its indices (plan_checked_bag_forward)
                            checked = {**d, "CHECK": 1, "MIN_BLOCKS": plan.checked_min_blocks(
                                int(d["MIN_BLOCKS"]))}  # type: ignore[call-overload]
                            if int(checked["MIN_BLOCKS"]) > 2:
                                picks.setdefault(("checked", *shape),
                                                 " ".join(f"-D{k}={v}" for k, v in checked.items()))
                    short = plan.short_bag_defines(variant, bag_len=avg_len, tuning=KNOBS)
                    if short is not None:  # the short-bag kernel: every pick, whatever its occupancy
                        key = ("short",) + tuple(short[k] for k in ("WEIGHT_DTYPE", "MODE", "HAS_PSW", "WRITE_ARGMAX",
                                                                    "VEC", "CHUNKS", "BAGS_PER_STEP", "BAG_LEN"))
                        picks.setdefault(key, " ".join(f"-D{k}={v}" for k, v in short.items()))
                    segmented = plan.segmented_defines(variant, avg_len=avg_len, tuning=KNOBS)
                    if segmented is not None:  # the segmented kernel: every pick too
                        key = ("segmented",) + tuple(segmented[k] for k in (
                            "WEIGHT_DTYPE", "MODE", "HAS_PSW", "WRITE_ARGMAX", "VEC", "CHUNKS", "UNROLL",
                            "SEGMENT_BAGS"))
                        picks.setdefault(key, " ".join(f"-D{k}={v}" for k, v in segmented.items()))
    return list(picks.values())


@pytest.mark.nvcc_sweep
@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not on PATH")
def test_high_occupancy_variants_the_launcher_picks_do_not_spill(tmp_path: Path) -> None:
    """Short bags get fewer rows in flight and 3-4 blocks per SM (a 64-85 register cap): a
    spill there would cost more than the occupancy buys, so every such pick is compiled."""
    picks = _launcher_picks()
    assert len(picks) > 10
    _assert_no_spills("launcher_picks", picks, tmp_path)


def _assert_no_spills(test: str, picks: list[str], tmp_path: Path) -> None:
    """Every forward pick (its flags) compiles for sm_90 without a spill not measured faster."""
    criterion = f"spills allowed: {sorted((sorted(required), limit) for required, limit in MEASURED_SPILLS)}"
    jobs = [nvcc_sweep.Job("embedding_bag_forward.cu", flags, "sm_90", criterion) for flags in picks]
    _sweep(test, jobs, tmp_path, _measured_spill)


@pytest.mark.nvcc_sweep
@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not on PATH")
def test_table_columns_variants_do_not_spill(tmp_path: Path) -> None:
    """A width of a mixed-width module takes its plan's kernel with TABLE_COLS (per-table output
    columns and offsets' tables: a few more instructions per bag): every segmented and general
    pick above compiles with it without a spill the plain pick does not have."""
    picks = [_table_columns_flags(flags) for flags in _launcher_picks()
             if "BAGS_PER_STEP" not in flags and "CHECK=1" not in flags]
    assert len(picks) > 100
    _assert_no_spills("table_columns", picks, tmp_path)


def _table_columns_flags(flags: str) -> str:
    """A pick's flags as a width of a mixed-width module compiles it (plan.with_table_columns)."""
    from reference_kernels import plan

    pairs = (flag.removeprefix("-D").split("=", 1) for flag in flags.split())
    defines = tuple((name, int(value) if value.lstrip("-").isdigit() else value) for name, value in pairs)
    entry = "embedding_bag_forward_segmented" if "-DSEGMENT_BAGS" in flags else "embedding_bag_forward"
    call = plan.BagCall(weight_dtype=0, elem_bytes=4, dim=128, num_rows=10, weight_align=0, out_aligned=True,
                        index_type="i64", bag_size=0, num_indices=10, num_bags=2, tables=2, table_batched=True,
                        mode="sum", has_psw="-DHAS_PSW=1" in flags, need_argmax=False, has_padding=False,
                        out_width=300)
    picked = plan.with_table_columns(plan.Plan(plan.FORWARD, entry, defines, 1), call)
    return " ".join(f"-D{k}={v}" for k, v in picked.defines)


# Picks that spill and were measured faster than the spill-free pick they replaced
# (docs/perf/change-51.md): (the defines that identify the pick, the most spill bytes allowed).
MEASURED_SPILLS: list[tuple[frozenset[str], int]] = [
    # the segmented kernel over 16-bit rows with per-sample weights at 4 blocks per SM: DCNv2
    # 1.02-1.24x FBGEMM at 3 blocks, 1.03-1.28x at 4 (Zipf 1.2: 0.93 -> 1.03)
    (frozenset({"-DSEGMENT_BAGS", "-DHAS_PSW=1", "-DMIN_BLOCKS=4"}), 96),
]


def _measured_spill(flags: str, ptxas: str) -> bool:
    spilled = max((int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", ptxas)), default=0)
    defines = {flag.split("=")[0] if flag.startswith("-DSEGMENT_BAGS") else flag for flag in flags.split()}
    weight16 = "-DWEIGHT_DTYPE=0" not in defines
    return any(required <= defines and weight16 and spilled <= limit for required, limit in MEASURED_SPILLS)



def _nvrtc_available() -> bool:
    try:
        from reference_kernels import nvrtc

        nvrtc.nvrtc_version()
        return True
    except Exception:  # bindings or the NVRTC library missing
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_available(), reason="cuda-bindings / NVRTC not installed")


@needs_nvrtc
# The widest rows compile the most variants (5-10 s each on two cores): the slow set compiles them.
@pytest.mark.parametrize("dim", [1, 3, 128, *(pytest.param(d, marks=pytest.mark.slow) for d in (192, 1000))])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_nvrtc_compiles_the_variants_the_launcher_picks(mode: str, dim: int) -> None:
    from reference_kernels import nvrtc, plan

    vec = plan.vector_width(dim, 2, 0)
    tiling = plan.RowTiling.for_row(dim, vec)
    variant = _variant(1, mode, mode == "sum", mode == "max", tiling, "int")
    for avg_len in (1, 20):
        defines = plan.forward_defines(variant, avg_len=avg_len, tuning=KNOBS)
        cubin = nvrtc.compile_cubin("embedding_bag_forward.cu", nvrtc.compile_options("sm_90", defines))
        assert cubin[:4] == b"\x7fELF"
    short = plan.short_bag_defines(_variant(1, mode, mode == "sum", False, tiling, "int"), bag_len=1, tuning=KNOBS)
    assert short is not None  # without argmax, every width takes the short-bag kernel for 1-row bags
    cubin = nvrtc.compile_cubin("embedding_bag_forward.cu", nvrtc.compile_options("sm_90", short))
    assert cubin[:4] == b"\x7fELF"
    bulk = plan.bulk_gather_plan(row_bytes=dim * 4, num_indices=1000, aligned=True, device=HOPPER,
                                  tuning=KNOBS)  # float32 rows
    if bulk is not None:
        defines = {"INDEX_T": "int", "BULK_ROWS": bulk.rows, "ROW_BYTES": dim * 4, "BLOCK": plan.BULK_BLOCK}
        cubin = nvrtc.compile_cubin("embedding_gather.cu", nvrtc.compile_options("sm_90", defines))
        assert cubin[:4] == b"\x7fELF"
    segmented = plan.segmented_defines(_variant(1, mode, False, False, tiling, "int"), avg_len=2, tuning=KNOBS)
    # general kernel instead where a team is too narrow for two bags' offsets
    if tiling.row_lanes >= 4:
        assert segmented is not None
        cubin = nvrtc.compile_cubin("embedding_bag_forward.cu", nvrtc.compile_options("sm_90", segmented))
        assert cubin[:4] == b"\x7fELF"


@needs_nvrtc
def test_nvrtc_compiles_the_preparation_variants_the_launcher_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table-batched backward's preparation (lookup_prepare.cu): the launcher asks for a
    variant per index type, key type and mode; the two farthest apart compile with NVRTC here
    (int32 indices and keys with mean's bag scales; int64 indices and keys, sum), every one in
    the nvcc sweep (NVCC_VARIANTS)."""
    import torch

    from reference_kernels import launch, nvrtc

    asked: dict[str, dict[str, object]] = {}
    monkeypatch.setattr(nvrtc, "get_function", lambda filename, name, defines, device: asked.setdefault(
        f"{filename} {sorted(defines.items())}", defines) and name)
    monkeypatch.setattr(launch, "_launch_packed", lambda *args: None)
    monkeypatch.setattr(launch, "device_props", lambda device: HOPPER)
    launch.clear_plans()
    try:
        for dtype in (torch.int32, torch.int64):
            indices, offsets = torch.empty(50, dtype=dtype, device="meta"), torch.empty(9, dtype=dtype, device="meta")
            table_rows = torch.empty(2, dtype=torch.int64, device="meta")
            for num_rows, mean in ((1000, False), (1000, True), (2**31, False), (2**31, True)):
                launch.prepare_table_lookups(indices, offsets, table_rows, num_rows=num_rows, mean=mean, sentinel=-1)
    finally:
        launch.clear_plans()
    assert len(asked) == 8
    farthest = (("int", "int", 1), ("i64", "i64", 0))
    extremes = [d for d in asked.values() if (d["INDEX_T"], d["KEY_T"], d["MEAN"]) in farthest]
    assert len(extremes) == 2
    for defines in extremes:
        cubin = nvrtc.compile_cubin("lookup_prepare.cu", nvrtc.compile_options("sm_90", defines))
        assert cubin[:4] == b"\x7fELF"


@needs_nvrtc
def test_nvrtc_compiles_the_sort_and_the_launcher_sizes_its_passes_by_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """radix_sort.cu compiles with NVRTC; ``sort_rows`` launches the zeroing of its control words
    (every pass's totals, tile counter and look-back words, two to a thread), every pass's digit
    totals, then a onesweep pass per 8 bits of the largest key (the sentinel row included), a tile per 1,536
    keys (3,072 from RADIX_SMALL_BELOW keys on), up to 31 bits (int32 keys); fewer than
    RADIX_MIN_KEYS keys take torch.sort."""
    import torch

    from reference_kernels import launch, nvrtc

    cubin = nvrtc.compile_cubin("radix_sort.cu", nvrtc.compile_options("sm_90", {"BLOCK": 256}))
    assert cubin[:4] == b"\x7fELF"
    launched: list[tuple[str, int]] = []
    monkeypatch.setattr(nvrtc, "get_function", lambda filename, name, defines, device: name)
    monkeypatch.setattr(launch, "_launch_packed", lambda index, fn, grid, *rest: launched.append((fn, grid)))
    monkeypatch.setattr(launch, "_on_gpu", lambda t: True)
    launch.clear_plans()
    try:
        launch.sort_rows(torch.zeros(launch.RADIX_MIN_KEYS - 1, dtype=torch.int32), 1000)
        assert launched == []  # fewer keys: torch.sort
        monkeypatch.setattr(launch, "RADIX_MIN_KEYS", 1)
        for max_key, passes in ((1, 1), (255, 1), (256, 2), (4_000_000, 3), (2**24 - 1, 3), (2**24, 4),
                                (40_000_000, 4), (2**31 - 2, 4)):
            launched.clear()
            launch.sort_rows(torch.zeros(10_000, dtype=torch.int32), max_key)
            assert [fn for fn, _ in launched] == ["radix_zero", "radix_histograms"] + ["radix_onesweep"] * passes
            words = 4 * 257 + passes * 7 * 256
            assert [grid for _, grid in launched] == [-(-words // 512)] + [7] * (passes + 1)  # ceil(10,000 / 1,536)
        launched.clear()
        launch.sort_rows(torch.zeros(launch.RADIX_SMALL_BELOW, dtype=torch.int32), 2**24)
        assert [grid for _, grid in launched] == [175] + [86] * 5  # ceil(262,144 / 3,072)
    finally:
        launch.clear_plans()


@needs_nvrtc
def test_disk_cache_is_keyed_by_source_options_and_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reference_kernels import nvrtc

    monkeypatch.setenv("REFERENCE_KERNELS_CACHE", str(tmp_path))
    opts90 = nvrtc.compile_options("sm_90", {"INDEX_T": "int"})
    key, cubin = nvrtc.cached_cubin("index_check.cu", opts90)
    assert (tmp_path / f"{key}.cubin").read_bytes() == cubin
    hits = nvrtc.STATS.cache_hits
    assert nvrtc.cached_cubin("index_check.cu", opts90) == (key, cubin)
    assert nvrtc.STATS.cache_hits == hits + 1
    other_arch = nvrtc.cache_key("index_check.cu", nvrtc.compile_options("sm_80", {"INDEX_T": "int"}))
    other_define = nvrtc.cache_key("index_check.cu", nvrtc.compile_options("sm_90", {"INDEX_T": "i64"}))
    assert len({key, other_arch, other_define}) == 3


@needs_nvrtc
def test_nvrtc_error_carries_the_compiler_log() -> None:
    from reference_kernels import nvrtc

    with pytest.raises(nvrtc.KernelCompileError, match="WEIGHT_DTYPE must be"):
        nvrtc.compile_cubin("embedding_bag_forward.cu", nvrtc.compile_options("sm_90", {"WEIGHT_DTYPE": 7}))


def test_import_does_not_load_torch_or_cuda_bindings() -> None:
    code = ("import sys, reference_kernels; "
            "print(sorted(m for m in ('torch', 'cupy', 'cuda', 'cuda.core', 'cuda.bindings') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_backward_chunk_fills_the_gpu_before_it_lengthens() -> None:
    from reference_kernels.plan import backward_chunk

    assert backward_chunk(2048 * 150, 32, 132, KNOBS) == 32  # suite 1: 9600 teams
    assert backward_chunk(65536 * 32 * 2, 32, 132, KNOBS) == 128  # suite 3: 32768 teams
    assert backward_chunk(40 * 132 * 64, 32, 132, KNOBS) == 64
    assert backward_chunk(40 * 132 * 64 - 1, 32, 132, KNOBS) == 32
    assert backward_chunk(1, 32, 132, KNOBS) == 32
    # narrow rows: four teams of 8 lanes to a warp, so a chunk needs four times the positions
    assert backward_chunk(8 * 16384 * 20, 8, 132, KNOBS) == 64  # 8 tables x 1M x 32, B16384 L20
    assert backward_chunk(8 * 16384 * 20, 32, 132, KNOBS) == 128


def _combine_picks() -> dict[tuple[object, ...], dict[str, object]]:
    """The combine pass's defines as plan_backward picks them, one per register-relevant shape:
    float32 and float16 rows of 1 to 1024 columns, plain and fused (each optimizer)."""
    from reference_kernels import plan

    picks: dict[tuple[object, ...], dict[str, object]] = {}
    for code, size in ((0, 4), (1, 2)):
        fused_options: list[tuple[tuple[str, object], ...]] = [()] + [  # 16-bit weights: stochastic rounding
            (("FUSED_OPT", 1), ("OPTIMIZER", opt), ("STOCHASTIC", int(code != 0))) for opt in (0, 1, 2)]
        for dim in (1, 3, 4, 64, 128, 192, 520, 1000, 1024):
            tiling = RowTiling.for_row(dim, plan.vector_width(dim, size, 0))
            for fused in fused_options:
                if fused and tiling.col_tiles > 1:  # the fused passes take rows of one column tile
                    continue
                call = plan.BackwardCall(grad_dtype=code, elem_bytes=size, dim=dim, grad_align=0,
                                         num_positions=691_200, row_type="int", has_psw=False, has_scale=False,
                                         grad_f32=code != 0, fused=fused)
                chunk_pass, combine = plan.plan_backward(call, HOPPER, KNOBS)
                defines = dict(combine.defines)
                key = tuple(defines[k] for k in ("WEIGHT_DTYPE", "VEC", "ROW_LANES", "CHUNKS", "BLOCK"))
                picks.setdefault(key + fused, defines)
    return picks


def test_the_combine_pass_covers_every_chunk_in_blocks_sized_by_the_row() -> None:
    """A block per COMBINE_ITEMS (chunk, column tile) items, the grid from the positions alone;
    a team per item; blocks of 512 up to 16 floats a lane, 256 beyond; the search for a long
    run's end in the shapes the kernel assumes (a power-of-two count of teams)."""
    from reference_kernels import plan

    for dim, size, block in ((4, 4, 512), (128, 4, 512), (192, 4, 512), (1024, 4, 512), (1024, 2, 256),
                             (520, 2, 256)):
        for n in (1, 64, 691_200, 10_000_019):
            call = plan.BackwardCall(grad_dtype=0 if size == 4 else 1, elem_bytes=size, dim=dim, grad_align=0,
                                     num_positions=n, row_type="int", has_psw=False, has_scale=False, grad_f32=False)
            chunk_pass, combine = plan.plan_backward(call, HOPPER, KNOBS)
            items = -(-n // chunk_pass.chunk_positions) * combine.col_tiles
            per_block = combine.define("COMBINE_ITEMS")
            assert combine.block == combine.define("BLOCK") == block, (dim, size)
            teams = block // combine.define("ROW_LANES")
            assert per_block <= teams and teams & (teams - 1) == 0
            assert (combine.blocks - 1) * per_block < items <= combine.blocks * per_block
            assert combine.define("COMBINE_PROBE") == plan.COMBINE_PROBE
            assert chunk_pass.block == chunk_pass.define("BLOCK") and "BACKWARD_PASS" in dict(chunk_pass.defines)
            assert chunk_pass.block == (128 if "ASYNC_AHEAD" in dict(chunk_pass.defines) else 256)


@needs_nvrtc
@pytest.mark.slow  # about 3 s a compile on two cores
def test_nvrtc_compiles_the_combine_variants_the_planner_picks() -> None:
    from reference_kernels import nvrtc

    picks = _combine_picks()
    assert len(picks) > 20
    for defines in list(picks.values())[::4]:  # a spread of them (the nvcc sweep compiles all)
        cubin = nvrtc.compile_cubin("embedding_bag_backward.cu", nvrtc.compile_options("sm_90", defines))
        assert cubin[:4] == b"\x7fELF"


@pytest.mark.nvcc_sweep
@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not on PATH")
def test_combine_variants_the_planner_picks_do_not_spill(tmp_path: Path) -> None:
    """The combine's registers are capped by its blocks per SM (64 a thread for narrow rows, 128
    up to 16 floats a lane): every pick compiles within its cap without spilling."""
    flags = [" ".join(f"-D{k}={v}" for k, v in d.items()) for d in _combine_picks().values()]
    _sweep("combine_picks", [nvcc_sweep.Job("embedding_bag_backward.cu", f, "sm_90") for f in flags], tmp_path)


def _fused_chunk_picks() -> list[str]:
    """The fused chunk pass's flags as plan_backward picks them, one per register-relevant shape:
    float32, float16 and bfloat16 rows of 4 to 1024 columns (one column tile), each optimizer,
    with and without per-sample weights."""
    from reference_kernels import plan

    picks: dict[tuple[object, ...], str] = {}
    for code, size in ((0, 4), (1, 2), (2, 2)):
        for dim in (4, 32, 64, 128, 192, 256, 520, 1024):
            tiling = RowTiling.for_row(dim, plan.vector_width(dim, size, 0))
            for opt in (0, 1, 2):
                for psw in (False, True):
                    fused = (("FUSED_OPT", 1), ("OPTIMIZER", opt), ("STOCHASTIC", int(code != 0)))
                    call = plan.BackwardCall(grad_dtype=code, elem_bytes=size, dim=dim, grad_align=0,
                                             num_positions=691_200, row_type="int", has_psw=psw, has_scale=False,
                                             grad_f32=False, fused=fused)
                    if tiling.col_tiles > 1:
                        continue
                    defines = dict(plan.plan_backward(call, HOPPER, KNOBS)[0].defines)
                    key = tuple(defines.get(k) for k in ("WEIGHT_DTYPE", "VEC", "ROW_LANES", "CHUNKS", "UNROLL",
                                                         "MIN_BLOCKS", "PRELOAD", "OPTIMIZER", "HAS_PSW",
                                                         "ASYNC_AHEAD"))
                    picks.setdefault(key, " ".join(f"-D{k}={v}" for k, v in defines.items()))
    return list(picks.values())


# Spills the fused chunk pass's picks may have: (defines that must all be present, most bytes).
FUSED_SPILLS: list[tuple[frozenset[str], int]] = [
    # rows preloaded at three blocks per SM (change 55: row-wise Adagrad 4M x 128 Zipf 1.05
    # 1.15 -> 1.22x FBGEMM, narrow 8 x 1M x 32 0.77 -> 0.86x against two blocks without the spill)
    (frozenset({"-DPRELOAD=1", "-DMIN_BLOCKS=3"}), 120),
    # 192-float rows preloaded, 16 lanes x 12 floats (change 55: 10M x 192 0.93 -> 0.97x SGD,
    # 1.01 -> 1.09x row-wise Adagrad against 32 lanes x 6 floats without a spill)
    (frozenset({"-DPRELOAD=1", "-DCHUNKS=3", "-DVEC=4"}), 140),
    # 16-bit rows of 24 or 32 elements a lane, read at the flush (stochastic rounding beside
    # the row): spilled before change 55 already, not measured against a variant without
    (frozenset({"-DPRELOAD=0", "-DVEC=8", "-DSTOCHASTIC=1"}), 300),
]


def _fused_spill_allowed(flags: str, ptxas: str) -> bool:
    spilled = _spilled(ptxas)
    defines = set(flags.split())
    return any(required <= defines and spilled <= limit for required, limit in FUSED_SPILLS)


@pytest.mark.nvcc_sweep
@pytest.mark.skipif(_nvcc() is None, reason="nvcc is not on PATH")
def test_fused_chunk_variants_the_planner_picks_spill_only_where_measured(tmp_path: Path) -> None:
    """Every fused chunk pass the planner picks compiles for sm_90, and spills only where
    FUSED_SPILLS says it may (and no more than it says)."""
    picks = _fused_chunk_picks()
    assert len(picks) > 50 and any("-DPRELOAD=1" in f for f in picks) and any("-DPRELOAD=0" in f for f in picks)
    criterion = f"spills allowed: {sorted((sorted(required), limit) for required, limit in FUSED_SPILLS)}"
    jobs = [nvcc_sweep.Job("embedding_bag_backward.cu", f, "sm_90", criterion) for f in picks]
    _sweep("fused_chunk_picks", jobs, tmp_path, _fused_spill_allowed)


def test_the_fused_chunk_pass_preloads_rows_that_fit() -> None:
    """Rows of up to 12 floats a lane are preloaded, two positions in flight (one where a lane
    holds 3 or 4 vectors), three blocks per SM up to 4 floats a lane; wider rows are read at the
    flush as before; the knob turns it off; the combine pass never preloads."""
    from reference_kernels import plan

    def chunk_defines(dim: int, size: int, knobs: Tuning = KNOBS) -> dict[str, object]:
        call = plan.BackwardCall(grad_dtype=0 if size == 4 else 1, elem_bytes=size, dim=dim, grad_align=0,
                                 num_positions=691_200, row_type="int", has_psw=False, has_scale=False,
                                 grad_f32=False, fused=(("FUSED_OPT", 1), ("OPTIMIZER", 1), ("STOCHASTIC", 0)))
        chunk_pass, combine = plan.plan_backward(call, HOPPER, knobs)
        assert "PRELOAD" not in dict(combine.defines)
        return dict(chunk_pass.defines)

    assert {k: chunk_defines(128, 4)[k] for k in ("PRELOAD", "UNROLL", "MIN_BLOCKS")} == {
        "PRELOAD": 1, "UNROLL": 2, "MIN_BLOCKS": 3}
    assert {k: chunk_defines(32, 4)[k] for k in ("PRELOAD", "UNROLL", "MIN_BLOCKS")} == {
        "PRELOAD": 1, "UNROLL": 2, "MIN_BLOCKS": 3}
    registers = replace(KNOBS, backward_async_ahead=0)  # wide rows' gradient rows in registers too
    assert {k: chunk_defines(192, 4, registers)[k] for k in ("PRELOAD", "UNROLL", "MIN_BLOCKS")} == {
        "PRELOAD": 1, "UNROLL": 1, "MIN_BLOCKS": 2}
    assert {k: chunk_defines(128, 2)[k] for k in ("PRELOAD", "UNROLL", "MIN_BLOCKS")} == {
        "PRELOAD": 1, "UNROLL": 2, "MIN_BLOCKS": 2}  # 8 halves a lane
    assert chunk_defines(1024, 4, registers)["PRELOAD"] == 0 and chunk_defines(1024, 4, registers)["MIN_BLOCKS"] == 2
    assert chunk_defines(128, 4, replace(KNOBS, backward_preload=False))["PRELOAD"] == 0
    plain = plan.BackwardCall(grad_dtype=0, elem_bytes=4, dim=128, grad_align=0, num_positions=691_200,
                              row_type="int", has_psw=False, has_scale=False, grad_f32=False)
    assert "PRELOAD" not in dict(plan.plan_backward(plain, HOPPER, KNOBS)[0].defines)


def test_the_chunk_pass_copies_gradient_rows_ahead_where_registers_hold_one() -> None:
    """Change 58: where the register walk keeps one position in flight (UNROLL 1: rows of 2 or
    more 16-byte vectors a lane, fused or not) the chunk pass copies the gradient rows into
    shared memory 3 positions ahead, in blocks of 128 at the blocks per SM its registers allow;
    rows with two or more positions in registers, rows of narrower vectors and pre-sm_80 GPUs
    keep the register walk; the positions ahead shrink to what a block's 48 KB of static shared
    memory and the SM's shared memory hold; the grid covers every (chunk, column tile) team."""
    from reference_kernels import plan

    def chunk_pass(dim: int, size: int, *, fused: bool = True, psw: bool = False, align: int = 0,
                   knobs: Tuning = KNOBS, device: plan.DeviceProps = HOPPER) -> plan.Plan:
        opt = (("FUSED_OPT", 1), ("OPTIMIZER", 1), ("STOCHASTIC", 0)) if fused else ()
        call = plan.BackwardCall(grad_dtype=0 if size == 4 else 1, elem_bytes=size, dim=dim, grad_align=align,
                                 num_positions=2_097_152, row_type="int", has_psw=psw, has_scale=False,
                                 grad_f32=False, fused=opt)
        return plan.plan_backward(call, device, knobs)[0]

    def picked(p: plan.Plan) -> tuple[int, int, int]:
        d = dict(p.defines)
        return int(d.get("ASYNC_AHEAD", 0)), p.block, int(d["MIN_BLOCKS"])  # type: ignore[call-overload]

    assert picked(chunk_pass(192, 4)) == (3, 128, 5)  # 12 floats a lane: 96 registers, five blocks
    assert picked(chunk_pass(192, 4, psw=True)) == (3, 128, 4)
    assert picked(chunk_pass(192, 4, fused=False)) == (3, 128, 5)
    assert picked(chunk_pass(520, 4)) == (3, 128, 5)  # two column tiles of 32 x 3 vectors
    assert picked(chunk_pass(1024, 4))[:2] == (3, 128)
    for dim, size in ((128, 4), (32, 4), (128, 2), (64, 2)):  # two positions in registers
        assert picked(chunk_pass(dim, size))[0] == 0, (dim, size)
    assert picked(chunk_pass(192, 4, align=8))[0] == 0  # 8-byte vectors
    assert picked(chunk_pass(192, 4, knobs=replace(KNOBS, backward_async_ahead=0))) == (0, 256, 2)
    assert picked(chunk_pass(192, 4, device=replace(HOPPER, arch=75)))[0] == 0
    many = replace(KNOBS, backward_async_ahead=16)
    assert picked(chunk_pass(192, 4, knobs=many))[0] == 6  # 7 slots of 128 x 48 bytes: 43 KB
    # 4 floats a lane: 64 registers, eight blocks; 228 KB / 8 - 1 KB holds 13 slots of 2 KB
    assert picked(chunk_pass(128, 4, knobs=replace(many, backward_async_max_unroll=2))) == (12, 128, 8)
    for dim, size in ((192, 4), (1024, 2), (520, 4)):
        p = chunk_pass(dim, size, knobs=many)
        ahead, block, blocks_per_sm = picked(p)
        tiling = plan.RowTiling.for_row(dim, plan.vector_width(dim, size, 0))
        smem = (ahead + 1) * tiling.chunks * 16 * block
        assert smem <= 48 * 1024 and blocks_per_sm * (smem + HOPPER.smem_reserved_per_block) <= HOPPER.smem_per_sm
        teams = -(-2_097_152 // p.chunk_positions) * tiling.col_tiles
        assert (p.blocks - 1) * block < teams * tiling.row_lanes <= p.blocks * block


def test_vector_width_and_row_tiling() -> None:
    from reference_kernels.plan import RowTiling, vector_width

    assert vector_width(128, 4, 0) == 4
    assert vector_width(128, 2, 0) == 8
    assert vector_width(128, 4, 8) == 2  # a table starting 8 bytes into an allocation
    assert vector_width(127, 4, 0) == 1
    assert vector_width(6, 2, 0) == 2
    assert RowTiling.for_row(128, 4) == RowTiling(4, 32, 1, 1)
    assert RowTiling.for_row(192, 4) == RowTiling(4, 16, 3, 1)  # 48 vectors: no idle lane
    assert RowTiling.for_row(3, 1) == RowTiling(1, 1, 3, 1)  # one lane, three chunks: no idle lane
    assert RowTiling.for_row(192, 8) == RowTiling(8, 8, 3, 1)
    assert RowTiling.for_row(4096, 4) == RowTiling(4, 32, 4, 8)
    # rows past 32 lanes x 4 vectors: tiles of equal vectors per lane (change 57)
    assert RowTiling.for_row(520, 4) == RowTiling(4, 32, 3, 2)  # 130 vectors: 96 + 34, not 128 + 2
    assert RowTiling.for_row(520, 4, balanced=False) == RowTiling(4, 32, 4, 2)
    assert RowTiling.for_row(1000, 4) == RowTiling(4, 32, 4, 2)  # 250 vectors: 4 per lane either way
    assert RowTiling.for_row(4100, 4) == RowTiling(4, 32, 4, 9)  # 1025 vectors: every tile but the last full


@given(vectors=st.integers(1, 2048), vec=st.sampled_from([1, 2, 4, 8]))
def test_balanced_column_tiles_cover_the_row_in_as_many_tiles(vectors: int, vec: int) -> None:
    """The balanced tiling keeps the tile count and covers every vector of the row; its last
    tile is never empty, and no lane holds more vectors than before."""
    from reference_kernels.plan import RowTiling

    new, old = RowTiling.for_row(vectors * vec, vec), RowTiling.for_row(vectors * vec, vec, balanced=False)
    assert new.col_tiles == old.col_tiles and new.chunks <= old.chunks
    tile = new.row_lanes * new.chunks
    assert new.col_tiles * tile >= vectors > (new.col_tiles - 1) * tile


def test_short_bag_kernel_takes_two_or_more_bags_per_step() -> None:
    from reference_kernels.plan import RowTiling, short_bag_defines

    def bags(tiling: RowTiling, length: int, argmax: bool = False) -> object:
        d = short_bag_defines(_variant(0, "max" if argmax else "sum", False, argmax, tiling), bag_len=length,
                              tuning=KNOBS)
        return None if d is None else d["BAGS_PER_STEP"]

    d128 = RowTiling.for_row(128, 4)  # 32 lanes x 1 vector
    assert [bags(d128, n) for n in (1, 2, 3, 4, 5, 150)] == [4, 2, 2, 2, None, None]
    assert [bags(d128, n, argmax=True) for n in (1, 2, 3)] == [2, 2, None]  # argmax: half the budget
    assert bags(d128, 0) is None  # [B, 0]: empty bags, the regular kernel writes the zeros
    assert bags(RowTiling.for_row(192, 4), 1) == 2  # 3 vectors per lane per row
    assert bags(RowTiling.for_row(192, 4), 2) is None


def test_segmented_kernel_holds_every_offset_of_a_segment_in_one_team() -> None:
    from reference_kernels.plan import RowTiling, segment_cap, segment_rows, segmented_defines
    from reference_kernels.plan import segment_bags as bags_of

    SEGMENT_MAX_AVG = KNOBS.segment_max_avg

    def segment_bags(avg_len: int, row_lanes: int, rows: int = KNOBS.segment_rows) -> int:
        return bags_of(avg_len, row_lanes, rows, KNOBS)

    def pick(dim: int, avg_len: int, argmax: bool = False) -> object:
        d = segmented_defines(_variant(0, "max" if argmax else "sum", False, argmax, RowTiling.for_row(dim, 4)),
                              avg_len=avg_len, tuning=KNOBS)
        return None if d is None else (d["SEGMENT_BAGS"], d["UNROLL"], d["TEAM"])

    assert pick(128, 1) == (16, 4, 32)  # 32 lanes: room for 31 bags' offsets, 16 at most
    assert pick(128, SEGMENT_MAX_AVG) == (16, 4, 32)
    assert pick(128, SEGMENT_MAX_AVG + 1) is None  # long bags: the general kernel
    assert pick(32, 1) == (7, 4, 8)  # 8 lanes x 1 vector: up to 7 bags, 4 rows in flight per lane
    assert pick(16, 1) == (3, 4, 4)
    assert pick(8, 1) is None  # 2 lanes: one bag per step, no gain over the general kernel
    assert pick(128, 1, argmax=True) == (16, 2, 32)  # argmax: half the rows in flight
    assert [segment_bags(n, 32) for n in (1, 2, 4, 8, SEGMENT_MAX_AVG + 1, 100)] == [16, 16, 8, 4, 1, 1]
    # float32 rows: segments of 64 rows' worth of bags (change 42)
    assert segment_rows(0, KNOBS) == 64 and segment_rows(1, KNOBS) == segment_rows(2, KNOBS) == 32
    assert [segment_bags(n, 32, 64) for n in (1, 4, 5, 8, SEGMENT_MAX_AVG + 1)] == [16, 16, 12, 8, 1]
    tiling = RowTiling.for_row(128, 4)
    rows = [segmented_defines(_variant(code, "sum", False, False, tiling), avg_len=8,  # type: ignore[index]
                              tuning=KNOBS)["SEGMENT_ROWS"] for code in (0, 1, 2)]
    assert rows == [64, 32, 32]  # the kernel's own per-table sizes alike
    assert segment_bags(1, 8) == 7 and segment_bags(1, 4) == 3  # never more bags than a team has lanes - 1
    assert [segment_cap(32, b, 132, KNOBS) for b in (1024, 6912, 32768, 131072)] == [0, 3, 15, 16]  # >= 16 warps
    assert segment_cap(8, 131072, 132, KNOBS) == 7 and segment_cap(8, 32768, 132, KNOBS) == 3  # 4 teams per warp
    assert segment_cap(16, 6912, 132, KNOBS) == 1  # 16-lane teams, B6912: the general kernel
    for lanes in (4, 8, 16, 32):  # a short table's segments: two or more bags
        assert all(2 <= segment_bags(n, lanes) < lanes for n in range(1, SEGMENT_MAX_AVG + 1))


def test_segmented_kernel_occupancy_by_mode_and_row_type() -> None:
    """3 blocks per SM for every mode of 16-bit rows (DCNv2's mean and per-sample weights ran
    21-22 % faster than at 2, change 37), 4 for 128-column rows with per-sample weights (they
    spill there and were faster anyway, change 51); float32 mean and per-sample weights keep 2."""
    from reference_kernels.plan import RowTiling, segmented_defines

    def blocks(code: int, mode: str, psw: bool, elem_bytes: int) -> object:
        d = segmented_defines(_variant(code, mode, psw, False, RowTiling.for_row(128, 16 // elem_bytes)), avg_len=8,
                              tuning=KNOBS)
        return None if d is None else d["MIN_BLOCKS"]

    for code in (1, 2):  # float16, bfloat16
        assert [blocks(code, m, p, 2) for m, p in (("sum", False), ("sum", True), ("mean", False), ("max", False))] \
            == [3, 4, 3, 3]
    assert [blocks(0, m, p, 4) for m, p in (("sum", False), ("sum", True), ("mean", False), ("max", False))] \
        == [3, 2, 2, 3]


def test_general_kernel_strides_over_bags_of_up_to_24_rows_per_lane_group() -> None:
    """PERSISTENT (teams striding over the bags, the next bag prefetched) for the 2-blocks-per-SM
    variants whose bags hold at most PERSISTENT_MAX_GROUP_ROWS rows per lane group: it gained
    up to 14 % there and lost 1-3 % on longer bags (change 39); short-bag variants at 3-4 blocks
    per SM never take it (the stride's registers spill them). Float32 rows one warp wide (d128)
    then stride with 8 rows in flight at 3 blocks per SM, except with per-sample weights (change 40);
    4 blocks with 32-bit positions (change 43), the calls that fit them."""
    from reference_kernels.plan import RowTiling, forward_defines

    base = replace(KNOBS, short_lean=False)  # short d128 bags: test_short_float32_bags_go_lean_at_high_occupancy
    knobs = base

    def persistent(dim: int, avg_len: int, elem_bytes: int = 4, argmax: bool = False, pos32: bool = True) -> object:
        variant = _variant(0 if elem_bytes == 4 else 2, "max" if argmax else "sum", False, argmax,
                           RowTiling.for_row(dim, 16 // elem_bytes))
        d = forward_defines(variant, avg_len=avg_len, pos32=pos32, tuning=knobs)
        assert d["POS32"] == int(pos32)
        return d["PERSISTENT"], d["MIN_BLOCKS"], d["UNROLL"]

    # float32 d128 (one vector per lane): striding at 8 rows in flight, 4 blocks (changes 40, 43)
    assert [persistent(128, n) for n in (12, 16, 20, 24)] == [(1, 4, 8)] * 4
    assert [persistent(128, n, pos32=False) for n in (12, 24)] == [(1, 3, 8)] * 2  # 64-bit positions: 3 blocks
    # longer bags, one team each: lean rows at 8 in flight, 3 blocks (change 46); 16 at 2 without the rule
    assert [persistent(128, n) for n in (25, 32, 64, 150)] == [(0, 3, 8)] * 4
    assert [persistent(128, n, argmax=True) for n in (32, 150)] == [(0, 2, 8)] * 2  # max: not lean, unchanged
    knobs = replace(base, lean_long_bag_rows=0)
    assert [persistent(128, n) for n in (25, 32, 64, 150)] == [(0, 2, 16)] * 4
    knobs = base
    assert persistent(128, 4) == (0, 4, 4) and persistent(128, 8) == (0, 3, 8)  # high occupancy: one team per bag
    # 16-bit d128 and d192 rows (16 and 8 lanes), bags of up to 32 rows: a team one row wide per bag
    # (narrow_one_row, change 47); longer ones keep two rows at once, 16 rows per lane group
    assert persistent(128, 32, 2) == (0, 3, 8)
    # suite 3's float32 rows: 3 vectors per lane, one team per bag (41, 43), one row at 5 blocks (51)
    assert persistent(192, 32) == (0, 5, 1)
    assert persistent(192, 32, pos32=False) == (0, 3, 2)
    # 16-bit 192: 8 lanes x 3 vectors, one row at once: 2 rows in flight at 3 blocks (change 50);
    # 64-bit positions spill there and keep 4 rows at 2 blocks
    assert persistent(192, 32, 2) == (0, 3, 2) and persistent(192, 32, 2, pos32=False) == (0, 2, 4)
    knobs = replace(base, wide_16bit_fewer_rows=False)
    assert persistent(192, 32, 2) == (0, 2, 4)
    knobs = base
    weighted = forward_defines(_variant(0, "sum", True, False, RowTiling.for_row(192, 4)), avg_len=32, tuning=base)
    assert (weighted["PERSISTENT"], weighted["MIN_BLOCKS"], weighted["UNROLL"]) == (0, 4, 2)  # 3 before ONE_TILE (51)
    knobs = replace(base, narrow_one_row_max_avg=0)
    assert persistent(128, 32, 2) == (1, 2, 16) and persistent(192, 32, 2) == (1, 2, 4)  # two / four rows at once
    knobs = base
    assert persistent(32, 64) == (0, 3, 8)  # narrow_one_row up to 64 rows (change 48)
    knobs = replace(base, narrow_one_row_max_avg=32)
    assert persistent(32, 64) == (1, 2, 16) and persistent(32, 128) == (0, 2, 16)  # 4 rows at once: 16 in flight
    knobs = base
    assert persistent(128, 20, argmax=True) == (1, 2, 8)
    few = forward_defines(_variant(0, "sum", False, False, RowTiling.for_row(128, 4)), avg_len=16, many_bags=False,
                          tuning=base)
    assert (few["PERSISTENT"], few["MIN_BLOCKS"], few["UNROLL"]) == (1, 2, 16)  # one wave: 16 in flight
    psw = forward_defines(_variant(0, "sum", True, False, RowTiling.for_row(128, 4)), avg_len=20, tuning=base)
    assert (psw["PERSISTENT"], psw["MIN_BLOCKS"], psw["UNROLL"]) == (1, 2, 16)  # per-sample weights keep 16
    knobs = replace(knobs, stride_f32_half_unroll=False)
    assert persistent(128, 16) == (1, 2, 16)
    knobs = replace(knobs, wide_f32_fewer_rows=False, wide_one_row=False, narrow_one_row_max_avg=0)
    assert persistent(192, 32) == (1, 2, 4)
    knobs = replace(knobs, forward_resident_waves=0)
    assert persistent(128, 16) == (0, 2, 16)


def test_wide_rows_and_few_narrow_teams_take_the_measured_occupancy() -> None:
    """Change 57. Rows of 2-4 vectors per lane in a warp-wide team (float32; 16-bit at 2): the
    fewest rows in flight at the most blocks per SM, where the call's teams fill them; one-row
    teams of narrow rows only where they give the GPU narrow_min_warps_per_sm warps per SM."""
    from reference_kernels.plan import RowTiling, forward_defines

    def pick(dim: int, code: int = 0, mode: str = "sum", psw: bool = False, units: float = 248.0,
             knobs: Tuning = KNOBS) -> tuple[object, ...]:
        tiling = RowTiling.for_row(dim, 4 if code == 0 or dim % 8 else 8)
        d = forward_defines(_variant(code, mode, psw, mode == "max", tiling), avg_len=30, units_per_sm=units,
                            tuning=knobs)
        return d["TEAM"], d["UNROLL"], d["MIN_BLOCKS"], d["PERSISTENT"]

    unchanged = replace(KNOBS, wide_one_row=False)
    assert pick(200) == (32, 1, 6, 0) and pick(256) == (32, 1, 6, 0)  # 2 vectors: was 8 rows at 2 blocks
    assert pick(520) == (32, 1, 5, 0)  # 2 tiles of 3 vectors
    assert pick(776) == (32, 2, 3, 0) and pick(1000) == (32, 2, 3, 0)  # 4 vectors: one row at 5 spills
    assert pick(200, psw=True) == (32, 2, 4, 0) and pick(776, psw=True) == (32, 2, 3, 0)
    assert pick(392, code=1) == (32, 1, 5, 0)  # 16-bit, 2 vectors of 8
    assert pick(776, code=1) == (32, 4, 2, 0)  # 16-bit, 4 vectors: unchanged
    assert pick(200, mode="max") == pick(200, mode="max", knobs=unchanged)  # max and argmax
    assert pick(200, units=40.0) == (32, 8, 2, 0)  # 40 teams per SM do not fill 6 blocks: unchanged
    misaligned = _variant(0, "sum", False, False, RowTiling.for_row(128, 2))  # 8-byte vectors, 2 per lane
    assert forward_defines(misaligned, avg_len=30, tuning=KNOBS) == forward_defines(misaligned, avg_len=30,
                                                                                    tuning=unchanged)
    assert pick(200, knobs=unchanged) == (32, 8, 2, 0)
    # 4 columns, 4 tables of B8192 on 132 SMs: 248 bags per SM, one lane each, 7.75 warps
    assert pick(4, units=248.0) == (16, 2, 4, 0)  # warp-wide teams, 16 rows at once
    assert pick(20, units=248.0) == (2, 2, 4, 0)  # 2 lanes a row: 15.5 warps, one row at once
    assert pick(4, units=400.0) == (1, 8, 3, 0)  # 12.5 warps: one row at once
    assert pick(4, units=248.0, knobs=replace(KNOBS, narrow_min_warps_per_sm=0)) == (1, 8, 3, 0)


def test_a_partial_last_step_takes_half_a_step_in_narrow_teams() -> None:
    """Change 52: LEAN_TAIL where lean rows run in a team narrower than a warp and the bags'
    length leaves a partial step (8x1Mx32 float32: bags of 20 in 8-row steps); not where steps
    divide the bags (bags of 20 in 4-row steps: the test per step measured slower), not in
    warp-wide teams, not off lean rows (max), not with the knob off."""
    from reference_kernels.plan import RowTiling, forward_defines

    def tail(dim: int, avg_len: int, code: int = 0, mode: str = "sum", knobs: Tuning = KNOBS) -> int:
        variant = _variant(code, mode, False, mode == "max", RowTiling.for_row(dim, 4 if code == 0 else 8))
        return int(forward_defines(variant, avg_len=avg_len, tuning=knobs).get("LEAN_TAIL", 0))

    assert tail(32, 20) == tail(32, 20, mode="mean") == 1  # steps of 8 rows, 20 = 2 x 8 + 4
    assert tail(64, 20) == tail(64, 20, code=1) == tail(32, 20, code=1) == 0  # steps of 4 divide 20
    assert tail(32, 21, code=1) == 1 and tail(32, 16) == 0
    assert tail(128, 150) == 0  # a warp-wide team
    assert tail(32, 20, mode="max") == 0 and tail(32, 20, knobs=replace(KNOBS, lean_tail=False)) == 0


def test_sixteen_bit_rows_with_per_sample_weights_take_more_blocks() -> None:
    """Change 52: 16-bit 128-column rows with per-sample weights run lean rows at 4 blocks per SM:
    short bags one team per bag (leaving the segmented kernel, DCNv2), bags too long to stride 4
    rows in flight instead of 8 at 2 blocks (12 tables of 150); float32 and the knob off as before."""
    from reference_kernels.plan import BagCall, RowTiling, forward_defines, plan_bag_forward

    def pick(avg_len: int, code: int = 1, knobs: Tuning = KNOBS) -> tuple[object, object, object]:
        variant = _variant(code, "sum", True, False, RowTiling.for_row(128, 8 if code else 4))
        d = forward_defines(variant, avg_len=avg_len, tuning=knobs)
        return d["TEAM"], d["UNROLL"], d["MIN_BLOCKS"]

    assert pick(8) == pick(8, code=2) == (16, 4, 4)
    assert pick(150) == pick(150, code=2) == (32, 4, 4)
    assert pick(150, knobs=replace(KNOBS, psw16_more_blocks=False)) == (32, 8, 2)
    assert pick(150, code=0) == (32, 8, 3)
    dcn = BagCall(weight_dtype=1, elem_bytes=2, dim=128, num_rows=26_000_000, weight_align=0, out_aligned=True,
                  index_type="int", bag_size=0, num_indices=214 * 6912, num_bags=26 * 6912, tables=26,
                  table_batched=True, mode="sum", has_psw=True, need_argmax=False, has_padding=False)
    assert plan_bag_forward(dcn, HOPPER, KNOBS).entry == "embedding_bag_forward"


def test_short_float32_bags_go_lean_at_high_occupancy() -> None:
    """Change 48: d128 sum/mean bags short enough to stride (or for the segmented kernel) go one
    team per bag in lean rows, 4 rows in flight at the most blocks per SM that do not spill:
    float32 6 for sum, 5 for mean, 4 with per-sample weights; 16-bit 5 (with per-sample weights
    not at all). Not with argmax, 64-bit positions, other row widths, or the knob off; the
    segmented kernel leaves the calls the rule takes to the general one."""
    from reference_kernels.plan import BagCall, RowTiling, forward_defines, plan_bag_forward

    def pick(avg_len: int, mode: str = "sum", psw: bool = False, pos32: bool = True, dim: int = 128,
             knobs: Tuning = KNOBS, code: int = 0) -> tuple[object, object, object]:
        variant = _variant(code, mode, psw, mode == "max", RowTiling.for_row(dim, 4 if code == 0 else 8))
        d = forward_defines(variant, avg_len=avg_len, pos32=pos32, tuning=knobs)
        return d["PERSISTENT"], d["MIN_BLOCKS"], d["UNROLL"]

    assert [pick(n) for n in (16, 24)] == [(0, 6, 4)] * 2
    # bags of at most segment_max_avg (8) rows on average: one row at 8 blocks (change 50), per-sample
    # weights too since ONE_TILE freed their registers (change 51; 2 rows at 6 before)
    assert [pick(n) for n in (2, 4, 8)] == [(0, 8, 1)] * 3
    assert pick(8, "mean") == (0, 8, 1) and pick(8, psw=True) == (0, 8, 1)
    assert pick(20, dim=64) == pick(20, "mean", dim=64) == (0, 5, 4)  # 64 columns, 16 lanes (change 49)
    assert pick(16, "mean") == (0, 5, 4) and pick(16, psw=True) == (0, 4, 4)
    assert pick(32) == (0, 3, 8)  # longer bags: lean_long_bag_rows as before
    assert pick(16, "max")[0] == 1 and pick(16, pos32=False)[1] != 6 and pick(16, dim=32)[1] != 6
    assert pick(16, knobs=replace(KNOBS, short_lean=False)) == (1, 4, 8)
    assert pick(8, code=1) == pick(8, "mean", code=2) == (0, 5, 4) and pick(8, psw=True, code=1)[1] != 5

    def table_batched(mode: str, dtype: int = 0, short: bool = True) -> str:
        call = BagCall(weight_dtype=dtype, elem_bytes=4 if dtype == 0 else 2, dim=128, num_rows=26_000_000,
                       weight_align=0, out_aligned=True, index_type="int", bag_size=0, num_indices=214 * 6912,
                       num_bags=26 * 6912, tables=26, table_batched=True, mode=mode, has_psw=False,
                       need_argmax=mode == "max", has_padding=False)
        return plan_bag_forward(call, HOPPER, replace(KNOBS, short_lean=short)).entry

    # DCNv2's 26 tables (8 rows per bag on average): float32 sum/mean leave the segmented kernel
    assert table_batched("sum") == table_batched("mean") == table_batched("mean", dtype=1) == "embedding_bag_forward"
    assert table_batched("max") == "embedding_bag_forward_segmented"
    assert table_batched("sum", short=False) == "embedding_bag_forward_segmented"


def test_float32_rows_of_64_and_32_columns_trade_rows_in_flight_for_blocks() -> None:
    """Change 44: float32 rows two per warp (d64) keep 8 rows in flight at 4 blocks per SM for sum,
    3 for mean, max and per-sample weights; d32 rows with per-sample weights, striding over bags
    of up to 96 rows, keep 16 rows at 3 blocks. Only with 32-bit positions, in calls of many
    bags, and not where argmax is written; 16-bit rows and d32 without weights keep their picks."""
    from reference_kernels.plan import RowTiling, forward_defines

    knobs = replace(KNOBS, narrow_one_row_max_avg=32, short_lean=False)  # as measured then (changes 48-49)

    def pick(dim: int, avg_len: int, mode: str = "sum", psw: bool = False, code: int = 0, argmax: bool = False,
             many_bags: bool = True, pos32: bool = True, k: Tuning | None = None) -> tuple[object, object, object]:
        variant = _variant(code, mode, psw, argmax, RowTiling.for_row(dim, 4 if code == 0 else 8))
        d = forward_defines(variant, avg_len=avg_len, many_bags=many_bags, pos32=pos32, tuning=k or knobs)
        return d["UNROLL"], d["MIN_BLOCKS"], d["PERSISTENT"]

    # sum, mean and per-sample weights stride no more: one team per bag with lean rows, 4 in flight
    # (change 46; small_f32_lean); max keeps the striding teams
    assert pick(64, 20) == (8, 3, 0)  # bags of up to 32 rows: one row at once (narrow_one_row, change 47)
    assert pick(64, 48) == (4, 4, 0)
    assert pick(64, 64) == (8, 4, 0) and pick(64, 150) == (8, 4, 0)  # one team per bag, as before
    assert pick(64, 48, "mean") == pick(64, 48, psw=True) == (4, 3, 0) and pick(64, 20, "max") == (8, 3, 1)
    assert pick(64, 48, k=replace(knobs, small_f32_lean=False)) == (8, 4, 1)
    assert pick(64, 12) == (8, 3, 0)  # 8 rows per lane already: unchanged
    assert pick(32, 64, psw=True) == (16, 3, 1) and pick(32, 40, psw=True) == (16, 3, 1)
    assert pick(32, 150, psw=True) == (16, 2, 0)  # bags past 96 rows: not measured faster, unchanged
    assert pick(32, 64) == (16, 2, 1)  # d32 without weights: 1-4 % slower at more blocks (changes 40, 43)
    unchanged = [pick(64, 20, many_bags=False), pick(64, 20, pos32=False), pick(32, 64, psw=True, many_bags=False),
                 pick(64, 40, code=2), pick(64, 20, "max", argmax=True)]
    knobs = replace(knobs, small_f32_more_blocks=False)
    assert unchanged == [pick(64, 20), pick(64, 20, pos32=False), pick(32, 64, psw=True), pick(64, 40, code=2),
                         pick(64, 20, "max", argmax=True)]
    assert pick(64, 48) == (16, 2, 1) and pick(32, 64, psw=True) == (16, 2, 1)
    knobs = KNOBS  # change 48: bags of up to 64 rows take one row at once too; 49: d64 bags of <= 24 rows lean
    assert pick(64, 48) == pick(32, 64) == (8, 3, 0) and pick(32, 150, psw=True) == (16, 2, 0)
    assert pick(64, 20) == pick(64, 20, "mean") == (4, 5, 0) and pick(64, 20, psw=True) == (8, 3, 0)


def test_32_bit_positions_only_where_every_position_row_and_thread_fits() -> None:
    """POS32 (change 43): indices, table rows and threads (one 32-lane team per bag and column
    at most) below POS32_LIMIT, 2^31 less a margin for a step past the end; the rest keep
    64-bit arithmetic."""
    from reference_kernels.plan import fits_pos32 as fits

    POS32_LIMIT = KNOBS.pos32_limit

    def fits_pos32(num_indices: int, num_rows: int, num_bags: int, dim: int) -> bool:
        return fits(num_indices=num_indices, num_rows=num_rows, num_bags=num_bags, dim=dim, tuning=KNOBS)

    assert 2**31 - 2**20 < POS32_LIMIT <= 2**31 - 64
    assert fits_pos32(2 * 65536 * 32, 20_000_000, 2 * 65536, 192)  # suite 3 in one launch
    assert fits_pos32(POS32_LIMIT - 1, POS32_LIMIT - 1, 1000, 128)
    assert not fits_pos32(POS32_LIMIT, 1000, 1000, 128)  # indices
    assert not fits_pos32(1000, POS32_LIMIT, 1000, 128)  # table rows
    assert fits_pos32(1000, 1000, (POS32_LIMIT - 1) // (128 * 32), 128)
    assert not fits_pos32(1000, 1000, POS32_LIMIT // (128 * 32) + 1, 128)  # threads


def test_general_kernel_grid_is_one_wave_of_resident_blocks_when_striding() -> None:
    """Persistent plans launch at most one wave of resident blocks (forward_resident_waves), the
    others one team per unit of work (a bag and a column tile)."""
    from reference_kernels.plan import BLOCK, BagCall, plan_bag_forward

    def plan(num_bags: int, dim: int = 1024, avg_len: int = 16) -> object:
        call = BagCall(weight_dtype=0, elem_bytes=4, dim=dim, num_rows=1000, weight_align=0, out_aligned=True,
                       index_type="i64", bag_size=0, num_indices=num_bags * avg_len, num_bags=num_bags, tables=1,
                       table_batched=False, mode="sum", has_psw=False, need_argmax=False, has_padding=False)
        return plan_bag_forward(call, HOPPER, KNOBS)

    teams = 132 * 2 * (BLOCK // 32)  # 2 resident blocks of 8 warp-wide teams per SM
    strided = plan(100 * teams)  # d1024 float32: 2 column tiles, bags of 16 rows: striding
    assert strided.entry == "embedding_bag_forward" and strided.define("PERSISTENT") == 1  # type: ignore[attr-defined]
    assert strided.grid(132, 2) == 264  # type: ignore[attr-defined]
    assert plan(teams // 4).grid(132, 2) == teams // 2 * 32 // BLOCK  # type: ignore[attr-defined]
    one_per_bag = plan(100 * teams, dim=128, avg_len=64)
    assert one_per_bag.define("PERSISTENT") == 0  # type: ignore[attr-defined]
    assert one_per_bag.grid(132, 2) == 100 * teams * 32 // BLOCK  # type: ignore[attr-defined]


def _bad_calls():  # type: ignore[no-untyped-def]
    import torch

    w = torch.randn(10, 4)
    i2 = torch.tensor([[1, 2], [3, 4]])
    i1 = torch.tensor([1, 2, 3])
    off = torch.tensor([0, 2])
    rk = reference_kernels
    return [
        (lambda: rk.embedding_bag(i2, w, mode="median"), ValueError, "mode must be one of"),
        (lambda: rk.embedding_bag(i2, w, off), ValueError, "offsets must be None"),
        (lambda: rk.embedding_bag(i1, w), ValueError, "offsets must be given"),
        (lambda: rk.embedding_bag(i1, w, off.view(1, 2)), ValueError, "offsets must be 1-D"),
        (lambda: rk.embedding_bag(i2.float(), w), TypeError, "int32 or int64"),
        (lambda: rk.embedding_bag(i2, w.double()), TypeError, "float32, float16 or bfloat16"),
        (lambda: rk.embedding_bag(i2, w[0]), ValueError, "weight must be 2-D"),
        (lambda: rk.embedding_bag(i2, w, mode="mean", per_sample_weights=torch.ones(2, 2)), NotImplementedError,
         "only supported for mode='sum'"),
        (lambda: rk.embedding_bag(i2, w, mode="sum", per_sample_weights=torch.ones(3)), ValueError, "shape of input"),
        (lambda: rk.embedding_bag(i2, w, mode="sum", per_sample_weights=torch.ones(2, 2).half()), TypeError,
         "must match weight dtype"),
        (lambda: rk.embedding_bag(i2, w, padding_idx=10), ValueError, "padding_idx must be within"),
        (lambda: rk.embedding_bag(i2, w, mode="max", sparse=True), ValueError, "max mode does not support sparse"),
        (lambda: rk.embedding_bag(i2, w, mode="sum", sparse=True), RuntimeError, "needs CUDA tensors"),
        (lambda: rk.embedding_bag(i2, w, scale_grad_by_freq=True), NotImplementedError, "scale_grad_by_freq"),
        (lambda: rk.embedding_bag(i1, w, torch.tensor([], dtype=torch.int64), include_last_offset=True), ValueError,
         "at least one offset"),
        (lambda: rk.embedding(i2, w, padding_idx=-11), ValueError, "padding_idx must be within"),
        (lambda: rk.embedding(i2.float(), w), TypeError, "int32 or int64"),
        (lambda: rk.embedding_bag(i2, w, mode="sum"), RuntimeError, "needs CUDA tensors"),
        (lambda: rk.embedding(i2, w), RuntimeError, "needs CUDA tensors"),
        (lambda: rk.EmbeddingBag(10, 4)(i2), RuntimeError, "needs CUDA tensors"),
    ]


def test_api_argument_checking_on_cpu() -> None:
    pytest.importorskip("torch")
    for call, exc, message in _bad_calls():
        with pytest.raises(exc, match=re.escape(message)):
            call()


def test_modules_are_drop_ins() -> None:
    torch = pytest.importorskip("torch")
    bag = reference_kernels.EmbeddingBag(10, 4, mode="max", padding_idx=2)
    assert isinstance(bag, torch.nn.EmbeddingBag)
    state = torch.nn.EmbeddingBag(10, 4, mode="max", padding_idx=2).state_dict()
    bag.load_state_dict(state)
    assert torch.equal(bag.weight, state["weight"])
    assert isinstance(reference_kernels.Embedding(10, 4), torch.nn.Embedding)


def test_custom_ops_are_registered_with_fake_kernels() -> None:
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from reference_kernels import ops  # noqa: F401  (registers the ops)

    with FakeTensorMode():
        weight = torch.empty(100, 16)
        idx = torch.zeros(7, dtype=torch.int64)
        off = torch.tensor([0, 3, 5, 7])
        out, argmax = torch.ops.reference_kernels.embedding_bag(weight, idx, off, None, "max", -1, True, True)
        assert out.shape == (3, 16) and argmax.shape == (3, 16) and argmax.dtype == torch.int64
        emb = torch.ops.reference_kernels.embedding(weight, idx.view(7, 1), -1)
        assert emb.shape == (7, 1, 16)
        # the check's copies: int32 where positions and rows fit, else the input's dtype
        clean, clean_off = torch.ops.reference_kernels.index_check(idx, off, None, 100, 1, "deferred",
                                                                   "embedding_bag")
        assert clean.shape == (7,) and clean_off.shape == (4,) and clean.dtype == clean_off.dtype == torch.int32
        clean, clean_off = torch.ops.reference_kernels.index_check(idx.view(7, 1), None, None, 2**31 + 1, 1,
                                                                   "warn", "embedding")
        assert clean.shape == (7, 1) and clean_off.shape == (0,) and clean.dtype == torch.int64


def test_bulk_gather_applies_on_hopper_to_aligned_rows_of_128_bytes_to_4_kb() -> None:
    from reference_kernels.plan import BULK_BLOCK, BulkPlan, bulk_gather_plan

    def plan(row_bytes: int, n: int = 262144, aligned: bool = True, arch: int = 90, min_row_bytes: int = 0) -> object:
        return bulk_gather_plan(row_bytes=row_bytes, num_indices=n, aligned=aligned,
                                device=replace(HOPPER, arch=arch), tuning=KNOBS, min_row_bytes=min_row_bytes)

    assert plan(512, arch=80) is None and plan(512, arch=89) is None and plan(512, arch=100) is not None
    assert plan(512, aligned=False) is None
    assert [plan(b) is None for b in (16, 112, 136, 144, 4096, 4112, 8192)] == [True, True, True, False, False,
                                                                               True, True]
    assert [plan(b).rows for b in (128, 144, 256, 512, 2048, 4000, 4096)] == [32, 28, 16, 8, 2, 1, 1]
    warps = BULK_BLOCK // 32
    wave = 6 * 132  # 32 KB of stages per block: 6 blocks per SM
    # bf16 N262144: 16384 steps, 5 per warp in one resident wave
    assert plan(256) == BulkPlan(16, wave)
    # N1M: 21 steps per warp in one wave, more than 8: one step per warp instead
    assert plan(256, n=1 << 20) == BulkPlan(16, (1 << 20) // 16 // warps)
    assert plan(512, n=5) == BulkPlan(8, 1)  # fewer rows than one stage
    assert plan(4096, n=1) == BulkPlan(1, 1)
    # the gather's own floor (BULK_GATHER_MIN_ROW_BYTES): 128-byte rows stay on the register gather
    assert plan(128, min_row_bytes=KNOBS.bulk_gather_min_row_bytes) is None
    assert plan(256, min_row_bytes=KNOBS.bulk_gather_min_row_bytes) == plan(256)


def test_kernel_manifest_is_valid_and_matches_the_sources() -> None:
    """The manifest loads without problems through compliance.manifest, declares every
    forward kernel, and each entry symbol is an extern "C" __global__ of its sources."""
    manifest_mod = pytest.importorskip("compliance.manifest")
    manifest = manifest_mod.load_manifest(KERNEL_DIR / "kernel_manifest.yaml")
    assert manifest.problems == ()
    declared = {k.id: k for k in manifest.kernels}
    assert set(declared) == {"reference-embedding-bag", "reference-embedding", "reference-embedding-batched"}
    for kernel in manifest.kernels:
        text = "".join((KERNEL_DIR / src).read_text() for src in kernel.sources)
        for symbol in kernel.entry_symbols:
            pattern = r'extern "C" __global__ void\b[^;{]*?\b' + symbol + r"\("
            assert re.search(pattern, text), (kernel.id, symbol)


def test_zero_fill_overlaps_the_backward_only_for_few_lookups_per_row() -> None:
    """Suite 1 (307200 lookups of 5M rows: 0.06 per row) zeroes its untouched rows beside the sort
    and the passes; suite 3 (2 x 65536 x 32 lookups of 20M rows: 0.21 per row) runs a memset
    first; the knob off: never."""
    from reference_kernels.plan import overlaps_zero_fill

    assert overlaps_zero_fill(2048 * 150, 5_000_000, KNOBS)
    assert not overlaps_zero_fill(2 * 65536 * 32, 20_000_000, KNOBS)
    assert not overlaps_zero_fill(2048 * 150, 5_000_000, replace(KNOBS, overlap_zero_fill=False))


def test_a_plan_says_why_it_was_chosen() -> None:
    """Each plan carries one line per choice: d128 float32 bags of 20 rows in a call of many bags
    take the general kernel, one team per bag in lean rows at 6 blocks per SM (short_lean,
    after the striding rules it overrides)."""
    from reference_kernels.plan import BagCall, plan_bag_forward

    call = BagCall(weight_dtype=0, elem_bytes=4, dim=128, num_rows=1_000_000, weight_align=0, out_aligned=True,
                   index_type="i64", bag_size=20, num_indices=16384 * 20, num_bags=16384, tables=1,
                   table_batched=False, mode="sum", has_psw=False, need_argmax=False, has_padding=False)
    plan = plan_bag_forward(call, HOPPER, KNOBS)
    assert plan.entry == "embedding_bag_forward" and plan.define("MIN_BLOCKS") == 6
    assert plan.why[0] == "general kernel: one team per bag(s)"
    assert "stride_f32_half_unroll: 8 rows in flight at 4 blocks per SM" in plan.why
    assert plan.why[-1] == "short_lean: one team per bag, 4 rows in flight at 6 blocks per SM"
    short = plan_bag_forward(replace(call, bag_size=2, num_indices=16384 * 2), HOPPER, KNOBS)
    assert short.entry == "embedding_bag_forward_short" and short.why == ("fixed bags of 2: 2 bags per team step",)


def test_one_table_calls_of_the_general_kernel_check_their_indices_inside_it() -> None:
    """plan_checked_bag_forward: the general kernel's plan with CHECK=1 (one block per SM fewer
    above 2, at most 6; everything else unchanged) for one table, one column tile, 32-bit
    positions, sum or mean, where the lowered floor does not bind (one wave); None (the pass
    runs first) for every other call or with the knob off."""
    from reference_kernels.plan import BagCall, checked_min_blocks, plan_bag_forward, plan_checked_bag_forward

    def call(dim: int = 128, bag_size: int = 0, avg: int = 20, bags: int = 2048, rows: int = 1_000_000,
             tables: int = 1, mode: str = "sum", argmax: bool = False, dtype: int = 0) -> BagCall:
        return BagCall(weight_dtype=dtype, elem_bytes=4 if dtype == 0 else 2, dim=dim, num_rows=rows, weight_align=0,
                       out_aligned=True, index_type="i64", bag_size=bag_size, num_indices=avg * bags, num_bags=bags,
                       tables=tables, table_batched=tables > 1, mode=mode, has_psw=False, need_argmax=argmax,
                       has_padding=False)

    for shape in (call(), call(mode="mean"), call(dim=32), call(dim=192, dtype=1), call(bag_size=20), call(avg=150),
                  call(avg=4, bags=4096)):
        plain, checked = plan_bag_forward(shape, HOPPER, KNOBS), plan_checked_bag_forward(shape, HOPPER, KNOBS)
        assert checked is not None and plain.entry == checked.entry == "embedding_bag_forward", shape
        expected = {**dict(plain.defines), "CHECK": 1,
                    "MIN_BLOCKS": checked_min_blocks(plain.define("MIN_BLOCKS"))}
        assert dict(checked.defines) == expected and checked.blocks == plain.blocks
        assert checked.why[-1] == "the index check inside the lookup (CHECK)"
    assert plan_checked_bag_forward(call(avg=4, bags=4096), HOPPER, KNOBS).define("MIN_BLOCKS") == 6  # type: ignore[union-attr]
    assert [checked_min_blocks(n) for n in (1, 2, 3, 6, 7, 8)] == [1, 2, 2, 5, 6, 6]
    for other in (call(tables=4), call(mode="max"), call(mode="max", argmax=True), call(bag_size=1),
                  call(dim=32, avg=4, bags=131072), call(dim=4096), call(rows=3_000_000_000),
                  call(bags=131072, avg=16)):  # the last: several waves at the lowered floor
        assert plan_checked_bag_forward(other, HOPPER, KNOBS) is None, other  # the pass runs first
    assert plan_checked_bag_forward(call(), HOPPER, replace(KNOBS, fused_index_check=False)) is None
