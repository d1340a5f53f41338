#!/usr/bin/env bash
# make demo: package the example MLP, serve it with chorus-server on loopback,
# call it with chorus-client (one request, then 32 at once), show the metrics,
# and stop the server with SIGTERM. Usage: CHORUS_PYTHON=PY tools/demo.sh BUILD_DIR
# (PY: the Python the build embeds, `make -s print-python`).
set -euo pipefail
python="${CHORUS_PYTHON:?set CHORUS_PYTHON to the Python the build embeds}"
build=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
work="$build/demo"
rm -rf "$work" && mkdir -p "$work/models/mlp/1"
export PYTHONPATH="$build/share/chorus/python"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. package examples/packaging/mlp (chorus-package create, then check)"
(cd "$root/examples/packaging/mlp" &&
 "$build/bin/chorus-package" create "$work/models/mlp/1/mlp.pt" --module model:build \
   --example-inputs model:example_inputs --name mlp --max-batch-size 32 --quiet)
echo '{"max_queue_delay_us": 5000}' > "$work/models/mlp/config.json"
"$build/bin/chorus-package" check "$work/models/mlp/1/mlp.pt"

step "2. start chorus-server on loopback (2 interpreters)"
"$build/bin/chorus-server" --model-repository "$work/models" --host 127.0.0.1 --port 0 \
  --metrics-port 0 --http-port 0 --interpreters 2 > "$work/server.out" 2> "$work/server.log" &
server=$!
trap 'kill -9 $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  grep -q "listening on port" "$work/server.out" 2>/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.2
done
port=$(sed -n 's/.*listening on port \([0-9]*\) (metrics \([0-9-]*\)).*/\1/p' "$work/server.out")
metrics=$(sed -n 's/.*listening on port \([0-9]*\) (metrics \([0-9-]*\)).*/\2/p' "$work/server.out")
http=$(sed -n 's/.*, http \([0-9-]*\)$/\1/p' "$work/server.out")
cat "$work/server.out"
client=("$build/bin/chorus-client" --server "127.0.0.1:$port")

step "3. chorus-client list / metadata / infer"
"${client[@]}" list
"${client[@]}" metadata mlp | head -12
"${client[@]}" infer mlp --input 'x=[[0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0, -2.0, 0.0, 0.5, 1.0, -1.0, 2.0, 0.0, 0.75]]'

step "3b. the same over KServe v2 HTTP/REST (curl)"
curl -sS "http://127.0.0.1:$http/v2/models/mlp/infer" -H 'Content-Type: application/json' -d \
  '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16],
    "data": [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 0.25, 1.0, -2.0, 0.0, 0.5, 1.0, -1.0, 2.0, 0.0, 0.75]}]}'
echo

step "4. 32 concurrent single-sample requests (dynamic batching)"
"$python" - "127.0.0.1:$port" <<'PY'
import sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from chorus.client import Client
rng = np.random.default_rng(0)
inputs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(32)]
with Client(sys.argv[1]) as client, ThreadPoolExecutor(32) as pool:
    outputs = list(pool.map(lambda x: client.infer("mlp", {"x": x})["output"], inputs))
print(f"32 answers, first: {np.round(outputs[0], 4).tolist()}")
PY

step "5. metrics excerpt (http://127.0.0.1:$metrics/metrics)"
"$python" -c "
import urllib.request
text = urllib.request.urlopen('http://127.0.0.1:$metrics/metrics').read().decode()
for line in text.splitlines():
    if line.startswith(('nv_inference_request_success', 'nv_inference_exec_count', 'nv_inference_count',
                        'chorus_batch_size_sum', 'chorus_batch_size_count', 'chorus_interpreter_busy')):
        print(line)
"

step "6. SIGTERM: drain and stop"
kill -TERM $server
wait $server
echo "chorus-server exited with status $?"
trap - EXIT
