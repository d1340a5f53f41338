"""One server's part of make bench-triton, from its start to its stop.

run_server: the six-model repository. The server starts (timed until ready), every model
answers a fixed request correctly (the reference answers triton_models.py computed with
the models' own code), then each row of triton_models.ROWS is warmed up and measured by
perf_analyzer at each concurrency (the peers benchmark's driver: time windows until they
agree), with the server's own statistics read before and after each measurement (where
its time went: queued, computing, and for a BLS pipeline the models it called); once it
has been idle --settle-s, the PSS of its whole process tree.

run_floor: the floor under identity's latency, bench_grpc_echo answering identity's
requests (triton_servers.EchoServer), measured by perf_analyzer as the servers are.

run_ceilings: what no server can beat on a row, with no server running: the model's own
execute() in N processes at once (bare_execute.py; N = the instances), and one call's time.

run_fleet: the density fleet. The server starts (timed until ready; a server that runs
the machine low on memory first is stopped, its footprint estimated from the stubs so
far, as bench-density does), every model answers correctly, then bench-density's load
generator warms every model up, the footprint is read after --settle-s and a load over
the whole fleet measures its throughput.
"""

import os
import queue
import resource
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
sys.path.insert(0, os.path.join(HERE, "..", "density"))

import load  # noqa: E402 (bench-density's load generator)
from density_bench import did_not_fit  # noqa: E402
from drive import log, parallel_rates, perf_analyzer  # noqa: E402 (peers' driver)
from servers import answers_match  # noqa: E402
from stacks import machine_busy_s  # noqa: E402
from triton_models import MODELS  # noqa: E402

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


class Target:
    """What perf_analyzer drives (drive.perf_analyzer's `server`): one model of a running
    server over one protocol, with extra perf_analyzer arguments."""

    def __init__(self, server, model, extra, protocol):
        self.server, self.model, self.extra, self.protocol = server, model, extra, protocol
        self.kind = server.kind

    def perf_args(self):
        address = self.server.http_address if self.protocol == "http" else self.server.address
        return ["-m", self.model, "-i", self.protocol, "-u", address, *self.extra]


# --------------------------------------------------------------------------
# Answers

def check_answers(server, checks):
    """Every model answers its fixed request as the model's code does (raises if not)."""
    import tritonclient.grpc as grpcclient
    client = grpcclient.InferenceServerClient(server.address)
    try:
        for model in MODELS:
            x = np.load(os.path.join(checks, f"{model}.in.npy"))
            request = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            if MODELS[model].get("decoupled"):
                got = stream_answers(client, model, request,
                                     MODELS[model]["parameters"]["RESPONSES"])
            else:
                got = client.infer(model, [request]).as_numpy("OUTPUT0")
            if not answers_match(np.ascontiguousarray(got, dtype=np.float32).tobytes(),
                                 os.path.join(checks, f"{model}.expected.bin")):
                raise RuntimeError(f"{server.kind}'s answer for {model} differs from the "
                                   "model's")
    finally:
        client.close()


def stream_answers(client, model, request, count):
    """The `count` answers of a decoupled model to one request, over ModelStreamInfer."""
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(model, [request])
        got = []
        for _ in range(count):
            result, error = answers.get(timeout=60)
            if error is not None:
                raise RuntimeError(f"{model}: {error}")
            got.append(result.as_numpy("OUTPUT0"))
        return np.stack(got)
    finally:
        client.stop_stream()


# --------------------------------------------------------------------------
# The six models

def statistics_delta(before, after):
    """Per model whose successful requests grew between two statistics() reads: the
    requests, executions, mean request time and mean time per stage (microseconds per
    request), and the mean batch (requests per execution)."""
    delta = {}
    for model, now in after.items():
        was = before.get(model, {})
        requests = now["success_count"] - was.get("success_count", 0)
        if requests <= 0:
            continue
        executions = now["executions"] - was.get("executions", 0)
        entry = {"requests": requests, "executions": executions,
                 "request_us": round((now["success_ns"] - was.get("success_ns", 0))
                                     / requests / 1000.0, 1),
                 "batch": round(requests / executions, 2) if executions > 0 else None}
        for stage in STAGES:
            entry[f"{stage}_us"] = round((now[f"{stage}_ns"] - was.get(f"{stage}_ns", 0))
                                         / requests / 1000.0, 1)
        delta[model] = entry
    return delta


def measure_row(args, server, row, concurrencies, work, tag, cpu=False):
    """One row: warmed up at the highest concurrency, then measured at each; per
    concurrency perf_analyzer's figures and the server's statistics over the run; with
    `cpu`, where the CPU goes at the highest (measure_cpu)."""
    name, model, extra, protocol = row
    target = Target(server, model, extra, protocol)
    label = f"{server.kind}-{tag}-{name}"
    top = max(concurrencies)
    try:
        perf_analyzer(args, target, top, work, f"{label}-warmup",
                      request_count=max(args.warmup_requests, 2 * top))
    except RuntimeError:
        pass  # the measurement reports the failure
    measured = {}
    for concurrency in concurrencies:
        before = server.statistics()
        figures = perf_analyzer(args, target, concurrency, work, f"{label}-c{concurrency}")
        figures["server"] = statistics_delta(before, server.statistics())
        measured[str(concurrency)] = figures
    if not cpu:
        return measured
    try:
        measured[str(top)]["cpu"] = measure_cpu(args, server, target, top, work, label)
    except RuntimeError as e:  # recorded; the row's figures stand
        measured[str(top)]["cpu"] = {"error": str(e)}
    return measured


def measure_cpu(args, server, target, concurrency, work, label):
    """Where the CPU goes per request at `concurrency`: over a fixed number of requests
    (about --cpu-window-s at the rate perf_analyzer just measured on `target`), each
    thread's CPU time by the server's part it counts to (server.cpu_part: "server" or
    "models"), perf_analyzer's ("client") and the whole machine's ("total"; "other":
    softirq, the kernel's own threads, anything else), in microseconds per request."""
    requests = max(4 * concurrency, int(getattr(target, "rate", 0) * args.cpu_window_s))
    threads, busy_s = server.threads_cpu(), machine_busy_s()
    client = resource.getrusage(resource.RUSAGE_CHILDREN)
    perf_analyzer(args, target, concurrency, work, f"{label}-cpu", request_count=requests)
    client_s = _cpu_s(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu_s(client)
    busy_s = machine_busy_s() - busy_s
    parts = {"server": 0.0, "models": 0.0}
    for tid, (process, thread, seconds) in server.threads_cpu().items():
        parts[server.cpu_part(process, thread)] += seconds - threads.get(tid, (0, 0, 0.0))[2]
    per_request = 1e6 / requests
    cpu = {f"{part}_us": round(seconds * per_request, 1) for part, seconds in parts.items()}
    cpu.update(client_us=round(client_s * per_request, 1),
               total_us=round(busy_s * per_request, 1),
               other_us=round(max(0.0, busy_s - client_s - sum(parts.values())) * per_request, 1),
               requests=requests)
    return cpu


def _cpu_s(usage):
    return usage.ru_utime + usage.ru_stime


def run_server(args, server, rows, concurrencies, checks, work, tag, cpu=False):
    """The repository on one server, start to stop: its cell (an error is recorded in
    it, or in the row that failed, and the run goes on); with `cpu`, each row's CPU
    breakdown (measure_row)."""
    cell = {"repository": server.repository}
    try:
        cell["ready_s"] = round(server.start(args.start_timeout_s), 3)
        cell["server"] = server.metadata()
        check_answers(server, checks)
        cell["rows"] = {}
        for row in rows:
            try:
                cell["rows"][row[0]] = measure_row(args, server, row, concurrencies, work, tag,
                                                   cpu)
            except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
                cell["rows"][row[0]] = {"error": str(e)}
                log(f"    {server.kind} {row[0]}: FAILED: {e}")
        time.sleep(args.settle_s)
        cell["memory"] = server.memory()
    except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
        cell["error"] = str(e)
        log(f"    {server.kind}: FAILED: {e}")
    finally:
        server.stop()
    return cell


def run_floor(args, server, row, concurrencies, work, tag):
    """`row` (identity's) against the echo server, start to stop: {concurrency: figures},
    or {"error": ...}."""
    try:
        server.start(args.start_timeout_s)
        return measure_row(args, server, row, concurrencies, work, tag, cpu=True)
    except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
        log(f"    echo: FAILED: {e}")
        return {"error": str(e)}
    finally:
        server.stop()


# The rows with a ceiling: models that answer alone (BLS calls other models, decoupled
# streams through its sender: both need a server), in requests the servers cannot join
# (resnet18's requests of 1 item are batched by both servers, which a loop at batch 1
# does not bound; resnet18_b8's already fill max_batch_size).
CEILING_ROWS = ("identity", "pyloop", "mlp", "resnet18_b8")


def run_ceilings(args, rows, repository, processes):
    """{row: the ceiling}: per row of CEILING_ROWS, `processes` bare_execute.py loops on
    the row's model folder at once (throughput_per_s: items, as perf_analyzer counts
    them), and one loop alone (execute_us: one call's time)."""
    ceilings = {}
    for name, model, extra, _ in rows:
        if name not in CEILING_ROWS:
            continue
        batch = int(extra[extra.index("-b") + 1]) if "-b" in extra else 1
        command = [sys.executable, os.path.join(HERE, "bare_execute.py"),
                   os.path.join(repository, model), str(batch)]
        window_s = args.window_ms / 1000.0
        try:
            together = parallel_rates(command, dict(os.environ), processes, window_s)
            alone = parallel_rates(command, dict(os.environ), 1, window_s)
        except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
            log(f"    ceiling {name}: FAILED: {e}")
            ceilings[name] = {"error": str(e)}
            continue
        together["execute_us"] = round(1e6 * batch / alone["throughput_per_s"], 1)
        together["batch"] = batch
        ceilings[name] = together
        log(f"    ceiling {name}: {together['throughput_per_s']:.0f}/s with {processes} "
            f"processes, {together['execute_us']:.0f} us per execute()")
    return ceilings


# --------------------------------------------------------------------------
# The density fleet

def run_fleet(args, server, specs, stubs):
    """The fleet `specs` (load.py's form) on one server; `stubs`: the worker processes a
    process-per-instance server would start (to estimate one that did not fit)."""
    fleet = load.read_fleet(specs)
    try:
        try:
            ready_s = server.start(args.start_timeout_s, floor_mib=args.memory_floor_mib)
        except load.OutOfMemory as e:
            return did_not_fit(server, stubs, str(e))
        load.wait_all_ready(server, specs, fleet, time.monotonic(), args.start_timeout_s,
                            alive=server.alive)
        load.run_load(server, specs, fleet, args.fleet_threads, args.fleet_warmup_s)
        time.sleep(args.settle_s)
        memory = server.memory()
        under_load = load.run_load(server, specs, fleet, args.fleet_threads, args.fleet_load_s)
    except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
        log(f"    {server.kind}: FAILED: {e}")
        return {"fits": True, "error": str(e), "ready_s": None, "load": None}
    finally:
        server.stop()
    return {"fits": True, "repository": server.repository, "ready_s": round(ready_s, 2),
            "pss_mib": memory["pss_mib"], "rss_mib": memory["rss_mib"],
            "unique_mib": memory.get("unique_mib"), "processes": len(memory["processes"]),
            "memory": memory, "load": under_load}
