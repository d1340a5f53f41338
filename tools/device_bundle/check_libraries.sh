#!/usr/bin/env bash
# Checks that every ELF file of an unpacked bundle resolves each library it
# needs into the bundle, torch (and its nvidia wheels), libpython or the C
# library; prints the others and fails. Run after sourcing env.sh.
#   check_libraries.sh BUNDLE_DIR
set -euo pipefail
bundle=$(cd "$1" && pwd)
allowed_roots=("$bundle/" "$(dirname "$CHORUS_TORCH_PYTHON_LIB")/" "$(dirname "$CHORUS_LIBPYTHON")/")
IFS=: read -r -a library_path <<< "$LD_LIBRARY_PATH"
for dir in "${library_path[@]}"; do
  case "$dir" in */nvidia/*) allowed_roots+=("$dir/") ;; esac
done
# The C library and the compiler's runtime: on every glibc system.
system='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+)\.so'
failures=0
checked=0
while IFS= read -r file; do
  file -b "$file" | grep -q '^ELF' || continue
  checked=$((checked + 1))
  while read -r name _ path _; do
    [[ "$name" =~ $system ]] && continue
    if [ "$path" = "not" ]; then
      echo "check_libraries: ${file#$bundle/}: $name not found" >&2
      failures=$((failures + 1))
      continue
    fi
    ok=0
    for root in "${allowed_roots[@]}"; do [[ "$path" == "$root"* ]] && ok=1; done
    if [ $ok = 0 ]; then
      echo "check_libraries: ${file#$bundle/}: $name from $path (outside the bundle, torch, libpython)" >&2
      failures=$((failures + 1))
    fi
  done < <(ldd "$file" 2>/dev/null | grep '=>' || true)
done < <(find "$bundle/bin" "$bundle/lib" "$bundle/tests" -type f)
echo "check_libraries: $checked ELF files, $failures libraries from outside"
[ $failures = 0 ]
