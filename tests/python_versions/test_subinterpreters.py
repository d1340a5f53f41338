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


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
REFUSED = "does not support loading in subinterpreters"


@pytest.mark.skipif(sys.version_info < (3, 14), reason="concurrent.interpreters is 3.14's")
def test_numpy_and_torch_do_not_load_in_a_pep_734_interpreter(probe):
    numpy = probe["subinterpreter.numpy"]
    assert not numpy["ok"]
    assert REFUSED in numpy["error"]
    # torch is refused too, and not cleanly where the GIL is on: its import takes the
    # process down. A free-threaded build raises instead (torch._C's types are set up once
    # per process: an internal assert on the second setup).
    for config in ("subinterpreter", "legacy"):
        torch = probe[f"{config}.torch"]
        assert not torch["ok"], torch
        if FREE_THREADED:
            assert torch["error"].startswith("ImportError"), torch
        else:
            assert torch["error"] == "killed by signal 11", torch


@pytest.mark.skipif(sys.version_info < (3, 14), reason="concurrent.interpreters is 3.14's")
def test_numpy_loads_in_a_legacy_subinterpreter_only_where_the_gil_is_on(probe):
    # A legacy subinterpreter shares the main one's GIL and does not check extensions, so
    # numpy loads; a free-threaded build checks them there too (CPython gh-117649).
    numpy = probe["legacy.numpy"]
    if FREE_THREADED:
        assert not numpy["ok"] and REFUSED in numpy["error"], numpy
    else:
        assert numpy["ok"], numpy


@pytest.mark.skipif(not FREE_THREADED, reason="not a free-threaded build")
def test_numpy_and_torch_run_in_free_threaded_threads_without_the_gil(probe):
    for module in ("numpy", "torch"):
        found = probe[f"threads.{module}"]
        assert found["ok"], found
        assert found["gil_enabled"] is False, found
