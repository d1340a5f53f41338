#!/usr/bin/env bash
# The GPU run, for a lent GPU machine (the device tool), from the repository root:
#   tests/gpu/run.sh [BUNDLE]        (default: build/device-bundle.tar.gz)
# Unpacks the device bundle (`make device-bundle`, docs/gpu.md), prints what the
# machine offers, and runs chorus itself on the GPU, each step bounded in time:
#   libraries    every ELF file of the bundle resolves into it, torch, libpython, libc
#   core_tests   the interpreter core's tests and model loading (device placement on cuda:0)
#   serving      tests/gpu/serve_gpu.py: resnet18 and the Llama 3 debug model on cuda:0
#                from 4 interpreters against CPU outputs, the generation engine on
#                cuda:0, gpu_weight_copies, gpu_footprint_vs_processes,
#                gpu_throughput_vs_threads
#   nccl         chorus' NCCL transport
#   mfu          Llama 3 ~1B bf16 training tokens/s and MFU (tests/gpu/llama_1b_mfu.py)
# Writes $OUT/gpu-run.json (each step's status and seconds, the machine's facts)
# beside each step's own JSON and log. A failed step does not stop the others;
# the exit status says whether all passed. CHORUS_REHEARSAL=1 (as
# tools/device_bundle/rehearse.sh runs it here): steps that need a GPU are
# skipped and serving runs on the CPU, quick.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/build/device-bundle.tar.gz}
out=${OUT:-/tmp/chorus-gpu-out}
rehearsal=${CHORUS_REHEARSAL:-0}
python=${PYTHON:-$( [ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || command -v python3)}
mkdir -p "$out"
work=$(mktemp -d)
tar -C "$work" -xzf "$bundle" || { echo "run.sh: cannot unpack $bundle" >&2; exit 1; }
# shellcheck source=/dev/null
. "$work/chorus/env.sh" "$python" | tee "$out/facts.txt"
. "$work/chorus/env.sh" "$python" >/dev/null || exit 1
export CHORUS_SOURCE_DIR=$root
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
  | tee -a "$out/facts.txt"

steps_json=""
failed=0
# step NAME SECONDS NEEDS_GPU COMMAND...: runs COMMAND under a time limit, its
# output in $OUT/NAME.log; records status and seconds.
step() {
  local name=$1 limit=$2 needs_gpu=$3
  shift 3
  local status
  if [ "$rehearsal" = 1 ] && [ "$needs_gpu" = gpu ]; then
    status=skipped
  else
    local start=$SECONDS
    echo "== $name" >&2
    if timeout "$limit" "$@" >"$out/$name.log" 2>&1; then status=passed; else
      status="failed ($?)"; failed=$((failed + 1)); tail -20 "$out/$name.log" >&2; fi
    echo "== $name: $status in $((SECONDS - start)) s" >&2
  fi
  steps_json+="${steps_json:+, }\"$name\": {\"status\": \"$status\", \"seconds\": $((SECONDS - ${start:-$SECONDS}))}"
}

core_tests() {
  cd "$out" && for test in libcache_test placement_test model_test interpreter_test; do
    "$work/chorus/tests/$test" --gtest_brief=1 || return 1
  done
}
export -f core_tests
export work out
device=cuda:0
serve_args=()
if [ "$rehearsal" = 1 ]; then device=cpu; serve_args=(--quick); fi

step libraries 60 any "$work/chorus/check_libraries.sh" "$work/chorus"
step core_tests 240 any bash -c core_tests
step serving 300 any "$python" "$root/tests/gpu/serve_gpu.py" --bin-dir "$CHORUS_BIN_DIR" \
  --device "$device" --interpreters 4 --out "$out/gpu-serving.json" "${serve_args[@]}"
step nccl 120 gpu "$work/chorus/tests/nccl_test"
step mfu 240 gpu "$python" "$root/tests/gpu/llama_1b_mfu.py" --out "$out/gpu-train.json"

torch=$("$python" -c 'import torch; print(torch.__version__)')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
cat > "$out/gpu-run.json" <<JSON
{"date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "torch": "$torch", "driver": "${driver:-none}",
 "rehearsal": $([ "$rehearsal" = 1 ] && echo true || echo false), "steps": {$steps_json}}
JSON
cat "$out/gpu-run.json"
rm -rf "$work"
[ $failed = 0 ]
