#!/bin/sh
# The suite's short form against its committed baseline.
#   short_check.sh [--report] PYTHON BIN_DIR OUT_DIR
# make bench-check-short: a failing check is confirmed by a second run before
# this fails (one run's throughput ratios move by several percent on a shared
# machine; a regression shows in both). --report (make test): one run, its
# ratios printed beside the baseline's; only a suite that cannot run fails.
# Each run keeps its own JSON (suite-short, suite-short-confirm).
set -u
report=""
if [ "${1:-}" = "--report" ]; then report="--report"; shift; fi
python=$1 bin=$2 out=$3
here=$(dirname "$0")

run() {
  "$python" "$here/suite.py" --short --bin "$bin" --out "$out" --name "$1" &&
    "$python" "$here/check.py" "$out/$1.json" "$here/baseline_short.json" $report
}

run suite-short && exit 0
[ -n "$report" ] && exit 1
echo "short_check: a ratio fell below its baseline; confirming with a second run"
run suite-short-confirm
