#!/usr/bin/env bash
# Installs the Debian 12 packages chorus needs. Idempotent: prints nothing and
# touches nothing when every package is already present. torch and the Python
# packages come from PyPI into a venv (tools/make-venv.sh, run by `make deps`).
#   tools/install-deps.sh          to build and test chorus
#   tools/install-deps.sh image    to build and run its container image (make image)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config clang clang-format lld libclang-rt-14-dev zip unzip strace
  # the embedded Python: Debian's /usr/bin/python3 (a shared libpython), base of the venv
  python3-dev python3-venv
  # packages, RPC and their tools
  libzip-dev libssl-dev zlib1g-dev libgloo-dev libabsl-dev libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # C++ libraries
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  libfmt-dev libspdlog-dev libcpp-httplib-dev libfp16-dev
  # peers the tests drive: perf_analyzer (tools/install-perf-analyzer.sh) links libb64; curl (REST)
  libb64-0d curl
  # network namespaces and veth pairs for the multi-host tests
  iproute2
)

if [ "${1:-}" = image ]; then
  # mmdebstrap and buildah make the image; podman (with runc) runs it.
  packages=(mmdebstrap buildah podman runc uidmap fuse-overlayfs slirp4netns)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet; refresh them once if the install fails.
if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/chorus-apt.log 2>&1; then
  $sudo apt-get update -q >>/tmp/chorus-apt.log 2>&1
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/chorus-apt.log 2>&1 || {
    cat /tmp/chorus-apt.log >&2
    exit 1
  }
fi
