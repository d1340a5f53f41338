#!/usr/bin/env bash
# Installs (once) into chorus' cache what Triton's Python-backend example
# clients import beyond the venv (tritonclient and numpy are there): requests,
# which the custom_metrics client uses. A folder to put on their PYTHONPATH
# (make triton-examples does), kept apart from the venv so that the venv's key,
# and the build configured over it, stay as they are. pip's cache keeps
# reinstalls offline.
#
#   tools/install-example-client-deps.sh PYTHON   -> .../peers/example-client-deps-<hash>
set -euo pipefail
python="$1"
packages="requests==2.32.3 charset-normalizer==3.4.2 idna==3.10 urllib3==2.5.0 certifi==2025.7.14"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/chorus/peers"
home="$cache/example-client-deps-$(echo "$packages" | sha256sum | cut -c1-12)"
if [ ! -f "$home/.complete" ]; then
  echo "install-example-client-deps: installing $packages" >&2
  rm -rf "$home"
  mkdir -p "$home"
  # shellcheck disable=SC2086  # one word per package
  "$python" -m pip install -q --no-deps --target "$home" $packages >&2
  touch "$home/.complete"
fi
echo "$home"
