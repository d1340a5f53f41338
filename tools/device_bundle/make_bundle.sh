#!/usr/bin/env bash
# Writes a device bundle: chorus' binaries, libraries, Python package and test
# binaries from BUILD (configured for the device's Python and torch), plus every
# shared library they need that is neither torch's, libpython nor the C
# library's (gRPC, protobuf, abseil, libzip, spdlog, fmt, OpenSSL, ...), a copy
# of libpython for a device whose Python has none, and the Python client's
# packages for that Python. Debug info is stripped.
#   make_bundle.sh BUILD PYTHON OUT.tar.gz [MAX_MIB]
set -euo pipefail
build=$(cd "$1" && pwd)
python=$2
out=$3
max_mib=${4:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
stage_root=$(mktemp -d)
trap 'rm -rf "$stage_root"' EXIT
stage=$stage_root/chorus
mkdir -p "$stage"/{bin,lib,tests,python-lib,python-deps,share/chorus}

# chorus itself.
cp "$build"/bin/chorus-server "$build"/bin/chorus-package-check "$build"/bin/bench_suite_runner "$stage/bin/"
cp "$build"/lib/*.so "$stage/lib/"
for test in interpreter_test placement_test model_test libcache_test; do
  cp "$build/bin/tests/$test" "$stage/tests/"
done
[ -x "$build/gpu/nccl_test" ] && cp "$build/gpu/nccl_test" "$stage/tests/"
cp -rL "$build/share/chorus/python" "$stage/share/chorus/python"
find "$stage/share" -name __pycache__ -prune -exec rm -rf {} +
cp "$here"/env.sh "$here"/facts.py "$here"/check_libraries.sh "$stage/"

# The Python the bundle embeds: its libpython (for a device Python without
# one) and the client's packages for its version.
eval "$("$python" "$here/facts.py" --shell "$stage")"
cp -L "$CHORUS_LIBPYTHON" "$stage/python-lib/$(basename "$CHORUS_LIBPYTHON")"
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
"$python" -m pip download -q --only-binary=:all: --no-deps --python-version "$version" \
  --platform manylinux2014_x86_64 --dest "$stage_root/wheels" \
  -r "$root/tools/requirements/device-bundle-client.txt"
for wheel in "$stage_root"/wheels/*.whl; do
  "$python" -m zipfile -e "$wheel" "$stage/python-deps"
done

# Every library the ELF files need from outside torch, libpython and the C
# library, until none is missing (a copied library may need others).
system='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+)\.so'
torch_lib=$(dirname "$CHORUS_TORCH_PYTHON_LIB")
while true; do
  added=0
  while IFS= read -r file; do
    file -b "$file" | grep -q '^ELF' || continue
    while read -r name _ path _; do
      [[ "$name" =~ $system ]] && continue
      [ -e "$stage/lib/$name" ] && continue
      case "$path" in "$torch_lib"/*|*/site-packages/nvidia/*|"$stage"/*|not) continue ;; esac
      [[ "$name" == libpython* ]] && continue
      case "$path" in /usr/local/cuda/*) continue ;; esac  # the torch wheel's nvidia libraries stand in
      cp -L "$path" "$stage/lib/$name"
      added=$((added + 1))
    done < <(ldd "$file" 2>/dev/null | grep '=>' || true)
  done < <(find "$stage/bin" "$stage/lib" "$stage/tests" -type f)
  [ $added = 0 ] && break
done
find "$stage/bin" "$stage/lib" "$stage/tests" "$stage/python-lib" -type f \
  -exec sh -c 'if file -b "$1" | grep -q ^ELF && ! strip --strip-debug "$1" 2>/dev/null; then
                echo "make_bundle: strip failed on ${1##*/chorus/} (kept as it is)" >&2; fi' _ {} \;

mkdir -p "$(dirname "$out")"
tar -C "$stage_root" -czf "$out" chorus
size_mib=$(( $(stat -c %s "$out") / 1048576 ))
echo "device bundle: $out, $size_mib MiB ($(ls "$stage/lib" | wc -l) libraries)"
if [ "$size_mib" -gt "$max_mib" ]; then
  echo "device bundle: over $max_mib MiB" >&2
  exit 1
fi
