"""Does fetching the kernel's code after the L2 flush cost suite 1 time? (device diagnostics for
docs/perf-log.md, change 30.)

The flush before each timed call also evicts the kernel's instructions (suite 1's f32 variant is
~32 KB of SASS; a copy kernel is a few hundred bytes), so every timed call starts by fetching
its code from DRAM. Side by side, median of 100 cold calls: the committed kernel; the same with
its code put back in the L2 after the flush (the kernel run on one bag before the start event);
and a variant whose loop over a batch's row groups is not unrolled (half the code), compiled
from a patched copy of the source in a temporary directory (the committed source is untouched).
Every output is compared with torch's."""
import shutil
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite, Timer, table, zipf_indices

ROLLED = "#if defined(M_LOOP_ROLLED)\n#pragma unroll 1\n#else\n#pragma unroll\n#endif\n"
ANCHOR = "#pragma unroll\n    for (int m = 0; m < ROW_LANES; m += UNROLL_EFF) {"


class WarmCodeTimer(Timer):
    """The benchmark's timer, with a call on one bag after the flush: its code is in the L2."""
    warm: object = None

    def evict_l2(self) -> None:
        super().evict_l2()
        self.warm()


suite = Suite(reps=100, quick=False, seed=67)
with tempfile.TemporaryDirectory() as tmp_dir:
    tmp = Path(tmp_dir)
    for source in _nvrtc.KERNEL_DIR.glob("*.cu*"):
        shutil.copy(source, tmp / source.name)
    src = (tmp / "embedding_bag_forward.cu").read_text()
    assert src.count(ANCHOR) == 1
    (tmp / "embedding_bag_forward.cu").write_text(src.replace(ANCHOR, ROLLED + ANCHOR[len("#pragma unroll\n"):]))
    _nvrtc.KERNEL_DIR = tmp
    warm_timer = WarmCodeTimer(100, flush=suite.timer.flush)
    for dtype in (torch.float32, torch.bfloat16):
        weight = table(5_000_000, 128, dtype, suite.gen)
        for mode in ("sum", "mean"):
            idx = zipf_indices(2048 * 150, 5_000_000, 0.0, suite.gen).view(2048, 150)
            one = idx[:1].clone()
            line = [f"suite 1 {str(dtype)[6:]} {mode}"]
            for label, tune in (("committed", ""), ("m-loop rolled", "M_LOOP_ROLLED=1")):
                _launch.TUNE = tune
                with torch.no_grad():
                    torch.testing.assert_close(rk.embedding_bag(idx, weight, mode=mode).float(),
                                               F.embedding_bag(idx, weight, mode=mode).float(), rtol=2e-2, atol=2e-2)
                    cold = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, mode=mode,
                                                                          check_indices=False))
                    warm_timer.warm = lambda: rk.embedding_bag(one, weight, mode=mode, check_indices=False)
                    warm = warm_timer.median_us(lambda: rk.embedding_bag(idx, weight, mode=mode,
                                                                         check_indices=False))
                line.append(f"{label}: {cold:5.1f} us, code warm {warm:5.1f} us")
            _launch.TUNE = ""
            print(" | ".join(line), flush=True)
        del weight
        torch.cuda.empty_cache()
    regs = {k[-90:]: v for k, v in _nvrtc.STATS.resources.items()}
    print("registers, local bytes:", regs, flush=True)
