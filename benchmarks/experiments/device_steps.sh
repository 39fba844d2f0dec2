# Sourced by the device scripts of this folder (sharded_device_run.sh, quantized_device_run.sh):
# steps that share one time budget on a lent device machine.
#
#     BUDGET=400 STEP_RESULT='passed|failed'; source benchmarks/experiments/device_steps.sh
#     run NAME LIMIT_S COMMAND...
#
# `run` runs the command under timeout (at most the budget left: BUDGET seconds from when this file
# was sourced), its output to $OUT/NAME.txt, and appends to STATUS one line: exit status or time-out,
# seconds, and the output's last line matching STEP_RESULT (an extended regular expression).
# A step with less than 20 s of the budget left is skipped (and listed).
START=$SECONDS
STATUS=()

run() {
    local name=$1 limit=$2 left began rc
    shift 2
    left=$((BUDGET - (SECONDS - START)))
    if ((left < 20)); then
        STATUS+=("$name: skipped (budget of ${BUDGET}s spent)")
        return 1
    fi
    ((limit > left)) && limit=$left
    began=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout --kill-after=15 "$limit" "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    local verdict="exit $rc"
    ((rc == 124 || rc == 137)) && verdict="TIMED OUT after ${limit}s"
    STATUS+=("$name: $verdict, $((SECONDS - began))s; $(grep -E "$STEP_RESULT" "$OUT/$name.txt" | tail -n 1 | cut -c1-160)")
    return $rc
}
