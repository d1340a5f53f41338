"""The benchmark suite: chorus against the ways Python models are served today.

    suite.py --bin build/bin --out build/bench [--models a,b] [--workers 1,2,4]
             [--ratio-workers 2] [--rounds 3] [--measure-s 1.5] [--short]
             [--ft-python PATH] [--footprint-workers 4]

For each model (models.py) and each worker count N, on the same inputs in one
run, each cell in a fresh process:
  eager        plain Python, one thread (N = 1 only: the base)
  threads      one Python interpreter, N threads
  processes    N Python worker processes, each holding the model
  torchscript  the traced model on libtorch, N threads (models that trace)
  chorus       the Python model in chorus, N interpreters, N threads
  export       its torch.export program in chorus, N interpreters, N threads
               (models that export)
  aoti         the program compiled by AOTInductor, run by chorus from C++ with
               no interpreter, N threads (models that export)
  free_threaded  N threads in one free-threaded CPython process (3.14t), run by
               --ft-python (default: $FT_PYTHON); without one the mode is skipped
               and suite.json's "free_threaded" says why
  reference    eager run by --reference-python (N = 1 only; e.g. Debian's python3
               beside a CPython chorus was built for, docs/interpreter.md)
Each cell reports throughput (items/s), p50/p99 latency, RSS of all its workers
and launch-to-first-result time: the medians over --rounds runs, interleaved
with the other modes at that N. Per model, at N = --ratio-workers, each ratio
is the median of its values in the rounds (cells of one round ran side by side):
  chorus_vs_threads            throughput, chorus over threads
  chorus_vs_processes_memory   RSS of the N processes over chorus' RSS
  python_vs_torchscript        throughput, chorus (Python) over TorchScript
  python_vs_aoti               throughput, chorus (Python) over AOTInductor
  python_vs_export             throughput, chorus (Python) over its torch.export program
  chorus_vs_processes          throughput, chorus over processes
  chorus_vs_processes_footprint  as the memory ratio, with pages the processes
                               share (libtorch's code) counted once
  chorus_vs_free_threaded      throughput, chorus over the free-threaded process
at N = 1 (when run):
  chorus_n1_vs_python          throughput, chorus with one interpreter over plain
                               Python (eager) of the Python it embeds
  chorus_n1_vs_reference_python  the same over --reference-python's eager
and at N = --footprint-workers (4; the largest N when 4 is not run):
  chorus_vs_free_threaded_footprint  the free-threaded process' footprint (its RSS)
                               over chorus' (its RSS), as for the processes
With --ft-python, free_threaded_probe.py's findings (which import re-enables the
GIL, torch.compile from 2 threads) go into suite.json under "free_threaded".
Writes OUT/suite.json (keyed by model), OUT/suite.md and the plots.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import models as registry  # noqa: E402
import report  # noqa: E402

# free_threaded runs just before chorus: the two cells of its ratios run back to back.
MODES = ["eager", "reference", "threads", "processes", "torchscript", "free_threaded", "chorus",
         "export", "aoti"]
PT2_MODES = ("export", "aoti")
PYTHON_MODES = ("eager", "threads", "processes", "free_threaded", "reference")
N1_MODES = ("eager", "reference")
FT_MODE = "free_threaded"
SHORT_MODELS = ["mlp", "control_flow"]
RATIOS = ["chorus_vs_threads", "chorus_vs_processes_memory", "python_vs_torchscript",
          "chorus_vs_processes", "chorus_vs_processes_footprint", "python_vs_aoti",
          "python_vs_export", "chorus_vs_free_threaded"]
# Ratios taken at N = 1.
N1_RATIOS = ["chorus_n1_vs_python", "chorus_n1_vs_reference_python"]
# Ratios taken at N = --footprint-workers rather than --ratio-workers.
FOOTPRINT_RATIOS = ["chorus_vs_free_threaded_footprint"]
FT_RATIOS = ["chorus_vs_free_threaded", "chorus_vs_free_threaded_footprint"]
# What --ft-python is: its version, whether it is a free-threaded build, its torch.
FT_CHECK = """import json, sys, sysconfig
try:
    import torch
    version = torch.__version__
except ImportError:
    version = None
print(json.dumps({"python": sys.version.split()[0], "torch": version,
                  "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED"))}))
"""


class _InputsHolder(torch.nn.Module):
    def __init__(self, inputs):
        super().__init__()
        self.inputs = inputs

    def forward(self):
        return self.inputs


def prepare(model_name, work):
    """Writes the model's chorus archive (and TorchScript, where it traces; a torch.export
    program and its AOTInductor package, where it exports) into `work`."""
    from chorus.package import create_package
    spec = registry.MODELS[model_name]
    model, inputs = spec.build()
    model.eval()
    archive = os.path.join(work, f"{model_name}.pt")
    create_package(archive, model, inputs, name=model_name, progress=False)
    # The same inputs, for the C++ cells: a scripted holder libtorch loads.
    holder = torch.jit.script(_InputsHolder(list(inputs)))
    torch.jit.save(holder, os.path.join(work, f"{model_name}.inputs.pt"))
    script = None
    if spec.torchscript:
        script = os.path.join(work, f"{model_name}.ts")
        # Tracing warns where Python floats of shapes become constants; the
        # inputs' shapes are the ones measured, so that is what we want.
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            traced = (torch.jit.trace(model, inputs, check_trace=False)
                      if spec.torchscript == "trace" else torch.jit.script(model))
        torch.jit.save(traced, script)
    if spec.exports:
        write_pt2(model, inputs, os.path.join(work, model_name))
    return archive, script


def write_pt2(model, inputs, stem):
    """STEM.export.pt2 (torch.export, the measured shapes) and STEM.aoti.pt2 (compiled by
    AOTInductor, its signature in the package's metadata)."""
    # The vector ISA probe is skipped: where Debian's libtorch sits in Python's library
    # folder, the probe links against it and fails, and inductor would emit scalar code
    # (docs/package-format.md). The compiler's cache is the Makefile's.
    os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    with torch.no_grad():
        program = torch.export.export(model, inputs)
        outputs = model(*inputs)
    torch.export.save(program, stem + ".export.pt2")
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]

    def specs(tensors, prefix):
        return [{"name": f"{prefix}{i}", "dtype": str(t.dtype).removeprefix("torch."),
                 "shape": list(t.shape)} for i, t in enumerate(tensors)]

    signature = {"inputs": specs(inputs, "input"), "outputs": specs(outputs, "output")}
    torch._inductor.aoti_compile_and_package(
        program, package_path=stem + ".aoti.pt2",
        inductor_configs={"aot_inductor.metadata": {"chorus.signature": json.dumps(signature)}})


def run_cell(command, env):
    """Runs one cell's process; returns its JSON result (or raises with its stderr)."""
    launched = time.time()
    done = subprocess.run(command + ["--launched-at", repr(launched)], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cell_command(mode, workers, archive, script, args):
    timing = ["--warmup-s", str(args.warmup_s), "--measure-s", str(args.measure_s)]
    if mode in PYTHON_MODES:
        python = {FT_MODE: args.ft_python, "reference": args.reference_python}.get(
            mode, sys.executable)
        runner_mode = "eager" if mode == "reference" else mode
        return [python, os.path.join(HERE, "python_runner.py"), "--archive", archive,
                "--mode", runner_mode, "--workers", str(workers)] + timing
    stem = archive[:-len(".pt")]
    model = {"chorus": archive, "torchscript": script, "export": stem + ".export.pt2",
             "aoti": stem + ".aoti.pt2"}[mode]
    return [os.path.join(args.bin, "bench_suite_runner"), "--model", model,
            "--inputs", archive[:-len(".pt")] + ".inputs.pt", "--workers", str(workers)] + timing


def ratios(cells, n):
    def get(mode, key):
        return cells.get(mode, {}).get(str(n), {}).get(key)

    def ratio(a, b):
        return a / b if a is not None and b else None

    return {
        "chorus_vs_threads": ratio(get("chorus", "items_per_s"), get("threads", "items_per_s")),
        "chorus_vs_processes_memory": ratio(get("processes", "rss_mib"), get("chorus", "rss_mib")),
        "python_vs_torchscript": ratio(get("chorus", "items_per_s"),
                                       get("torchscript", "items_per_s")),
        "chorus_vs_processes": ratio(get("chorus", "items_per_s"),
                                     get("processes", "items_per_s")),
        "chorus_vs_processes_footprint": ratio(get("processes", "footprint_mib"),
                                               get("chorus", "footprint_mib")),
        "python_vs_aoti": ratio(get("chorus", "items_per_s"), get("aoti", "items_per_s")),
        "python_vs_export": ratio(get("chorus", "items_per_s"), get("export", "items_per_s")),
        "chorus_vs_free_threaded": ratio(get("chorus", "items_per_s"),
                                         get(FT_MODE, "items_per_s")),
        "chorus_vs_free_threaded_footprint": ratio(get(FT_MODE, "footprint_mib"),
                                                   get("chorus", "footprint_mib")),
        "chorus_n1_vs_python": ratio(get("chorus", "items_per_s"), get("eager", "items_per_s")),
        "chorus_n1_vs_reference_python": ratio(get("chorus", "items_per_s"),
                                               get("reference", "items_per_s")),
    }


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def median_cell(samples):
    """Per metric, the median over the rounds' results of one cell; a flag (gil_enabled)
    holds if it held in any round, a text (gil_warning) is the first round's that has one."""
    cell = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        if all(isinstance(v, bool) for v in values):
            cell[key] = any(values)
        elif all(isinstance(v, (int, float)) for v in values):
            cell[key] = median(values)
        else:
            cell[key] = next((v for v in values if v is not None), None)
    cell["rounds"] = len(samples)
    return cell


def cell_modes(name, n, script, args):
    exports = registry.MODELS[name].exports
    return [m for m in args.modes
            if not (m in N1_MODES and n != 1) and not (m == "torchscript" and script is None)
            and not (m in PT2_MODES and not exports)]


def run_round(modes, n, archive, script, args, env, skipped):
    """{mode: result} for one round at N. A free_threaded cell that fails (a model the
    free-threaded Python cannot run, such as one needing a package it lacks) skips that
    mode for the model, its reason kept in `skipped`; any other failure stops the suite."""
    results = {}
    for mode in modes:
        if mode in skipped:
            continue
        try:
            results[mode] = run_cell(cell_command(mode, n, archive, script, args), env)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            if mode != FT_MODE:
                raise
            lines = str(e).strip().splitlines()
            skipped[mode] = f"N={n}: " + (lines[-1] if lines else type(e).__name__)[:500]
            print(f"  {mode} skipped: {skipped[mode]}", flush=True)
    return results


def print_cell(name, mode, n, result):
    gil = "  (GIL ON)" if result.get("gil_enabled") else ""
    print(f"  {name:13s} {mode:13s} N={n}  {result['items_per_s']:9.1f} items/s  "
          f"p50 {result['p50_ms']:7.2f} ms  RSS {result['rss_mib']:7.1f} MiB  "
          f"first result {result['first_result_s']:5.2f} s{gil}", flush=True)


def median_ratios(per_round, keys):
    """{ratio: median over the rounds, ratio_rounds: the values} for `keys`."""
    entry = {}
    for key in keys:
        values = [r[key] for r in per_round if r[key] is not None]
        entry[key] = median(values) if values else None
        entry[key + "_rounds"] = values
    return entry


def run_model(name, args, env, work):
    """Every cell of one model, in `args.rounds` interleaved rounds per N (the
    machine drifts: cells compared in a ratio run minutes apart at most)."""
    archive, script = prepare(name, work)
    cells, skipped, per_round = {}, {}, {}
    for n in args.workers:
        modes = cell_modes(name, n, script, args)
        rounds = [run_round(modes, n, archive, script, args, env, skipped)
                  for _ in range(args.rounds)]
        per_round[n] = [ratios({mode: {str(n): r[mode]} for mode in r}, n) for r in rounds]
        for mode in modes:
            samples = [r[mode] for r in rounds if mode in r]
            if samples:
                cells.setdefault(mode, {})[str(n)] = median_cell(samples)
                print_cell(name, mode, n, cells[mode][str(n)])
    entry = {"description": registry.MODELS[name].description,
             "torchscript": registry.MODELS[name].torchscript,
             "exports": registry.MODELS[name].exports, "cells": cells}
    # Each ratio is the median of its per-round values: the two cells of one
    # round ran seconds apart, so the machine's drift cancels within a round.
    entry.update(median_ratios(per_round[args.ratio_workers], RATIOS))
    entry.update(median_ratios(per_round[args.footprint_workers], FOOTPRINT_RATIOS))
    if 1 in per_round:
        entry.update(median_ratios(per_round[1], N1_RATIOS))
    if FT_MODE in cells:
        # Both free-threaded ratios at every N, for the plots and the docs.
        entry["free_threaded_by_n"] = {
            str(n): {k: v for k, v in median_ratios(per_round[n], FT_RATIOS).items()
                     if not k.endswith("_rounds")} for n in args.workers}
    if skipped:
        entry["skipped_modes"] = skipped
    return entry


def probe_free_threaded(args, env):
    """suite.json's "free_threaded": what --ft-python is, and free_threaded_probe.py's
    findings; or {"skipped": reason}, the mode then dropped from args.modes."""
    if FT_MODE not in args.modes:
        return {"skipped": "not among --modes"}
    reason, info = None, {}
    if not args.ft_python:
        reason = "no free-threaded Python given (--ft-python or FT_PYTHON)"
    else:
        try:
            done = subprocess.run([args.ft_python, "-c", FT_CHECK], env=env, timeout=300,
                                  capture_output=True, text=True)
            info = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
            reason = f"{args.ft_python} does not run: {e}"
        else:
            if not info["free_threaded_build"]:
                reason = f"{args.ft_python} (Python {info['python']}) is not free-threaded"
            elif info["torch"] is None:
                reason = f"{args.ft_python} cannot import torch"
    if reason:
        args.modes.remove(FT_MODE)
        print(f"free_threaded: skipped: {reason}", flush=True)
        return {"skipped": reason}
    entry = {"ft_python": args.ft_python, **info}
    if args.ft_probe:
        print("free_threaded: running free_threaded_probe.py", flush=True)
        try:
            done = subprocess.run([args.ft_python, os.path.join(HERE, "free_threaded_probe.py")],
                                  env=env, timeout=1800, capture_output=True, text=True)
            entry["probe"] = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError) as e:
            entry["probe"] = {"failed": str(e)[-500:]}
    return entry


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the build's bin folder")
    parser.add_argument("--out", required=True, help="folder for suite.json, .md, plots")
    parser.add_argument("--models", default=",".join(registry.MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--ratio-workers", type=int, default=2)
    parser.add_argument("--footprint-workers", type=int, default=4,
                        help="N of chorus_vs_free_threaded_footprint (the largest N if not run)")
    parser.add_argument("--warmup-s", type=float, default=0.5)
    parser.add_argument("--measure-s", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=None,
                        help="medians over this many runs (default 3; 5 with --short)")
    parser.add_argument("--short", action="store_true",
                        help="the CI form: mlp and control_flow, N=2, threads/processes/chorus")
    parser.add_argument("--name", default="suite", help="base name of the outputs")
    parser.add_argument("--ft-python", default=os.environ.get("FT_PYTHON") or None,
                        help="a free-threaded CPython (3.14t) with torch, for the "
                             "free_threaded mode (default: $FT_PYTHON; none: mode skipped)")
    parser.add_argument("--reference-python", default=None,
                        help="a Python with torch whose eager runs beside the rest at N=1 "
                             "(chorus_n1_vs_reference_python); none: the mode is skipped")
    parser.add_argument("--no-ft-probe", dest="ft_probe", action="store_false",
                        help="skip free_threaded_probe.py (a few minutes)")
    args = parser.parse_args()
    if args.short:
        args.models, args.modes, args.workers = (",".join(SHORT_MODELS),
                                                 "threads,processes,chorus", "2")
    if args.rounds is None:
        args.rounds = 5 if args.short else 3
    args.models = args.models.split(",")
    args.modes = args.modes.split(",")
    if not args.reference_python and "reference" in args.modes:
        args.modes.remove("reference")
    args.workers = [int(n) for n in args.workers.split(",")]
    if args.ratio_workers not in args.workers:
        parser.error(f"--ratio-workers {args.ratio_workers} is not among --workers")
    if args.footprint_workers not in args.workers:
        args.footprint_workers = max(args.workers)
    unknown = set(args.models) - set(registry.MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; known: {sorted(registry.MODELS)}")
    return args


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = os.path.join(args.out, f"{args.name}-models")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    started = time.time()
    result = {}
    free_threaded = probe_free_threaded(args, env)
    for name in args.models:
        result[name] = run_model(name, args, env, work)
    result["free_threaded"] = free_threaded
    result["suite"] = {"workers": args.workers, "ratio_workers": args.ratio_workers,
                       "footprint_workers": args.footprint_workers, "rounds": args.rounds,
                       "warmup_s": args.warmup_s, "measure_s": args.measure_s,
                       "modes": args.modes, "short": args.short, "cpus": os.cpu_count(),
                       "torch": torch.__version__, "python": sys.version.split()[0],
                       "executable": sys.executable, "reference_python": args.reference_python,
                       "seconds": time.time() - started}
    path = os.path.join(args.out, f"{args.name}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    written = report.write(result, args.out, args.name)
    print(report.ratio_table(result))
    print(f"wrote {path}, " + ", ".join(written))


if __name__ == "__main__":
    main()
