#!/usr/bin/env bash
# Issue 36 on the device, in one go (docs/sharding.md, "One device script"):
#
#     bash benchmarks/experiments/sharded_device_run.sh        # from the repository root
#
# With N GPUs (torch.cuda.device_count(): 1, 2, 4 or more) it runs, each step under `timeout`,
# its output in $OUT/<name>.txt (default OUT: ./device-out):
#   gpu-tests      python3 -m pytest -q -m cuda tests/distributed (the 2-GPU tests skip below 2)
#   loss-n1        DCNv2 shapes (rows x 0.01), global batch G = 4096 on one GPU -> loss-n1.json
#   loss-n2, -n4   the same global batches on 2 (4) GPUs, G / N each (the curves; whether they
#                  agree with loss-n1 is sharded_loss_curves.sh's measured noise tolerance)
#   pipeline-n2    loss-n2's run with --pipeline, --check loss-n2.json (the plain loop's curve):
#                  the same floats expected
#   scaling-n1..4  benchmarks sharded_scaling (rows x 0.25, 8192 samples per GPU) for N = 1, 2, 4
#   summary        the table of the scaling runs, then one line per step (exit status, seconds)
# GPUS, LOSS_SHAPE, GLOBAL, SCALING_SHAPE override the defaults (a CPU smoke run: GPUS=2 with small
# shapes runs the ranks on gloo). The steps share a budget of BUDGET seconds (default 470: under 8 minutes on 4 H100s); a step
# gets at most what is left, and steps past the budget are skipped and listed.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
BUDGET=${BUDGET:-470}
GPUS=${GPUS:-$(python3 -c 'import torch; print(torch.cuda.device_count())')}
STEP_RESULT='passed|failed|skipped|max \|difference|steps/s,|"steps_per_s"'
# run NAME LIMIT_S COMMAND...: the command under timeout (at most the budget left), output to $OUT/NAME.txt
source benchmarks/experiments/device_steps.sh

TORCHRUN=(python3 -m torch.distributed.run --standalone)  # + --nproc_per_node=N: N ranks on this host

read -r -a LOSS_SHAPE <<<"${LOSS_SHAPE:---dcnv2-scale 0.01 --steps 40 --warmup 5}"
read -r -a SCALING_SHAPE <<<"${SCALING_SHAPE:---dcnv2-scale 0.25 --batch 8192 --steps 20 --split-steps 6 --warmup 3}"
GLOBAL=${GLOBAL:-4096}
echo "GPUs: $GPUS; results in $OUT"
python3 -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU (CPU, gloo)",
    "| torch", torch.__version__)' >"$OUT/gpus.txt" 2>&1

run gpu-tests 180 python3 -m pytest -q -m cuda tests/distributed -p no:cacheprovider

run loss-n1 90 "${TORCHRUN[@]}" --nproc_per_node=1 examples/dlrm/dlrm_sharded.py "${LOSS_SHAPE[@]}" --batch "$GLOBAL" \
    --json "$OUT/loss-n1.json"
for n in 2 4; do
    ((GPUS >= n)) || continue
    run "loss-n$n" 90 "${TORCHRUN[@]}" --nproc_per_node="$n" examples/dlrm/dlrm_sharded.py "${LOSS_SHAPE[@]}" --batch $((GLOBAL / n)) \
        --json "$OUT/loss-n$n.json"
done
if ((GPUS >= 2)); then
    run pipeline-n2 90 "${TORCHRUN[@]}" --nproc_per_node=2 examples/dlrm/dlrm_sharded.py "${LOSS_SHAPE[@]}" --batch $((GLOBAL / 2)) \
        --pipeline --check "$OUT/loss-n2.json" --json "$OUT/pipeline-n2.json"
fi

mkdir -p "$OUT/scaling"
for n in 1 2 4; do
    ((GPUS >= n)) || continue
    run "scaling-n$n" 120 "${TORCHRUN[@]}" --nproc_per_node="$n" -m benchmarks sharded_scaling "${SCALING_SHAPE[@]}" \
        --out "$OUT/scaling"
done

{
    echo "# sharded tables on $GPUS GPU(s): $(head -n 1 "$OUT/gpus.txt"); $(date -u +%F' '%H:%MZ)"
    python3 -m benchmarks sharded_scaling --summarize "$OUT/scaling" 2>&1
    echo
    printf '%s\n' "${STATUS[@]}"
    if [ -f "$OUT/pipeline-n2.txt" ]; then
        grep -q '(the same floats)' "$OUT/pipeline-n2.txt" \
            && echo "pipelined loss curve = plain loop's, bit for bit" || echo "pipelined loss curve DIFFERS from the plain loop's"
    fi
    echo "total $((SECONDS - START))s"
} | tee "$OUT/summary.txt"
