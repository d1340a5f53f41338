#!/usr/bin/env bash
# CI check of the installed library: install chorus from BUILD into a fresh
# prefix, build examples/host_app against it with find_package(chorus), and
# run it on ARCHIVE. Usage: build_and_run.sh BUILD ARCHIVE
set -euo pipefail
build=$(realpath "$1")
archive=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
prefix="$build/host-app-test/prefix"
rm -rf "$build/host-app-test"
cmake --install "$build" --prefix "$prefix" >/dev/null
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$here" -B "$build/host-app-test/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  "${launcher[@]}" >/dev/null
cmake --build "$build/host-app-test/build" >/dev/null
# A cache of its own: the installed libraries are new files.
XDG_CACHE_HOME="$build/host-app-test/cache" "$build/host-app-test/build/host_app" "$archive" 2
