#!/usr/bin/env bash
# Installs (once) Triton's perf_analyzer into chorus' cache and prints its path.
# PyPI's perf-analyzer package is an empty placeholder; the binary ships inside
# tritonclient's manylinux wheels, and 2.50.0 is the newest whose binary runs
# on Debian 12's glibc 2.36 (later ones need 2.38). It needs libb64 (Debian:
# libb64-0d, from install-deps.sh) and libcudart.so.12 (PyPI's
# nvidia-cuda-runtime-cu12; loaded, never used on the CPU). pip's cache keeps
# reinstalls offline.
#
#   tools/install-perf-analyzer.sh PYTHON   -> .../peers/perf_analyzer-2.50.0/perf_analyzer
set -euo pipefail
python="$1"
tritonclient=2.50.0
cudart=12.9.79
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/peers"
home="$cache/perf_analyzer-$tritonclient"
if [ ! -x "$home/perf_analyzer" ] || [ ! -f "$home/.complete" ]; then
  echo "install-perf-analyzer: installing perf_analyzer from tritonclient $tritonclient" >&2
  rm -rf "$home"
  mkdir -p "$home/bin" "$home/lib" "$home/wheels"
  "$python" -m pip download -q --no-deps -d "$home/wheels" \
    "tritonclient==$tritonclient" "nvidia-cuda-runtime-cu12==$cudart" >&2
  unzip -q -j -o "$home"/wheels/tritonclient-*.whl "tritonclient-$tritonclient.data/data/bin/perf_analyzer" -d "$home/bin"
  unzip -q -j -o "$home"/wheels/nvidia_cuda_runtime_cu12-*.whl "nvidia/cuda_runtime/lib/libcudart.so.12" -d "$home/lib"
  rm -rf "$home/wheels"
  chmod +x "$home/bin/perf_analyzer"
  cat > "$home/perf_analyzer" <<WRAPPER
#!/bin/sh
LD_LIBRARY_PATH="$home/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$home/bin/perf_analyzer" "\$@"
WRAPPER
  chmod +x "$home/perf_analyzer"
  "$home/perf_analyzer" --version >/dev/null 2>&1
  touch "$home/.complete"
fi
echo "$home/perf_analyzer"
