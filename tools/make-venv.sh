#!/usr/bin/env bash
# Creates (once) the venv that a requirements file under tools/requirements/
# describes and prints its Python. The venv lives in chorus' cache, named after
# the file and keyed by its contents, so clones and CI runs share it and an
# edited pin gets a fresh one; pip's own cache keeps reinstalls offline-fast.
#
#   tools/make-venv.sh tools/requirements/torch-2.14.txt   -> .../venvs/torch-2.14-<hash>/bin/python
#   tools/make-venv.sh REQUIREMENTS BASE_PYTHON             (a venv of another Python)
set -euo pipefail
requirements="$1"
# Debian's by default, built --enable-shared (chorus embeds libpython).
base_python="${2:-/usr/bin/python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/venvs"
key=$(sha256sum "$requirements" | cut -c1-12)
prefix=""
if [ $# -ge 2 ]; then  # keyed by the base Python too
  key=$( (cat "$requirements"; realpath "$base_python") | sha256sum | cut -c1-12)
  prefix="py$("$base_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-"
fi
venv="$cache/$prefix$(basename "$requirements" .txt)-$key"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  echo "make-venv: creating $venv from $requirements (downloads its packages: torch is several GB)" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$base_python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q -r "$requirements" >&2
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
