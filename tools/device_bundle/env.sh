# Sourced on the machine that runs a device bundle:
#   . chorus/env.sh [PYTHON]       (default: python3 on PATH)
# PYTHON is a Python of the version the bundle was built for, with the same
# torch; chorus embeds it. Prints what the machine offers (facts.py), then
# points chorus at it: its libpython (the bundle's own copy, python-lib/, when
# that Python has none, or when CHORUS_BUNDLE_LIBPYTHON=1), its torch, and the
# bundle's libraries and Python packages.
_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_python=${1:-python3}
"$_python" "$_bundle/facts.py" || return 1
_exports=$("$_python" "$_bundle/facts.py" --shell "$_bundle") || return 1
eval "$_exports"
echo "bundle: libpython $CHORUS_LIBPYTHON"
unset _bundle _python _exports
