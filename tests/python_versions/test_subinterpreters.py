"""What docs/interpreter.md states about CPython's own parallel Pythons, checked on the
Python that runs this (3.14 and later: concurrent.interpreters; a free-threaded build:
its threads). A change in numpy, torch or CPython that makes a statement stale fails here."""

import json
import os
import subprocess
import sys
import sysconfig

import pytest

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "subinterpreters_probe.py")


@pytest.fixture(scope="module")
def probe():
    done = subprocess.run([sys.executable, PROBE], capture_output=True, text=True, timeout=1800,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.version_info < (3, 14), reason="concurrent.interpreters is 3.14's")
def test_numpy_and_torch_do_not_load_in_a_pep_734_interpreter(probe):
    numpy = probe["subinterpreter.numpy"]
    assert not numpy["ok"]
    assert "does not support loading in subinterpreters" in numpy["error"]
    # torch is refused too, and not cleanly: its import takes the process down.
    assert not probe["subinterpreter.torch"]["ok"], probe["subinterpreter.torch"]
    # A legacy subinterpreter (one GIL shared with the main one) takes numpy but not torch.
    assert probe["legacy.numpy"]["ok"], probe["legacy.numpy"]
    assert not probe["legacy.torch"]["ok"], probe["legacy.torch"]


@pytest.mark.skipif(not sysconfig.get_config_var("Py_GIL_DISABLED"),
                    reason="not a free-threaded build")
def test_numpy_and_torch_run_in_free_threaded_threads_without_the_gil(probe):
    for module in ("numpy", "torch"):
        found = probe[f"threads.{module}"]
        assert found["ok"], found
        assert found["gil_enabled"] is False, found
