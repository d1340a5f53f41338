#!/usr/bin/env bash
# Builds chorus' NCCL transport test (tests/gpu/CMakeLists.txt) against
# PYTHON's torch and the NCCL of its nvidia wheel, into OUT_DIR.
#   build_nccl_test.sh PYTHON OUT_DIR
set -euo pipefail
python=$1
out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
nccl_root=$("$python" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
cmake -S "$root/tests/gpu" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DNCCL_ROOT="$nccl_root" >/dev/null
cmake --build "$out" -j "$(nproc)"
