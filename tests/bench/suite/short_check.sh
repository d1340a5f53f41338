#!/bin/sh
# The suite's short form against its committed baseline, as CI runs it.
#   short_check.sh PYTHON BIN_DIR OUT_DIR
# A failing check is confirmed by a second run before this fails: one run's
# throughput ratios move by several percent on a shared machine; a regression
# shows in both. Each run keeps its own JSON (suite-short, suite-short-confirm).
set -u
python=$1 bin=$2 out=$3
here=$(dirname "$0")

run() {
  "$python" "$here/suite.py" --short --bin "$bin" --out "$out" --name "$1" &&
    "$python" "$here/check.py" "$out/$1.json" "$here/baseline_short.json"
}

run suite-short && exit 0
echo "short_check: a ratio fell below its baseline; confirming with a second run"
run suite-short-confirm
