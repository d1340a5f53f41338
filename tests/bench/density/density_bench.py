"""make bench-density: many models on one host, chorus against the peers.

    density_bench.py --bin build/bin --out build/bench/density.json
                     [--sizes 20,50] [--interpreters 2,4]
                     [--stacks chorus,torchserve,processes] [--threads 8]
                     [--load-s 20] [--settle-s 5] [--quick] [--keep]

For each fleet size M (fleet.py: the first M of one fixed list of distinct
models: ResNet-18s, MobileNetV3s, BERT-style classifiers, iterative refiners
and MLPs, each with its own weights), each stack (fleet_stacks.py) serves all
M models, one stack at a time (they map the same libtorch files, so one
running beside another would lower its PSS):

  ready_s          from launching the stack until every model has answered
                   correctly once
  footprint        PSS summed over the stack's processes once it has answered
                   everything, served the load for --warmup-s (every worker's
                   first calls of every model) and been idle for --settle-s
                   (pss_mib; rss_mib beside it counts shared pages once per
                   process)
  load             --threads clients of load.py going round all M models for
                   --load-s: requests_per_s, p50/p99, errors

Then per M, for chorus with each interpreter count (the top-level keys: with
2 interpreters, the cores of this machine):
  footprint_vs_torchserve, footprint_vs_processes   peer PSS over chorus'
  ready_s_vs_torchserve, ready_s_vs_processes       peer ready_s over chorus'
  throughput_vs_processes, throughput_vs_torchserve chorus' requests/s over the peer's
and marginal_model_mib per stack: (footprint at the largest M - at the
smallest) / the models added, beside the mean weights of those models
(weights_mib), what the weights alone would take.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)

import fleet_stacks  # noqa: E402
import load  # noqa: E402
from fleet_stacks import Stack  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="chorus' build/bin")
    parser.add_argument("--out", default="build/bench/density.json")
    parser.add_argument("--sizes", default="20,50")
    parser.add_argument("--interpreters", default="2,4")
    parser.add_argument("--stacks", default="chorus,torchserve,processes")
    parser.add_argument("--threads", type=int, default=8, help="load generator clients")
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=10.0,
                        help="load before the footprint is read and the load measured")
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--start-timeout-s", type=float, default=900.0)
    parser.add_argument("--quick", action="store_true", help="fleets of 4 and 8, 5 s of load")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and logs")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.load_s, args.warmup_s, args.settle_s = "4,8", 5.0, 5.0, 2.0
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    args.interpreters = [int(i) for i in args.interpreters.split(",")]
    args.stacks = args.stacks.split(",")
    return args


def prepare(work, size):
    """Packages the fleet in a child process; returns prepared.json's contents."""
    subprocess.run([sys.executable, os.path.join(HERE, "fleet_models.py"), work, str(size)],
                   check=True)
    with open(os.path.join(work, "prepared.json")) as f:
        return json.load(f)


def repository(work, names):
    """A chorus model repository holding `names` (links to the packaged folders)."""
    folder = os.path.join(work, f"repository-{len(names)}")
    os.makedirs(folder, exist_ok=True)
    for name in names:
        link = os.path.join(folder, name)
        if not os.path.exists(link):
            os.symlink(os.path.join(work, "chorus", name), link)
    return folder


def stacks_for(args, work, models):
    """The stacks to measure on the fleet `models` ({name: spec})."""
    made = []
    for kind in args.stacks:
        if kind == "chorus":
            made += [fleet_stacks.ChorusFleet(args.bin, work, repository(work, list(models)), n)
                     for n in args.interpreters]
        elif kind == "torchserve":
            store = fleet_stacks.torchserve_store(sys.executable, work, models)
            made.append(fleet_stacks.TorchServeFleet(sys.executable, work, store, list(models)))
        elif kind == "processes":
            made.append(fleet_stacks.ProcessFleet(sys.executable, work, models))
        else:
            raise SystemExit(f"unknown stack {kind!r}")
    return made


def measure(args, stack, models, fleet):
    """One stack on one fleet: ready time, settled footprint, throughput."""
    started = time.monotonic()
    stack.start()
    try:
        try:
            ready_s = load.wait_all_ready(stack, models, fleet, started, args.start_timeout_s,
                                          alive=lambda: stack_alive(stack))
        except load.OutOfMemory as e:
            return did_not_fit(stack, len(models), str(e))
        # Every worker's first calls of every model (its lazy imports, allocator
        # growth, one-time kernels) before anything is measured, alike for all.
        load.run_load(stack, models, fleet, args.threads, args.warmup_s)
        time.sleep(args.settle_s)
        memory = stack.memory()
        under_load = load.run_load(stack, models, fleet, args.threads, args.load_s)
    finally:
        stack.stop()
    result = {"fits": True, "ready_s": round(ready_s, 2), "pss_mib": memory["pss_mib"],
              "rss_mib": memory["rss_mib"], "processes": len(memory["processes"]),
              "load": under_load}
    print(f"  {stack.kind:>11}: ready in {ready_s:6.1f} s, {memory['pss_mib']:8.0f} MiB PSS "
          f"in {result['processes']} processes, {under_load['requests_per_s']:7.1f} req/s "
          f"({under_load['errors']} errors)", flush=True)
    return result


def did_not_fit(stack, size, why):
    """A stack that ran the machine low on memory before all `size` models
    answered: its footprint then, and the footprint of all `size` models
    estimated from its per-model processes (workers) so far."""
    memory = stack.memory()
    workers = [p for p in memory["processes"] if p["role"] in ("worker", "model process")]
    others = memory["pss_mib"] - sum(p["pss_mib"] for p in workers)
    estimate = others + sum(p["pss_mib"] for p in workers) / max(1, len(workers)) * size
    print(f"  {stack.kind:>11}: did not fit: {why}", flush=True)
    return {"fits": False, "why": why, "pss_mib_when_stopped": memory["pss_mib"],
            "processes": len(memory["processes"]), "pss_mib": round(estimate, 1),
            "pss_mib_estimated": True, "ready_s": None, "load": None}


def stack_alive(stack):
    if hasattr(stack, "stacks"):
        return all(s.alive() for s in stack.stacks)
    return stack.stack.alive()


def ratios(cells, chorus_kind):
    chorus = cells[chorus_kind]
    out = {}
    for peer in ("torchserve", "processes"):
        if peer not in cells:
            continue
        other = cells[peer]
        # (A peer that did not fit: its footprint estimated, no time or throughput.)
        out[f"footprint_vs_{peer}"] = round(other["pss_mib"] / chorus["pss_mib"], 2)
        if other["fits"] and chorus["fits"]:
            out[f"ready_s_vs_{peer}"] = round(other["ready_s"] / chorus["ready_s"], 2)
            out[f"throughput_vs_{peer}"] = round(
                chorus["load"]["requests_per_s"] / max(1e-9, other["load"]["requests_per_s"]),
                2)
    return out


def summarize(args, prepared, by_size):
    """The ratios per size and chorus configuration, and each stack's marginal model."""
    result = {}
    for size, cells in by_size.items():
        per_chorus = {kind: ratios(cells, kind) for kind in cells if kind.startswith("chorus")}
        entry = {"cells": cells, "by_chorus": per_chorus,
                 "weights_mib": round(sum(
                     prepared["models"][n]["weights_mib"] for n in list(prepared["models"])[:size]
                 ), 1)}
        entry.update(per_chorus.get(f"chorus_{args.interpreters[0]}", {}))
        result[str(size)] = entry
    small, large = min(by_size), max(by_size)
    if small != large:
        added = list(prepared["models"])[small:large]
        marginal = {kind: round((by_size[large][kind]["pss_mib"] -
                                 by_size[small][kind]["pss_mib"]) / len(added), 1)
                    for kind in by_size[large] if kind in by_size[small]}
        marginal["weights_mib"] = round(
            sum(prepared["models"][n]["weights_mib"] for n in added) / len(added), 1)
        result["marginal_model_mib"] = marginal
    return result


def main():
    args = parse_args()
    python = sys.executable
    if "torchserve" in args.stacks:
        subprocess.run([os.path.join(ROOT, "tools", "install-torchserve.sh"), python, "--frontend"],
                       check=True)
    work = tempfile.mkdtemp(prefix="chorus-density-")
    os.makedirs(os.path.join(work, "logs"))
    try:
        prepared = prepare(work, max(args.sizes))
        by_size = {}
        for size in args.sizes:
            models = dict(list(prepared["models"].items())[:size])
            fleet = load.read_fleet(models)
            print(f"fleet of {size} models ({sum(m['weights_mib'] for m in models.values()):.0f} "
                  f"MiB of weights):", flush=True)
            by_size[size] = {stack.kind: measure(args, stack, models, fleet)
                             for stack in stacks_for(args, work, models)}
        result = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                              "torch": prepared["torch"]},
                  "settings": {"threads": args.threads, "load_s": args.load_s,
                               "warmup_s": args.warmup_s,
                               "settle_s": args.settle_s, "interpreters": args.interpreters},
                  **summarize(args, prepared, by_size)}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out}")
    finally:
        Stack.stop_all()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
