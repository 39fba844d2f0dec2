"""GPU time of one training step under variants of the fused backward's knobs, beside FBGEMM's.

    python3 -m benchmarks backward_variants --fbgemm DIR [--tools DIR] [--only TEXT ...]
                                            [--variants NAME ...]

Issue 37: the fused chunk pass (embedding_bag_backward.cu with FUSED_OPT) waited one DRAM round
trip per closed segment, reading the row it updates only once the segment's sum was known
(``base``). Change 55 (``default``) loads a segment's row into registers as the segment opens,
beside its gradient loads, with two positions in flight and three blocks per SM. The other
variants (reference_kernels/tuning.py) change one knob of that: ``rows4`` four positions in
flight, ``blocks2`` two blocks per SM, ``chunk64`` / ``chunk32`` shorter chunks; ``torch-sort``
sorts the keys with torch.sort instead of radix_sort.cu (change 56). Change 58 copies the gradient rows
of the chunk pass into shared memory ahead of its walk where the registers held one position
(3 ahead by default): ``registers`` turns that off, ``async6`` keeps 6 ahead, ``async-narrow``
takes it for rows with two positions in registers too. For each case of the training suite
(benchmarks/training_suite.py) whose name contains one of ``--only``: FBGEMM's step, then ours
under each variant, as GPU time (median of the suite's 20 L2-flushed steps) and × FBGEMM.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from benchmarks import harness, training_suite

VARIANTS: dict[str, dict[str, Any]] = {
    "base": {"backward_preload": False},  # before change 55
    "default": {},
    "rows4": {"backward_preload_rows": 4},
    "blocks2": {"backward_preload_min_blocks": 2},
    "chunk64": {"backward_chunks": (64, 32)},
    "chunk32": {"backward_chunks": (32,)},
    "torch-sort": {"own_sort": False},
    # change 58: the chunk pass's gradient rows copied into shared memory ahead of the walk
    # (the default for wide rows since: "default" holds them in registers)
    "registers": {"backward_async_ahead": 0},
    "async6": {"backward_async_ahead": 6},
    "async-narrow": {"backward_async_max_unroll": 2},
}

DEFAULT_ONLY = ("4Mx128 B6912 L100 uniform", "4Mx128 B6912 L100 zipf1.2", "10Mx192 B65536 L32 zipf1.2 sgd",
                "narrow 8x1Mx32 B16384 L20", "narrow 8x1Mx64 B16384 L20 zipf1.05 rowwise",
                "40Mx128 B6912 L27 uniform rowwise", "DCNv2 26 tables B6912 zipf1.2 rowwise",
                "4Mx128 B6912 L100 fp16 uniform rowwise")


def identical_steps(module: Any, step: Any, variants: list[str]) -> str:
    """One step from the same weights and state under each variant: the variants change where the
    rows are read, not what is summed or in which order, so every state dict must equal base's
    bit for bit. Returns 'identical' or the variants that differ. (The starting state is kept in
    host memory: two more copies of a 20 GB table would not fit beside it on an H100.)"""
    from reference_kernels import tuning

    start = {k: v.to("cpu", copy=True) for k, v in module.state_dict().items()}
    base: dict[str, torch.Tensor] = {}
    differ = []
    for name in ["base", *variants]:
        module.load_state_dict(start)
        with tuning.tuned(**VARIANTS[name]):
            step()
        if not base:
            base = {k: v.clone() for k, v in module.state_dict().items()}
        elif any(not torch.equal(v, base[k]) for k, v in module.state_dict().items()):
            differ.append(name)
    base.clear()
    module.load_state_dict(start)
    return "identical" if not differ else "DIFFER: " + ", ".join(differ)


def run_case(case: training_suite.Case, variants: list[str], timer: harness.Timer) -> None:
    from reference_kernels import tuning

    gen = torch.Generator(device=harness.DEV).manual_seed(0)
    inputs = training_suite.make_inputs(case, gen)
    psw = () if inputs.psw is None else (inputs.psw,)
    modules: dict[str, Any] = {"ours": training_suite.ours_module(case, "none")}

    def step(library: str) -> None:
        modules[library](inputs.indices, inputs.offsets, *psw).backward(inputs.grad)

    try:
        modules["fbgemm"] = training_suite.fbgemm_module(case, "none", modules["ours"].weight.detach(), inputs.starts)
        fbgemm_us = timer.median_us(lambda: step("fbgemm"))
    except Exception as error:  # a missing FBGEMM: our variants still compare with each other
        fbgemm_us = float("nan")
        print(f"   fbgemm: {type(error).__name__}: {error}", flush=True)
    modules.pop("fbgemm", None)
    torch.cuda.empty_cache()
    same = identical_steps(modules["ours"], lambda: step("ours"), variants)
    cells = []
    for name in variants:
        with tuning.tuned(**VARIANTS[name]):
            us = timer.median_us(lambda: step("ours"))
        cells.append(f"{name} {us:7.1f} ({fbgemm_us / us:4.2f})")
    print(f"{case.name:52s} fbgemm {fbgemm_us:7.1f} | " + " | ".join(cells) + f" | {same}", flush=True)
    modules.clear()
    torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fbgemm", default=None, help="the unpacked FBGEMM training pack")
    parser.add_argument("--tools", default=None, help="the folder holding fbgemm_training.py")
    parser.add_argument("--only", nargs="+", default=list(DEFAULT_ONLY), help="cases whose name contains one")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    reason = training_suite.load_fbgemm(args.fbgemm, args.tools)
    if reason:
        print(f"FBGEMM not loaded: {reason}")
    timer = harness.Timer(reps=training_suite.STEPS)
    for case in training_suite.all_cases():
        if any(text in case.name for text in args.only):
            run_case(case, args.variants, timer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
