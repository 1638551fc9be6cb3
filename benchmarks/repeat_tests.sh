#!/usr/bin/env bash
# The README's test command N times in a row on a fresh clone, with B CPU-burning processes beside it
# (the suite must pass 5 times in a row on a fresh clone, with two CPU-burning processes beside it).
#
#   benchmarks/repeat_tests.sh [RUNS=5] [BURNERS=2] [LOG_DIR=./repeat_tests_out]
#
# Run it from a checkout, inside the virtual environment the tests should use: it clones HEAD of this checkout
# into a temporary folder, runs the README's test command (the line that installs and runs `python -m pytest`,
# read from README.md) there RUNS times, and writes one log per run plus summary.txt. The burners are busy
# Python loops, killed at the end. Exit status: the number of failed runs (0 = all green).
set -u
RUNS=${1:-5}
BURNERS=${2:-2}
LOG=$(realpath -m "${3:-repeat_tests_out}")
mkdir -p "$LOG"
SRC=$(git rev-parse --show-toplevel)
CLONE=$(mktemp -d)/halluscope
git clone -q "$SRC" "$CLONE"
cd "$CLONE"
CMD=$(grep -m1 -E '^pip install .*python -m pytest' README.md)
[ -n "$CMD" ] || { echo "no test command found in README.md" >&2; exit 99; }
{ echo "commit $(git rev-parse --short HEAD)"; echo "burners $BURNERS"; echo "cmd: $CMD"; } > "$LOG/summary.txt"
PIDS=()
for _ in $(seq "$BURNERS"); do python -c 'while True: pass' & PIDS+=($!); done
trap 'kill "${PIDS[@]}" 2>/dev/null' EXIT
failed=0
for i in $(seq "$RUNS"); do
  start=$(date +%s)
  bash -c "$CMD" > "$LOG/run$i.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || failed=$((failed + 1))
  echo "run $i rc=$rc $(( $(date +%s) - start ))s $(tail -1 "$LOG/run$i.log")" | tee -a "$LOG/summary.txt"
done
echo "failed runs: $failed of $RUNS" | tee -a "$LOG/summary.txt"
exit $failed
