#!/usr/bin/env bash
# Issue 54 on one H200, in one go (docs/perf/issue54-quantized.md):
#
#     bash benchmarks/experiments/quantized_device_run.sh        # from the repository root
#
# Steps, each under `timeout` within a shared budget of BUDGET seconds (default 400), output in
# $OUT/<name>.txt (default OUT: ./device-out):
#   gpu-tests   pytest -m cuda tests/kernels/test_gpu_quantized.py tests/kernels/test_gpu_differential.py
#               (junit XML in $OUT/gpu-tests.xml; the GPU test log's new row in $OUT/gpu-tests.md)
#   compare     benchmarks quantized_suite --compare: every case, FBGEMM once beside ours under each
#               launch layout of quantized_suite.LAYOUTS (the landed 16-byte chunks and the 4-byte-word
#               layouts) -> $OUT/quantized-compare.json (rewritten after every case)
#   summary     the layouts' table, then one line per step (exit status, seconds)
# FBGEMM: FBGEMM_PACK (default .devcarry/fbgemm-infer: the inference pack of
# ../shared/tools/fbgemm-training-pack.sh, with its unpack.sh) is unpacked into /tmp; its loader
# fbgemm_training.py is looked for in FBGEMM_TOOLS (default: the pack folder itself, then
# shared/tools). Without them the suite runs ours alone.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUDGET=${BUDGET:-400}
PACK=${FBGEMM_PACK:-.devcarry/fbgemm-infer}
TOOLS=${FBGEMM_TOOLS:-$PACK}
[[ -f "$TOOLS/fbgemm_training.py" ]] || TOOLS=shared/tools
STEP_RESULT=' passed| failed|error'
# run NAME LIMIT_S COMMAND...: the command under timeout (at most the budget left), output to $OUT/NAME.txt
source benchmarks/experiments/device_steps.sh

python3 -c 'import torch; print(torch.cuda.get_device_name(0), "| torch", torch.__version__)'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null

FBGEMM_ARGS=()
if [[ -f "$PACK/unpack.sh" ]] && bash "$PACK/unpack.sh" /tmp/fbgemm-infer >"$OUT/unpack.txt" 2>&1; then
    FBGEMM_ARGS=(--fbgemm /tmp/fbgemm-infer --tools "$TOOLS")
else
    echo "FBGEMM pack not found or not unpacked ($PACK): ours alone"
fi

run gpu-tests 150 python3 -m pytest -q -m cuda tests/kernels/test_gpu_quantized.py \
    tests/kernels/test_gpu_differential.py -n 8 --dist load --timeout 120 -rfE \
    --junitxml="$OUT/gpu-tests.xml" -p no:cacheprovider
cp docs/perf/gpu-tests.md "$OUT/gpu-tests.md" 2>/dev/null

run compare 400 python3 -m benchmarks quantized_suite "${FBGEMM_ARGS[@]}" --compare \
    --json "$OUT/quantized-compare.json"

echo "== summary"
grep -E '^device|^no FBGEMM|Error' "$OUT/compare.txt" | head -n 5
# from the JSON (written after every case: a run cut by its limit still gives the cases it measured)
python3 - "$OUT/quantized-compare.json" <<'PY'
import json, sys
from benchmarks.quantized_suite import Result, layouts_table, summary
try:
    results = [Result(**r) for r in json.load(open(sys.argv[1]))["results"]]
except (OSError, ValueError, KeyError) as error:
    sys.exit(f"no comparison: {error}")
print(layouts_table(results))
for key, value in summary(results).items():
    g, m = value["geomean_vs_fbgemm"], value["min_vs_fbgemm"]
    if g:
        print(f"{key}: geomean x{g:.2f}, lowest x{m:.2f}, {value['below_1.2']} of {value['cases']} below 1.2")
PY
tail -n 4 "$OUT/gpu-tests.txt"
printf '%s\n' "${STATUS[@]}"
echo "total $((SECONDS - START))s"
