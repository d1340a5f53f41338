#!/usr/bin/env bash
# Creates (once) the venv that a requirements file under tools/requirements/
# describes and prints its Python. The venv lives in chorus' cache, named after
# the file and keyed by its contents, so clones and CI runs share it and an
# edited pin gets a fresh one; pip's own cache keeps reinstalls offline-fast.
#
#   tools/make-venv.sh tools/requirements/torch-2.14.txt   -> .../venvs/torch-2.14-<hash>/bin/python
set -euo pipefail
requirements="$1"
base_python=/usr/bin/python3  # Debian's, built --enable-shared (chorus embeds libpython)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/venvs"
key=$(sha256sum "$requirements" | cut -c1-12)
venv="$cache/$(basename "$requirements" .txt)-$key"
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
