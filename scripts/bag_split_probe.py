"""Would suite 1 gain from splitting its bags over several teams? (device diagnostics for
docs/perf-log.md, change 28.)

The same 307200 uniform lookups of a 5M x 128 table pooled into 2048 bags of 150 rows (suite 1),
4096 of 75, 8192 of 38 (307200 = 8192 x 37.5: 311296 lookups) and 16384 of 19: more, shorter
bags mean more warps per SM and shorter chains of dependent row loads per warp, with the same
bytes read. If the shorter bags run markedly faster per byte, splitting suite 1's bags over
several teams is worth building. Median of 100 cold calls; % of the copy ceiling in compulsory
bytes, next to a copy of the same bytes."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels.bench import Suite, bag_bytes, table, zipf_indices

suite = Suite(reps=100, quick=False, seed=37)
for dtype in (torch.float32, torch.bfloat16):
    weight = table(5_000_000, 128, dtype, suite.gen)
    for batch, pooling in ((2048, 150), (4096, 75), (8192, 38), (16384, 19)):
        idx = zipf_indices(batch * pooling, 5_000_000, 0.0, suite.gen).view(batch, pooling)
        comp, _ = bag_bytes(weight, idx, None, False, batch * 128)
        with torch.no_grad():
            torch.testing.assert_close(rk.embedding_bag(idx, weight).float(), F.embedding_bag(idx, weight).float(),
                                       rtol=2e-2, atol=2e-2)
            ours = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, check_indices=False))
        copy = suite.same_size_copy_us(comp)
        pct = 100 * comp / 1e3 / suite.copy_gbps
        print(f"{str(dtype)[6:]:8s} B{batch:<5d} L{pooling:<3d} ours {ours:5.1f} us {pct / ours:5.1f}% | "
              f"same-size copy {copy:5.1f} us {pct / copy:5.1f}%", flush=True)
    del weight
    torch.cuda.empty_cache()
