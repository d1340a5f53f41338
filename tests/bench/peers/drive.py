"""The load peers_bench.py drives: perf_analyzer against one server, a pair of
servers for one model and N (A-B-A), and the compute ceiling without a server."""

import argparse
import csv
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass

from stacks import intra_op_threads
from workloads import BATCHED, HERE


def log(message):
    print(message, flush=True)


# --------------------------------------------------------------------------
# perf_analyzer

def perf_analyzer(args, server, concurrency, work, label, request_count=None):
    """One perf_analyzer run; returns its figures (or raises). With request_count,
    exactly that many requests, no stability check (the warm-up). Otherwise time
    windows until 3 agree; if they never do, the load is measured again over a
    fixed number of requests (about 3 windows' worth at the rate the windows
    measured, or else at the server's last measured rate, server.rate) and marked
    stable: false."""
    report = os.path.join(work, "logs", f"perf-{label}.csv")
    output = os.path.join(work, "logs", f"perf-{label}.log")
    base = [args.perf_analyzer, *server.perf_args(), "--concurrency-range", str(concurrency),
            "-f", report]
    if request_count:
        attempts = [["--request-count", str(request_count)]]
    else:
        # -v prints each window's rate ("Pass [i] throughput"), read for the fallback.
        attempts = [["-p", str(args.window_ms), "-s", str(args.stability_pct),
                     "-r", str(args.max_trials), "-v"], None]
    for attempt, extra in enumerate(attempts):
        if extra is None:
            fallback = max(4 * concurrency,
                           int(getattr(server, "rate", 0) * 3 * args.window_ms / 1000.0))
            extra = ["--request-count", str(fallback)]
        if os.path.exists(report):
            os.unlink(report)
        with open(output, "w") as out:
            done = subprocess.run(base + extra, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=args.perf_timeout_s)
        rows = (list(csv.DictReader(open(report)))
                if done.returncode == 0 and os.path.exists(report) else [])
        if rows:
            figures = _figures(rows[0], open(output).read(),
                               stable=request_count is not None or attempt == 0)
            server.rate = figures["throughput_per_s"]
            return figures
        text = open(output).read()
        if "Failed to obtain stable measurement" not in text:
            break
        # The windows' own rate (the last one), not a warm-up's: a warm-up's rate
        # counts its start, and at a high rate that would make the fallback short.
        windows = re.findall(r"Pass \[\d+\] throughput: ([\d.]+)", text)
        if windows:
            server.rate = float(windows[-1])
    tail = "\n".join(line for line in open(output).read().splitlines()
                     if "Timer not set correctly" not in line)[-2000:]
    raise RuntimeError(f"perf_analyzer failed against {server.kind} ({label}):\n{tail}")


def _figures(row, text, stable):
    """The figures of perf_analyzer's CSV row and its printed output `text`."""
    count = re.search(r"Request count: (\d+)", text)
    figures = {"requests": int(count.group(1)) if count else None,
               "throughput_per_s": round(float(row["Inferences/Second"]), 2),
               "p50_ms": round(int(row["p50 latency"]) / 1000.0, 3),
               "p99_ms": round(int(row["p99 latency"]) / 1000.0, 3),
               "stable": stable}
    if (row.get("Response Throughput") or "").strip():
        # A decoupled model's answers per second (its requests' several).
        figures["responses_per_s"] = round(float(row["Response Throughput"]), 2)
    breakdown = latency_breakdown(row)
    if breakdown:
        figures["breakdown_us"] = breakdown
    return figures


# perf_analyzer's CSV columns splitting a request's mean latency (microseconds): the
# client's share, and the server's from its statistics extension (Triton's, which chorus
# serves too; absent where a server has none, as TorchServe).
BREAKDOWN_COLUMNS = {"Client Send": "client_send", "Network+Server Send/Recv": "network_server",
                     "Server Queue": "server_queue", "Server Compute Input": "compute_input",
                     "Server Compute Infer": "compute_infer",
                     "Server Compute Output": "compute_output", "Client Recv": "client_recv"}


def latency_breakdown(row):
    """{part: microseconds} of one perf_analyzer CSV row (BREAKDOWN_COLUMNS present)."""
    parts = {}
    for column, key in BREAKDOWN_COLUMNS.items():
        value = (row.get(column) or "").strip()
        if value.isdigit():
            parts[key] = int(value)
    return parts


# --------------------------------------------------------------------------
# One cell: a server with N workers, from start to stop

@dataclass
class _Pair:
    """The steps run_pair takes on either server of a pair, and their cells
    ({kind: cell}). A step that fails is recorded in its server's cell (the run
    goes on) and that server's later steps are skipped."""

    args: argparse.Namespace
    work: str
    cells: dict

    def attempt(self, server, step):
        cell = self.cells[server.kind]
        if "error" in cell:
            return
        try:
            step(server, cell)
        except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
            cell["error"] = str(e)
            log(f"  {server.kind}: FAILED: {e}")
            if hasattr(server, "stack"):
                server.stop()

    def start(self, server, cell):
        args = self.args
        first, ready = server.start()
        cell["first_answer_s"] = round(first, 3)
        cell["all_ready_s"] = round(ready, 3)
        top = max(args.concurrency)
        label = f"{server.kind}-{server.name}-{server.workers}"
        try:
            perf_analyzer(args, server, top, self.work, f"{label}-warmup",
                          request_count=max(args.warmup_requests, 2 * top))
        except RuntimeError:
            pass  # the measurement reports the failure

    def measure(self, server, cell):
        label = f"{server.kind}-{server.name}-{server.workers}"
        for concurrency in self.args.concurrency:
            passes = cell.setdefault("passes", {}).setdefault(str(concurrency), [])
            passes.append(perf_analyzer(self.args, server, concurrency, self.work,
                                        f"{label}-c{concurrency}-{len(passes) + 1}"))
        server.load_ended = time.monotonic()
        if server.crashes():
            raise RuntimeError(f"{server.kind} lost a worker {server.crashes()} time(s) "
                               f"(see {server.log_path})")

    def memory(self, server, cell):
        # The same settling time for both stacks, alone and idle (chorus gives
        # memory back after a quiet second and pages out every 10 s while
        # quiet; pages the other stack still mapped are not reclaimed).
        settled = (max(server.load_ended, getattr(server, "alone_since", 0.0))
                   + self.args.settle_s)
        time.sleep(max(0.0, settled - time.monotonic()))
        cell["memory"] = server.memory()


def run_pair(args, work, servers):
    """Both servers for one model and N, A-B-A: A starts alone, is warmed and
    measured, and its memory read; then B starts (A idle), is warmed and measured;
    then A is measured again (its figures are the mean of its two passes, so a
    machine whose speed drifts over the minute hurts neither side); A stops and
    B's memory is read alone. Each stack's memory is read while the other is not
    running (they map the same libtorch files; PSS would split those pages between
    them). Returns {kind: cell}; a failure is recorded in its cell."""
    a, b = servers
    pair = _Pair(args, work, {server.kind: {"workers": server.workers,
                                            "intra_op_threads": intra_op_threads(server.workers)}
                              for server in servers})
    try:
        pair.attempt(a, pair.start)
        pair.attempt(a, pair.measure)
        pair.attempt(a, pair.memory)
        pair.attempt(b, pair.start)
        pair.attempt(b, pair.measure)
        pair.attempt(a, pair.measure)
        if hasattr(a, "stack"):
            a.stop()
        b.alone_since = time.monotonic()
        pair.attempt(b, pair.memory)
    finally:
        for server in servers:
            if hasattr(server, "stack"):
                server.stop()
    cells = pair.cells
    cells[a.kind]["order"] = "first and third (measured twice, around the other)"
    cells[b.kind]["order"] = "second"
    for cell in cells.values():
        if "error" not in cell:
            cell["load"] = {c: merge_passes(p) for c, p in cell.pop("passes").items()}
    return cells


def bare_throughput(args, work, name, spec, workers):
    """The compute ceiling for one model and N: N bare_loop.py processes (the
    servers' intra-op threads each, the servers' batch), started together and
    run back to back for --window-ms, three windows; returns their summed rate
    (the median window) and each window's. No server runs meanwhile."""
    batch = BATCHED.get(name, {}).get("max_batch_size", 1)
    env = dict(os.environ, CHORUS_PEERS_INTRA_OP_THREADS=str(intra_op_threads(workers)))
    command = [sys.executable, os.path.join(HERE, "bare_loop.py"), spec["archive"],
               spec["input_bin"], str(batch)]
    rates = parallel_rates(command, env, workers, args.window_ms / 1000.0)
    rates.update({"intra_op_threads": intra_op_threads(workers), "batch": batch})
    return rates


def parallel_rates(command, env, processes, window_s, windows=3):
    """`processes` copies of `command` (a loop that prints "ready", then "ITEMS SECONDS"
    for each "WINDOW_S" line it reads), run together for `windows` windows: their summed
    rate in the median window, and each window's. RuntimeError when a copy fails; none is
    left running."""
    loops = []
    try:
        for _ in range(processes):
            loops.append(subprocess.Popen(command, env=env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True))
        for loop in loops:
            if loop.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{' '.join(command[1:])} did not start "
                                   f"(exit {loop.wait()})")
        totals = []
        for _ in range(windows):
            for loop in loops:
                loop.stdin.write(f"{window_s}\n")
                loop.stdin.flush()
            rates = []
            for loop in loops:
                fields = loop.stdout.readline().split()
                if len(fields) != 2:
                    raise RuntimeError(f"{' '.join(command[1:])} stopped (exit {loop.wait()})")
                rates.append(int(fields[0]) / float(fields[1]))
            totals.append(round(sum(rates), 2))
    finally:
        for loop in loops:
            loop.stdin.close()
        for loop in loops:
            try:
                loop.wait(timeout=30)
            except subprocess.TimeoutExpired:
                loop.kill()
                loop.wait()
    return {"throughput_per_s": sorted(totals)[len(totals) // 2], "windows": totals,
            "processes": processes}


def merge_passes(passes):
    """One figure per concurrency: the mean of the passes (each kept too)."""
    merged = {key: round(sum(p[key] for p in passes) / len(passes), 3)
              for key in ("throughput_per_s", "p50_ms", "p99_ms")}
    merged["requests"] = sum(p["requests"] or 0 for p in passes)
    merged["stable"] = all(p["stable"] for p in passes)
    if len(passes) > 1:
        merged["passes"] = passes
    return merged
