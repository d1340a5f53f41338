#!/usr/bin/env bash
# Installs (once) TorchServe's Python packages, the pinned torchserve (`ts`, the
# handler package chorus runs .mar archives with) and torch-model-archiver
# (tools/requirements/torchserve.txt), into PYTHON, the venv chorus embeds
# (make does it for chorus' own venvs; a venv of the user's is left as it is). With --frontend, also what TorchServe's own server
# needs, the peer of `make bench-peers` and `make bench-density`: Debian's
# Java 17 when no Java 17+ is on PATH (apt-get). Idempotent: prints nothing
# and touches nothing when all is present; prints only errors otherwise. pip's
# cache keeps reinstalls offline.
#
#   tools/install-torchserve.sh PYTHON [--frontend]
set -euo pipefail
python="$1"
frontend="${2:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
requirements="$here/requirements/torchserve.txt"
log="$(mktemp /tmp/chorus-install-torchserve.XXXXXX)"
trap 'rm -f "$log"' EXIT

needs_java=false
if [ "$frontend" = "--frontend" ]; then
  major=0
  if command -v java >/dev/null 2>&1; then
    major=$(java -version 2>&1 | sed -n 's/.* version "\([0-9]*\).*/\1/p' | head -1)
  fi
  [ "${major:-0}" -lt 17 ] && needs_java=true
fi
if $needs_java; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine may have no package lists yet; refresh them once if the install fails.
  if ! $sudo apt-get install -y -q --no-install-recommends openjdk-17-jre-headless >"$log" 2>&1; then
    $sudo apt-get update -q >>"$log" 2>&1
    $sudo apt-get install -y -q --no-install-recommends openjdk-17-jre-headless >>"$log" 2>&1 || {
      cat "$log" >&2
      exit 1
    }
  fi
fi

# Present when every pin in the requirements file is installed at its version.
if ! "$python" - "$requirements" <<'PY' 2>/dev/null
import sys
from importlib import metadata
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        if metadata.version(name) != version:
            sys.exit(1)
PY
then
  "$python" -m pip install -q --disable-pip-version-check -r "$requirements" >"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
fi
