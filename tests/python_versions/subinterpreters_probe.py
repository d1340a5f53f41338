"""What happens when numpy and torch are imported where CPython itself offers parallel
Python: a PEP 734 interpreter (`concurrent.interpreters`, 3.14: each has its own GIL) and
the threads of a free-threaded build (3.13t/3.14t). Prints one JSON object.

    python subinterpreters_probe.py

Each attempt runs in a fresh child process (an extension may crash its interpreter):
  subinterpreter.<module>  `import <module>` in concurrent.interpreters.create()
  legacy.<module>          the same in a legacy subinterpreter (shared GIL, the config
                           that still admits single-phase extension modules)
  threads.<module>         `import <module>` and a little work in 2 threads at once
                           (free-threaded builds: whether the GIL came back on)
Each gives {"ok", "error" (the error's last line, or how the child died), "warnings",
"gil_enabled" (threads only)}.
docs/interpreter.md ("Python versions") states the findings."""

import json
import subprocess
import sys
import sysconfig

MODULES = ["numpy", "torch"]

# Each child prints one JSON line: {"ok", "error", "warnings", "gil_enabled"}.
PRELUDE = """
import json, sys, warnings
warnings.simplefilter("always")
def report(ok, error=None, caught=(), gil=None):
    print(json.dumps({{"ok": ok, "error": error, "gil_enabled": gil,
                      "warnings": sorted({{f"{{w.category.__name__}}: {{w.message}}"
                                          for w in caught}})}}))
"""

SUBINTERPRETER = PRELUDE + """
import concurrent.interpreters as interpreters
interp = interpreters.create()
try:
    interp.exec("import {module}; x = {module}.ones(3).sum()")
    report(True)
except interpreters.ExecutionFailed as e:
    lines = [line for line in e.excinfo.msg.splitlines() if line.strip()]
    report(False, f"{{e.excinfo.type.__name__}}: {{lines[-1] if lines else ''}}")
finally:
    interp.close()
"""

LEGACY = PRELUDE + """
import _interpreters
interp = _interpreters.create("legacy")
failure = _interpreters.exec(interp, "import {module}; x = {module}.ones(3).sum()")
_interpreters.destroy(interp)
report(failure is None, None if failure is None else f"{{failure.type.__name__}}: {{failure.msg}}")
"""

THREADS = PRELUDE + """
import threading
results = []
with warnings.catch_warnings(record=True) as caught:
    def work():
        import {module}
        results.append(float({module}.ones(1000).sum()))
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads: t.start()
    for t in threads: t.join()
report(results == [1000.0, 1000.0], None, caught, getattr(sys, "_is_gil_enabled", lambda: True)())
"""


def attempt(code):
    """The child's report, or {"ok": False, "error": how it died} when it printed none."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    errors = [line for line in done.stderr.strip().splitlines() if line.strip()]
    died = f"killed by signal {-done.returncode}" if done.returncode < 0 else (
        errors[-1] if errors else f"exit status {done.returncode}")
    return {"ok": False, "error": died, "gil_enabled": None, "warnings": []}


def main():
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    result = {"python": sys.version.split()[0], "free_threaded": free_threaded}
    for module in MODULES:
        if sys.version_info >= (3, 14):
            result[f"subinterpreter.{module}"] = attempt(SUBINTERPRETER.format(module=module))
            result[f"legacy.{module}"] = attempt(LEGACY.format(module=module))
        if free_threaded:
            result[f"threads.{module}"] = attempt(THREADS.format(module=module))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
