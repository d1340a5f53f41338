"""What breaks under free-threaded CPython: run by a 3.13t/3.14t Python, prints one JSON object.

    FT_PYTHON free_threaded_probe.py [--trials 3] [--calls 200] [--timeout-s 300]

imports: for each module the suite's free_threaded mode (or torch.compile) imports,
  in a fresh process of this Python: whether the GIL is still off after importing it,
  and the RuntimeWarning CPython prints when a module that has not declared itself
  free-threading-safe turns the GIL back on (for the whole process).
compile_one_thread: torch.compile of the suite's MLP called from one thread (does
  torch.compile work at all on this build).
compile_two_threads: the same compiled MLP first called from 2 threads at once
  (pytorch issue 168042: dynamo and inductor are not thread-safe), --trials times,
  each after torch._dynamo.reset() (inductor's FX graph cache off, so each trial
  compiles again); then --calls calls from each thread, each thread cycling through
  its own batch sizes (so the threads also recompile at once, for new and then
  dynamic shapes). Importing torch.compile's
  stack turns the GIL back on (see imports), so the threads compile under the GIL.
compile_two_threads_gil_off: the same with PYTHON_GIL=0, which keeps the GIL off
  whatever is imported: torch.compile truly concurrent.
compile_in_each_thread_gil_off: as that, but each thread calls torch.compile on the
  model itself (a compiled model per worker, as each chorus interpreter would have).
Each trial also reports graphs_compiled (dynamo's count: the compiles did happen). Every output is
  compared with the eager model's (allclose, rtol 1e-4): per trial, each thread's
  outcome (ok, wrong result, or the exception), the warnings raised and whether the
  GIL was on afterwards.
Each part runs in its own child process with a timeout, so a crash or a hang is
recorded (its exit status, the end of its stderr) instead of ending the probe. Each
compile child has a fresh temporary inductor cache.
suite.py embeds this object in suite.json under "free_threaded" when --ft-python is given.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile

# Imports probed, each alone in a fresh process: torch and what the suite's
# free_threaded cells import (torch.package, chorus' package format, torchvision
# for the resnet18 and mobilenet_v3 models), then what torch.compile pulls in.
IMPORTS = ["numpy", "torch", "torch.package", "chorus.package", "torchvision",
           "torch._dynamo", "torch._inductor", "triton"]

IMPORT_CHILD = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        __import__(sys.argv[1])
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
said = [str(w.message) for w in caught if "GIL" in str(w.message)]
print(json.dumps({"module": sys.argv[1], "error": error,
                  "gil_enabled_after": sys._is_gil_enabled(),
                  "gil_warning": said[0] if said else None}))
"""

COMPILE_CHILD = r"""
import json, sys, threading, warnings
import torch
threads, trials, calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
own = sys.argv[4] == "own"  # each thread compiles the model itself, else one compiled model
from torch._dynamo.utils import counters
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                            torch.nn.ReLU(), torch.nn.Linear(64, 4)).eval()
# Each thread cycles through its own batch sizes, so that the threads also
# recompile at once (new shapes, then dynamic ones) after their first call.
batches = [[8, 3, 5, 1, 7, 2], [8, 6, 4, 2, 1, 5]]
inputs = [[torch.randn(b, 16, generator=torch.Generator().manual_seed(10 * i + b))
           for b in batches[i % 2]] for i in range(threads)]
with torch.no_grad():
    expected = [[model(x) for x in xs] for xs in inputs]

def outcome(compiled, i, gate, record):
    try:
        gate.wait()
        if own:
            compiled = torch.compile(model)
        with torch.no_grad():
            wrong = 0
            for call in range(1 + calls):
                k = call % len(inputs[i])
                wrong += not torch.allclose(compiled(inputs[i][k]), expected[i][k], rtol=1e-4,
                                            atol=1e-5)
        record[i] = "ok" if not wrong else f"wrong result in {wrong} of {1 + calls} calls"
    except BaseException as e:
        said = str(e).strip().splitlines()
        record[i] = f"{type(e).__name__}: {said[0][:300] if said else ''}"

results = []
for trial in range(trials):
    torch._dynamo.reset()
    counters.clear()
    compiled = None if own else torch.compile(model)
    gate, record = threading.Barrier(threads), [None] * threads
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = [threading.Thread(target=outcome, args=(compiled, i, gate, record))
                for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    results.append({"threads": record, "gil_enabled_after": sys._is_gil_enabled(),
                    "graphs_compiled": counters["stats"]["unique_graphs"],
                    "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:300]}"
                                        for w in caught})})
print(json.dumps({"trials": results}))
"""


def child(code, argv, timeout_s, env):
    """Runs `code` in a fresh process of this Python; its last stdout line parsed, or
    what happened instead (exit status, the end of stderr, a timeout)."""
    try:
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"no answer within {timeout_s} s (hung)"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"failed": f"exit status {done.returncode}",
                "stderr_tail": done.stderr.strip().splitlines()[-8:]}
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--timeout-s", type=int, default=300)
    args = parser.parse_args()
    # PYTHON_GIL would force the GIL's state and hide what the imports do.
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    result = {"python": sys.version.split()[0], "executable": sys.executable,
              "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED"))}
    result["imports"] = [child(IMPORT_CHILD, [name], args.timeout_s, env) for name in IMPORTS]
    for entry, name in zip(result["imports"], IMPORTS):
        entry.setdefault("module", name)
    # Which import turned the GIL on, and the extension module the warning names.
    result["gil_re_enabled_by"] = {
        e["module"]: (re.findall(r"load module '([^']+)'", e["gil_warning"]) or ["?"])[0]
        for e in result["imports"] if e.get("gil_warning")}
    # Inductor's FX graph cache off: every trial lowers and generates its code again
    # (the racy part), and each child has its own fresh compiler cache.
    env.update(TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_VEC_ISA_OK="1")
    for key, threads, trials, how, gil in (
            ("compile_one_thread", 1, 1, "shared", None),
            ("compile_two_threads", 2, args.trials, "shared", None),
            ("compile_two_threads_gil_off", 2, args.trials, "shared", "0"),
            ("compile_in_each_thread_gil_off", 2, args.trials, "own", "0")):
        with tempfile.TemporaryDirectory(prefix="ft-probe-inductor-") as cache:
            run_env = dict(env, TORCHINDUCTOR_CACHE_DIR=cache)
            if gil is not None:
                run_env["PYTHON_GIL"] = gil
            result[key] = child(COMPILE_CHILD, [str(threads), str(trials), str(args.calls), how],
                                args.timeout_s, run_env)
    try:
        import torch
        result["torch"] = torch.__version__
    except ImportError as e:
        result["torch"] = f"not importable: {e}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
