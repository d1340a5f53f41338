#!/usr/bin/env bash
# Installs (once) NVIDIA Triton Inference Server 2.51 with its Python backend into chorus'
# cache, the peer of `make bench-triton`, and prints the path of its `tritonserver`.
#
# The server comes from PyPI's nvidia-pytriton 0.7.0 wheel (pinned), which carries the
# tritonserver 2.51.0 binary (it finds its libraries through its RPATH, in the wheel), the
# Python backend (backends/python/libtriton_python.so) and the backend's stub for Python
# 3.8-3.13. It goes into a venv of its own (pytriton's Python API and its dependencies are
# not needed to run the server: --no-deps). The stub for PYTHON's version is copied into
# backends/python/, where the backend looks for it. The stub embeds that Python and takes
# its packages from the first `python3` on PATH: start Triton with PYTHON's bin/ first on
# PATH and every model gets that venv's torch and numpy. Runs on a CPU-only machine (Triton
# logs that it finds no GPU). pip's cache keeps reinstalls offline.
#
# Triton 2.51's Python backend predates numpy 2: with numpy 2 its stub answers every
# output with no data. So the stubs get a venv of their own (stubs-<PYTHON's venv>, made
# from the same Python) holding numpy 1.26.4 and a .pth file that adds PYTHON's packages
# after it: the models import that venv's torch with numpy 1 (torch runs with either).
# The stub ignores PYTHONPATH. Its python3 is what `--stub-python` prints.
#
#   tools/install-triton.sh PYTHON          -> .../peers/triton-2.51.0/.../bin/tritonserver
#                                              (how to start it on stderr)
#   tools/install-triton.sh PYTHON --quiet  -> only the path
#   tools/install-triton.sh PYTHON --stub-python -> the python3 whose bin/ goes first on
#                                              the server's PATH
set -euo pipefail
python="$1"
quiet="${2:-}"
pytriton=0.7.0
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/peers"
home="$cache/triton-2.51.0-pytriton-$pytriton"
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
log="$(mktemp /tmp/chorus-install-triton.XXXXXX)"
trap 'rm -f "$log"' EXIT

server_dir() {
  echo "$home"/venv/lib/python3*/site-packages/pytriton/tritonserver
}

stub_numpy=1.26.4
stubs="$home/stubs-$(basename "$(dirname "$(dirname "$python")")")"

if [ ! -f "$home/.complete-$version" ] || [ ! -f "$stubs/.complete" ]; then
  echo "install-triton: installing tritonserver 2.51.0 from nvidia-pytriton $pytriton" >&2
  if [ ! -x "$home/venv/bin/python" ]; then
    rm -rf "$home"
    "$python" -m venv "$home/venv" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  fi
  "$home/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    "nvidia-pytriton==$pytriton" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  dir="$(server_dir)"
  stub="$dir/python_backend_stubs/$version/triton_python_backend_stub"
  if [ ! -x "$stub" ]; then
    echo "install-triton: nvidia-pytriton $pytriton has no stub for Python $version" >&2
    exit 1
  fi
  cp "$stub" "$dir/backends/python/triton_python_backend_stub"
  rm -rf "$stubs"
  "$python" -m venv --without-pip "$stubs" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
  stubs_site="$("$stubs/bin/python" -c "$purelib")"
  "$python" -m pip install -q --disable-pip-version-check --no-deps --target "$stubs_site" \
    "numpy==$stub_numpy" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  "$python" -c "$purelib" >"$stubs_site/chorus-venv.pth"  # PYTHON's packages, after numpy 1
  touch "$stubs/.complete"
  # --help exits 1 after printing the flags; a binary that cannot load prints none.
  help="$("$dir/bin/tritonserver" --help 2>&1 || true)"
  case "$help" in
    *--model-repository*) ;;
    *) echo "install-triton: tritonserver does not run: $help" >&2; exit 1 ;;
  esac
  touch "$home/.complete-$version"
fi
dir="$(server_dir)"
if [ "$quiet" = "--stub-python" ]; then
  echo "$stubs/bin/python3"
  exit 0
fi
if [ "$quiet" != "--quiet" ]; then
  cat >&2 <<HOWTO
Triton 2.51.0 (nvidia-pytriton $pytriton), its Python backend's stub for Python $version.
Start it on a model repository (the stubs run the first python3 on PATH: put the venv
whose packages the models import first: here the stubs' venv, numpy 1 over PYTHON's
packages; Ctrl-C stops it):

  PATH="$stubs/bin:\$PATH" \\
    "$dir/bin/tritonserver" --backend-directory "$dir/backends" \\
    --model-repository /path/to/models --http-port 8000 --grpc-port 8001 --metrics-port 8002

HOWTO
fi
echo "$dir/bin/tritonserver"
