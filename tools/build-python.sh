#!/usr/bin/env bash
# Builds (once) a CPython release source tarball into chorus' cache and prints
# its python3. Built --enable-shared, since chorus embeds libpython; keyed by
# the tarball's sha256 and the flavour, so clones and CI runs share the build
# as they share the venvs. Offline: the tarball carries everything (pip comes
# from its ensurepip).
#
#   tools/build-python.sh ../shared/cpython/Python-3.12.3.tar.xz
#       -> ~/.cache/chorus/pythons/3.12.3-<sha>/bin/python3
#   tools/build-python.sh --optimized TARBALL
#       PGO and LTO (--enable-optimizations --with-lto): the fastest embedded
#       Python, at about ten times the build time (docs/interpreter.md)
#   tools/build-python.sh --free-threaded TARBALL
#       --disable-gil (3.13t, 3.14t: the suite's free_threaded mode, FT_PYTHON)
set -euo pipefail

flavour=shared
configure_flags=(--enable-shared)
case "${1:-}" in
  --optimized) flavour=optimized; configure_flags+=(--enable-optimizations --with-lto); shift ;;
  --free-threaded) flavour=free-threaded; configure_flags+=(--disable-gil); shift ;;
esac
tarball="${1:?usage: tools/build-python.sh [--optimized | --free-threaded] Python-X.Y.Z.tar.xz}"
[ -f "$tarball" ] || { echo "build-python: no such tarball: $tarball" >&2; exit 1; }

name=$(basename "$tarball")
version=${name#Python-}
version=${version%.tar.*}
sha=$(sha256sum "$tarball" | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/pythons"
prefix="$cache/$version-$sha"
[ "$flavour" = shared ] || prefix="$prefix-$flavour"

mkdir -p "$cache"
exec 9>"$prefix.lock"
flock 9  # one build of a prefix at a time; a second caller waits and reuses it
if [ ! -f "$prefix/.complete" ]; then
  echo "build-python: building CPython $version ($flavour) into $prefix" >&2
  rm -rf "$prefix"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  tar -xf "$tarball" -C "$work"
  source_dir=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)
  # The rpath lets the interpreter and chorus find this libpython, not Debian's.
  (cd "$source_dir" &&
    ./configure --prefix="$prefix" "${configure_flags[@]}" \
      LDFLAGS="-Wl,-rpath,$prefix/lib" >"$work/configure.log" 2>&1 &&
    make -j "$(nproc)" >"$work/make.log" 2>&1 &&
    make install >"$work/install.log" 2>&1) || {
    echo "build-python: the build failed; the end of its log:" >&2
    tail -n 30 "$(ls -t "$work"/*.log | head -1)" >&2
    exit 1
  }
  touch "$prefix/.complete"
fi
echo "$prefix/bin/python3"
