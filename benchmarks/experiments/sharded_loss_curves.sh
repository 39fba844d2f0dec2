#!/usr/bin/env bash
# Issue 36 item 3 on the device: do N ranks follow one? (docs/sharding.md, "Loss curves")
#
#     bash benchmarks/experiments/sharded_loss_curves.sh        # from the repository root
#
# examples/dlrm/dlrm_sharded.py on the DCNv2 shapes (rows x 0.01, dim 128), global batch GLOBAL
# (default 4096) for every run, STEPS (default 60) steps, the same plan for all (--budget-gib):
#   n1          one GPU, the whole global batch: the reference curve
#   rev, as8,   one GPU, the same model and data with only the float order changed (the global
#   as8-rev     batch reversed; 8 micro-batches combined as DDP would; both): the noise runs
#   as2, as4    one GPU doing 2 (4) ranks' arithmetic (--as-ranks): what N = 2 (4) must equal
#   n2          2 GPUs: the same floats as as2 (exact), and within the noise tolerance of n1
#   pipe2       2 GPUs with --pipeline: the same floats as n2
#   n4, n4-ord  4 GPUs (when present): n4 within the tolerance of n1; with --ordered-allreduce the
#               same floats as as4
# then (budget left) the GPU tests of tests/distributed. Writes 4 files to $OUT (default
# ./device-out): runs.log (every run's output), curves.json (every curve), agreement.txt (the
# checks: examples/dlrm/loss_curves.py), gpu-tests.txt. GPUS, SHAPE, GLOBAL, BLOCK, STEPS, BUDGET
# override the defaults (a CPU run: GPUS=2 SHAPE="--dcnv2-scale 0.001 --dim 16" GLOBAL=512 BLOCK=64;
# the ranks then use gloo). Under 8 minutes on 2 H100s (BUDGET 450 s; steps past it are skipped).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 OMP_NUM_THREADS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
BUDGET=${BUDGET:-450}
RUN_LIMIT=${RUN_LIMIT:-150}  # seconds per run
GPUS=${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
GLOBAL=${GLOBAL:-4096}
BLOCK=${BLOCK:-256}
STEPS=${STEPS:-60}
read -r -a SHAPE <<<"${SHAPE:---dcnv2-scale 0.01}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
START=$SECONDS
: >"$OUT/runs.log"
: >"$OUT/agreement.txt"
echo "# $(python3 -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU (gloo)",
    "x '"$GPUS"' | torch", torch.__version__)'); $(date -u +%F' '%H:%MZ); ${SHAPE[*]} global $GLOBAL, $STEPS steps" \
    | tee -a "$OUT/agreement.txt"

# run NAME NPROC ARGS...: the example under timeout (at most the budget left), output appended to runs.log
run() {
    local name=$1 nproc=$2 left rc began=$SECONDS
    shift 2
    left=$((BUDGET - (SECONDS - START)))
    if ((left < 30)); then
        echo "$name: skipped (budget of ${BUDGET}s spent)" | tee -a "$OUT/agreement.txt"
        return 1
    fi
    echo "== $name ($nproc process(es)): $*" >>"$OUT/runs.log"
    timeout --kill-after=10 $((left < RUN_LIMIT ? left : RUN_LIMIT)) python3 -m torch.distributed.run --standalone \
        --nproc_per_node="$nproc" examples/dlrm/dlrm_sharded.py "${SHAPE[@]}" --block "$BLOCK" --steps "$STEPS" \
        --warmup 2 --budget-gib 40 --json "$TMP/$name.json" "$@" >>"$OUT/runs.log" 2>&1
    rc=$?
    echo "$name: exit $rc, $((SECONDS - began))s" >>"$OUT/runs.log"
    return $rc
}

run n1 1 --batch "$GLOBAL"
run rev 1 --batch "$GLOBAL" --reverse-blocks
run as8 1 --batch $((GLOBAL / 8)) --as-ranks 8
run as8-rev 1 --batch $((GLOBAL / 8)) --as-ranks 8 --reverse-blocks
NOISE=("$TMP/rev.json" "$TMP/as8.json" "$TMP/as8-rev.json")
CHECK=()
EXACT=()
if ((GPUS >= 2)); then
    run as2 1 --batch $((GLOBAL / 2)) --as-ranks 2
    run n2 2 --batch $((GLOBAL / 2)) && CHECK+=("$TMP/n2.json") && EXACT+=(--exact "$TMP/as2.json" "$TMP/n2.json")
    run pipe2 2 --batch $((GLOBAL / 2)) --pipeline && EXACT+=(--exact "$TMP/n2.json" "$TMP/pipe2.json")
fi
if ((GPUS >= 4)); then
    run as4 1 --batch $((GLOBAL / 4)) --as-ranks 4
    run n4 4 --batch $((GLOBAL / 4)) && CHECK+=("$TMP/n4.json")
    run n4-ord 4 --batch $((GLOBAL / 4)) --ordered-allreduce && EXACT+=(--exact "$TMP/as4.json" "$TMP/n4-ord.json")
fi
python3 - "$TMP" "$OUT/curves.json" <<'PY'
import json, sys
from pathlib import Path
runs = {p.stem: json.loads(p.read_text()) for p in sorted(Path(sys.argv[1]).glob("*.json"))}
keep = ("world_size", "as_ranks", "reverse_blocks", "ordered_allreduce", "global_batch", "steps_per_s", "device", "losses")
Path(sys.argv[2]).write_text(json.dumps({k: {f: r.get(f) for f in keep} for k, r in runs.items()}, indent=1))
PY
if [ -f "$TMP/n1.json" ] && [ "${#CHECK[@]}" -gt 0 ]; then
    python3 examples/dlrm/loss_curves.py "$TMP/n1.json" --noise "${NOISE[@]}" --check "${CHECK[@]}" "${EXACT[@]}" \
        2>&1 | tee -a "$OUT/agreement.txt"
    echo "loss agreement: exit ${PIPESTATUS[0]}" | tee -a "$OUT/agreement.txt"
fi
left=$((BUDGET - (SECONDS - START)))
if ((left >= 60)) && [ "${SKIP_TESTS:-0}" != 1 ]; then
    timeout --kill-after=10 "$left" python3 -m pytest -q -m cuda tests/distributed -p no:cacheprovider \
        >"$OUT/gpu-tests.txt" 2>&1
    echo "gpu tests: exit $?, $(tail -n 1 "$OUT/gpu-tests.txt")" | tee -a "$OUT/agreement.txt"
else
    echo "gpu tests: skipped (${left}s of the budget left)" | tee -a "$OUT/agreement.txt"
fi
echo "total $((SECONDS - START))s" | tee -a "$OUT/agreement.txt"
