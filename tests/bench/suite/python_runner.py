"""Runs one benchmark cell the ways Python models are served without chorus.

    python_runner.py --archive M.pt --mode {eager,threads,processes} --workers N
                     [--warmup-s 1] [--measure-s 3] [--launched-at EPOCH]

eager: one thread. threads: N threads in this one interpreter (its GIL shared).
processes: N worker processes, each loading the model (the process-per-worker
design of Triton's Python backend and TorchServe). Every mode loads the chorus
archive with stock torch.package and calls the model on the archive's example
inputs, with one intra-op thread per worker, under torch.inference_mode. Prints
one JSON object: items_per_s, calls, p50_ms, p99_ms, rss_mib (all workers),
first_result_s (launch until every worker has produced a result).
"""

import argparse
import json
import subprocess
import sys
import threading
import time

import torch
from torch.package import PackageImporter

from chorus.package import _format as fmt


def load(archive):
    importer = PackageImporter(archive)
    model = importer.load_pickle(fmt.MODEL_PICKLE_PACKAGE, fmt.MODEL_PICKLE_RESOURCE)
    model.eval()
    import io
    inputs = torch.load(io.BytesIO(importer.zip_reader.get_record(fmt.EXAMPLE_INPUTS_RECORD)))
    return model, tuple(inputs)


def rss_mib(pid="self"):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Worker:
    """Calls the model: warm-up until told to measure, then until `end`."""

    def __init__(self, model, inputs):
        self.model, self.inputs = model, inputs
        self.first_result = None
        self.latencies = []

    def call(self):
        with torch.inference_mode():
            self.model(*self.inputs)

    def warm_up(self, seconds):
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


def summary(latencies, items, seconds, rss, first_result_s):
    return {"items_per_s": items / seconds, "calls": len(latencies),
            "p50_ms": percentile(latencies, 0.5) * 1e3, "p99_ms": percentile(latencies, 0.99) * 1e3,
            "rss_mib": rss, "first_result_s": first_result_s}


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
    return summary(latencies, len(latencies) * batch, seconds, rss_mib(), ready)


def run_worker(args):
    """One process of --mode processes: warm up, report, measure on command."""
    model, inputs = load(args.archive)
    worker = Worker(model, inputs)
    worker.warm_up(args.warmup_s)
    print(json.dumps({"first_result": worker.first_result}), flush=True)
    seconds = float(sys.stdin.readline())
    worker.measure(time.perf_counter() + seconds)
    batch = inputs[0].shape[0] if inputs[0].dim() else 1
    print(json.dumps({"latencies": worker.latencies, "batch": batch, "rss_mib": rss_mib()}),
          flush=True)


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
        child.wait()
    latencies = [t for r in results for t in r["latencies"]]
    items = sum(len(r["latencies"]) * r["batch"] for r in results)
    return summary(latencies, items, seconds, sum(r["rss_mib"] for r in results), ready)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", required=True)
    parser.add_argument("--mode", choices=["eager", "threads", "processes"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--measure-s", type=float, default=3.0)
    parser.add_argument("--launched-at", type=float, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker:
        return run_worker(args)
    if args.launched_at is None:
        args.launched_at = time.time()
    if args.mode == "processes":
        result = run_processes(args)
    else:
        result = run_threads(args, 1 if args.mode == "eager" else args.workers)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
