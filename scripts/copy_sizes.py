"""How much a plain copy's bandwidth moves with its exact size (device diagnostics for
docs/perf-log.md, change 29).

A plain copy (Suite.same_size_copy_us with 16-byte rounding, as the benchmark had it before
change 29: half the bytes read, half written) timed at 61 sizes within +-3 % of some cases'
compulsory bytes: suite 1 f32 sum and sum+psw
(157.2 and 158.4 MB), suite 1 bf16 sum (78.9 MB) and the one-hot f32 gather (270.5 MB). If
the percentage jumps between neighbouring sizes, one copy at the exact size is a noisy
yardstick for a case. Then each centre rounded to multiples of 8, 16 and 64 KB (11
neighbouring multiples of 16 KB), to see whether aligned sizes are the fast ones.
Median of 100 cold calls per size."""
import statistics

from reference_kernels.bench import Suite, copy_bytes

suite = Suite(reps=100, quick=False, seed=43)
CENTERS = {"suite1 f32 sum": 2048 * 150 * (512 + 8) + 2048 * 512,
           "suite1 f32 sum+psw": 2048 * 150 * (512 + 8 + 4) + 2048 * 512,
           "suite1 bf16 sum": 2048 * 150 * (256 + 8) + 2048 * 256,
           "one-hot f32": 2 * 262144 * 512 + 262144 * 8}
for label, center in CENTERS.items():
    pcts = []
    for step in range(-30, 31):
        nbytes = int(center * (1 + step / 1000))
        us = suite.same_size_copy_us(nbytes, align=16)
        pcts.append((step / 10, 100 * copy_bytes(nbytes, 16) / us / 1e3 / suite.copy_gbps))
    values = [p for _, p in pcts]
    print(f"{label} ({center / 1e6:.1f} MB): min {min(values):.1f}% median {statistics.median(values):.1f}% "
          f"max {max(values):.1f}% | at the exact size {pcts[30][1]:.1f}%", flush=True)
    print("  " + " ".join(f"{d:+.1f}:{p:.1f}" for d, p in pcts), flush=True)
    aligned = []
    for align in (8 << 10, 16 << 10, 64 << 10):
        moved = copy_bytes(center, align)
        pct = 100 * moved / suite.same_size_copy_us(center, align) / 1e3 / suite.copy_gbps
        aligned.append(f"{align >> 10} KB {pct:.1f}%")
    near = [100 * copy_bytes(center + k * (32 << 10)) / suite.same_size_copy_us(center + k * (32 << 10)) / 1e3
            / suite.copy_gbps for k in range(-5, 6)]
    print(f"  aligned: {', '.join(aligned)}; 11 neighbouring multiples of 32 KB: min {min(near):.1f}% "
          f"median {statistics.median(near):.1f}% max {max(near):.1f}%", flush=True)
