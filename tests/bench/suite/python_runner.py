"""Runs one benchmark cell the ways Python models are served without chorus.

    python_runner.py --archive M.pt --mode {eager,threads,processes,free_threaded}
                     --workers N [--warmup-s 1] [--measure-s 3] [--launched-at EPOCH]

eager: one thread. threads: N threads in this one interpreter (its GIL shared).
processes: N worker processes, each loading the model (the process-per-worker
design of Triton's Python backend and TorchServe). free_threaded: the threads
mode run by a free-threaded CPython (3.13t/3.14t, no GIL): N threads over one
import of torch and one model; the result adds gil_enabled (whether the GIL was
on while it measured: an extension not declared free-threading-safe turns it
back on for the whole process) and gil_warning (the warning that said so, or
null). Every mode loads the chorus
archive with stock torch.package and calls the model on the archive's example
inputs, with one intra-op thread per worker, under torch.inference_mode. Prints
one JSON object: items_per_s, calls, p50_ms, p99_ms, rss_mib (all workers summed),
footprint_mib (their private pages plus shared pages once), first_result_s
(launch until every worker has produced a result).
"""

import argparse
import json
import subprocess
import sys
import sysconfig
import threading
import time
import warnings

from chorus.package import _format as fmt

# torch is imported only where a model runs: the parent of --mode processes
# only spawns and collects, and must not charge its own import to the workers'
# time to a first result.


def load(archive):
    """The model and its example inputs, with torch set to one intra-op thread."""
    import io

    import torch
    from torch.package import PackageImporter
    torch.set_num_threads(1)
    importer = PackageImporter(archive)
    model = importer.load_pickle(fmt.MODEL_PICKLE_PACKAGE, fmt.MODEL_PICKLE_RESOURCE)
    model.eval()
    inputs = torch.load(io.BytesIO(importer.zip_reader.get_record(fmt.EXAMPLE_INPUTS_RECORD)))
    return model, tuple(inputs)


def memory_mib():
    """(resident, private) MiB of this process: all its resident pages, and those
    no other process maps (the rest, such as libtorch's code, is shared)."""
    fields = {}
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            parts = line.split()
            if parts[0] in ("Rss:", "Private_Clean:", "Private_Dirty:"):
                fields[parts[0]] = int(parts[1]) / 1024.0
    return fields["Rss:"], fields["Private_Clean:"] + fields["Private_Dirty:"]


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Worker:
    """Calls the model: warm-up until told to measure, then until `end`."""

    def __init__(self, model, inputs):
        import torch
        self.model, self.inputs = model, inputs
        self.inference_mode = torch.inference_mode
        self.set_num_threads = torch.set_num_threads
        self.first_result = None
        self.latencies = []

    def call(self):
        with self.inference_mode():
            self.model(*self.inputs)

    def warm_up(self, seconds):
        # In the thread that calls the model: OpenMP's thread count is per thread, so
        # load()'s torch.set_num_threads(1) in the main thread does not reach a worker
        # thread, whose ops would otherwise run 2-thread OpenMP regions (and wait a
        # scheduler slice, about 24 ms a call, for the second thread when another
        # process holds the other core).
        self.set_num_threads(1)
        self.call()
        self.first_result = time.time()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            self.call()

    def measure(self, end):
        while time.perf_counter() < end:
            start = time.perf_counter()
            self.call()
            self.latencies.append(time.perf_counter() - start)


def summary(latencies, items, seconds, memory, first_result_s):
    return {"items_per_s": items / seconds, "calls": len(latencies),
            "p50_ms": percentile(latencies, 0.5) * 1e3, "p99_ms": percentile(latencies, 0.99) * 1e3,
            "rss_mib": memory[0], "footprint_mib": memory[1], "first_result_s": first_result_s}


def run_threads(args, workers):
    model, inputs = load(args.archive)
    batch = inputs[0].shape[0] if inputs[0].dim() else 1
    pool = [Worker(model, inputs) for _ in range(workers)]
    warmed = threading.Barrier(workers + 1)
    start_gate = threading.Event()
    bounds = {}

    def body(worker):
        worker.warm_up(args.warmup_s)
        warmed.wait()
        start_gate.wait()
        worker.measure(bounds["end"])

    threads = [threading.Thread(target=body, args=(w,)) for w in pool]
    for thread in threads:
        thread.start()
    warmed.wait()
    ready = max(w.first_result for w in pool) - args.launched_at
    start = time.perf_counter()
    bounds["end"] = start + args.measure_s
    start_gate.set()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    latencies = [t for w in pool for t in w.latencies]
    rss, _ = memory_mib()
    return summary(latencies, len(latencies) * batch, seconds, (rss, rss), ready)


def gil_enabled():
    """Whether the GIL is on in this process (always, on a build that has one)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def run_free_threaded(args):
    """The threads mode on a free-threaded build, noting whether the GIL stayed off
    (importing a module that is not declared free-threading-safe re-enables it with a
    RuntimeWarning naming the module)."""
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        sys.exit(f"--mode free_threaded needs a free-threaded Python; {sys.executable} "
                 f"({sys.version.split()[0]}) is not one")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        result = run_threads(args, args.workers)
    said = [str(w.message) for w in caught if "GIL" in str(w.message)]
    result["gil_enabled"] = gil_enabled()
    result["gil_warning"] = said[0] if said else None
    return result


def run_worker(args):
    """One process of --mode processes: warm up, report, measure on command,
    report, and stay until stdin closes (so that every worker's memory is read
    while all of them are alive)."""
    model, inputs = load(args.archive)
    worker = Worker(model, inputs)
    worker.warm_up(args.warmup_s)
    print(json.dumps({"first_result": worker.first_result}), flush=True)
    seconds = float(sys.stdin.readline())
    worker.measure(time.perf_counter() + seconds)
    batch = inputs[0].shape[0] if inputs[0].dim() else 1
    rss, private = memory_mib()
    print(json.dumps({"latencies": worker.latencies, "batch": batch, "rss_mib": rss,
                      "private_mib": private}), flush=True)
    sys.stdin.readline()


def run_processes(args):
    command = [sys.executable, __file__, "--archive", args.archive, "--worker",
               "--warmup-s", str(args.warmup_s)]
    children = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for _ in range(args.workers)]
    first = [json.loads(child.stdout.readline())["first_result"] for child in children]
    ready = max(first) - args.launched_at
    start = time.perf_counter()
    for child in children:
        child.stdin.write(f"{args.measure_s}\n")
        child.stdin.flush()
    results = [json.loads(child.stdout.readline()) for child in children]
    seconds = time.perf_counter() - start
    for child in children:
        child.stdin.close()
        child.wait()
    latencies = [t for r in results for t in r["latencies"]]
    items = sum(len(r["latencies"]) * r["batch"] for r in results)
    # Footprint: every worker's private pages, and the shared ones once (the
    # workers map the same libraries, so the largest shared set stands for all).
    shared = max(r["rss_mib"] - r["private_mib"] for r in results)
    memory = (sum(r["rss_mib"] for r in results),
              sum(r["private_mib"] for r in results) + shared)
    return summary(latencies, items, seconds, memory, ready)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", required=True)
    parser.add_argument("--mode", choices=["eager", "threads", "processes", "free_threaded"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--measure-s", type=float, default=3.0)
    parser.add_argument("--launched-at", type=float, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(args)
    if args.launched_at is None:
        args.launched_at = time.time()
    if args.mode == "processes":
        result = run_processes(args)
    elif args.mode == "free_threaded":
        result = run_free_threaded(args)
    else:
        result = run_threads(args, 1 if args.mode == "eager" else args.workers)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
