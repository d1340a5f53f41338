#!/usr/bin/env bash
# The device bundle tried here as the GPU machine will run it: unpacked into a
# fresh folder, pointed at PYTHON (a Python of the device's version with its
# torch) and at nothing of this machine's build; then tests/gpu/run.sh with
# every step that needs no GPU. Run twice: with PYTHON's own libpython, and
# with the bundle's copy (for a device Python that has none).
#   rehearse.sh BUNDLE PYTHON
set -euo pipefail
bundle=$(realpath "$1")
python=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/build/device-rehearsal}
# Nothing of the build trees may be found on the way.
unset LD_LIBRARY_PATH PYTHONPATH CHORUS_PYTHON CHORUS_LIBPYTHON CHORUS_TORCH_PYTHON_LIB
CHORUS_REHEARSAL=1 OUT=$out/own-libpython PYTHON=$python "$root/tests/gpu/run.sh" "$bundle"
CHORUS_REHEARSAL=1 CHORUS_BUNDLE_LIBPYTHON=1 OUT=$out/bundled-libpython PYTHON=$python \
  "$root/tests/gpu/run.sh" "$bundle"
echo "rehearsal: passed (logs in $out)"
