#!/usr/bin/env bash
# For a lent GPU machine (the device tool): builds chorus' NCCL transport and
# its test against that machine's torch and NCCL, runs it, then measures Llama 3 ~1B
# training tokens/s and MFU (tests/gpu/llama_1b_mfu.py). Finishes well
# within 10 minutes. Usage, from the repository root: tests/gpu/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-/tmp/chorus-gpu-build}
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
nccl_root=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' \
            2>/dev/null || echo /usr/local/cuda)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
cmake -S "$root/tests/gpu" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DNCCL_ROOT="$nccl_root" >/dev/null
cmake --build "$build" -j "$(nproc)"
LD_LIBRARY_PATH="$nccl_root/lib:${LD_LIBRARY_PATH:-}" "$build/nccl_test"
# Training throughput of the Llama 3 example at ~1B parameters, bf16 (a few minutes).
python3 "$root/tests/gpu/llama_1b_mfu.py" --out "${OUT:-$build}/gpu-train.json"
