"""make bench-peers: chorus against TorchServe, serving the same models side by side.

    peers_bench.py --bin build/bin --out build/bench/peers.json [--quick]
                   [--models resnet18,control_flow,big_mlp,resnet18_batched,resnet18_mar,big_mar]
                   [--workers 1,2,4]
                   [--concurrency 1,8] [--perf-analyzer PATH] [--keep]

Models (weights from fixed seeds, nothing downloaded): `resnet18` (torchvision,
1x3x64x64) and `control_flow` (the example iterative refiner, Python loops and
branches per sample), both as the benchmark suite builds them
(tests/bench/suite/models.py), and `big_mlp` (big_mlp.py: 1.0 GiB of fp32
weights). Each is packaged once as a chorus archive without batching; chorus
serves that file, and TorchServe serves the same file through a custom handler
(torchserve_handler.py) that loads it with stock torch.package: same code,
weights, input bytes and output bytes on both sides. `resnet18_batched` is
resnet18 with dynamic batching on both sides, same settings (BATCHED below).
`resnet18_mar` and `big_mar` (mar_models.py) are one TorchServe .mar archive each,
served unchanged by both (chorus through --model-store and its TorchServe inference
API), their answers checked equal; they have no bare loop.

For each model and N in --workers, one chorus-server with N interpreters and one
TorchServe with N workers (batch size 1 but in BATCHED configurations; intra-op
threads max(1, cores / N) in both, which is what chorus-server sets; a .mar's N
workers on chorus are N handler objects over min(N, cores) interpreters, see
servers.mar_interpreters), A-B-A (A is chorus or TorchServe, alternating from cell
to cell):

  1. A starts from nothing, timed until its first correct answer (first_answer_s)
     and until all N workers can serve (all_ready_s: TorchServe answers once its
     first worker is up, chorus once the model is on every interpreter); it is
     warmed up with perf_analyzer (--warmup-requests at the highest
     concurrency) and measured at each --concurrency; its memory is read.
  2. B starts (A idle), is timed, warmed up and measured the same way.
  3. A is measured again; its figures are the mean of its two passes, so that a
     machine whose speed drifts over the minute favours neither side. A stops,
     then B's memory is read and B stops. Each stack's memory is read while the
     other is not running: they map the same libtorch files.

perf_analyzer runs `-i grpc` (Triton's gRPC protocol) against chorus and
`--service-kind torchserve -i http` against TorchServe (it POSTs the bytes of the
input file as multipart form data), in time windows of --window-ms until 3 in a
row agree within --stability-pct (at most --max-trials windows; when they never
agree, the load is measured again over a fixed number of requests, about 3
windows' worth, without the check, and marked stable: false).

Memory is the whole serving stack's, idle after the load (once it has been
alone and idle for --settle-s, both alike), from
/proc/PID/smaps_rollup of every process in its tree (chorus' supervisor and
serving process; TorchServe's Java frontend and each Python worker, not the
`torchserve` launcher script, which --foreground keeps as their parent): summed
PSS and RSS, and the number of distinct physical pages the stack maps
(/proc/PID/pagemap, root only), which is what PSS sums to when nothing outside
the stack maps the same pages (on a shared machine, other programs that load
libtorch from the same venv lower the PSS of both stacks).

Everything runs on loopback ports chosen free, in a temporary directory removed at
the end (also on failure, Ctrl-C or SIGTERM; --keep keeps it, with the servers'
logs). Servers are stopped with SIGTERM to their process group, SIGKILL after 30 s.

After each pair, with no server running, the compute ceiling (`bare`): N
processes of bare_loop.py, the model loaded as TorchServe's handler loads it and
called back to back with the servers' intra-op threads (and batch), started
together, three --window-ms windows, the median of their summed rates: what N
workers would serve if a request cost nothing but the model's call.

Output (--out): per model and N the raw cells, `bare` and `chorus_vs_torchserve`:
`throughput` (chorus over TorchServe, at the highest concurrency), `p99_latency`
(TorchServe's p99 over chorus', same concurrency), `footprint` (TorchServe's
summed PSS over chorus'), `footprint_unique` (the same on distinct pages), `rss`,
`first_answer` and `all_ready` (TorchServe's time over chorus'),
`throughput_ceiling` (bare over TorchServe: the most any server of N workers
could reach over TorchServe on this machine), and throughput
and p50/p99 ratios per concurrency (`by_concurrency`); `goals`: the issue's
targets (at N = 4: resnet18 throughput >= 1.5 and footprint >= 2, big_mlp
footprint >= 3, resnet18_mar throughput >= 1.2 and big_mar footprint >= 3, keyed
torchserve_mar.*_vs_torchserve) and whether this run met them, the throughput goal with its
ceiling and whether the ceiling reaches it. The ratio table is printed, and
a plot written beside the JSON (peers.png).
"""

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from drive import bare_throughput, log, run_pair  # noqa: E402
from mar_models import same_answer  # noqa: E402
from servers import SERVERS, ChorusServer, TorchServe  # noqa: E402
from stacks import Stack, intra_op_threads  # noqa: E402
from summary import describe_cell, goals, mar_figures, plot, ratios, table  # noqa: E402
from workloads import (ALL_MODELS, BATCHED, ROOT, prepare, torchserve_store,  # noqa: E402
                       write_inputs)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "peers.json"))
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run (about 3 minutes): N = 2 only, short windows")
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--workers", default=None, help="default 1,2,4 (--quick: 2)")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--window-ms", type=int, default=None,
                        help="perf_analyzer's measurement window (default 2500; --quick 1000)")
    parser.add_argument("--stability-pct", type=int, default=None,
                        help="windows agree within this (default 25; --quick 50)")
    parser.add_argument("--max-trials", type=int, default=None,
                        help="windows at most per measurement (default 5; --quick 3)")
    parser.add_argument("--warmup-requests", type=int, default=None,
                        help="requests sent before measuring (default 48; --quick 16)")
    parser.add_argument("--perf-analyzer", default=os.environ.get("CHORUS_PERF_ANALYZER", ""))
    parser.add_argument("--chorus-protocol", choices=["grpc", "http"], default="grpc",
                        help="how perf_analyzer talks to chorus: Triton's gRPC (default) or "
                             "KServe v2 HTTP/REST (TorchServe is always HTTP)")
    parser.add_argument("--torchserve-log-config", default=None,
                        help="a log4j2 file for TorchServe (default: TorchServe's own)")
    parser.add_argument("--settle-s", type=float, default=12.0,
                        help="memory is read once a stack has been alone and idle this long")
    parser.add_argument("--start-timeout-s", type=float, default=300)
    parser.add_argument("--perf-timeout-s", type=float, default=300)
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (logs, model stores)")
    parser.add_argument("--prepare", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    quick = args.quick
    defaults = {"workers": "2" if quick else "1,2,4", "window_ms": 1000 if quick else 2500,
                "stability_pct": 50 if quick else 25, "max_trials": 3 if quick else 5,
                "warmup_requests": 16 if quick else 48}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.bin = os.path.abspath(args.bin)
    args.models = [m for m in args.models.split(",") if m]
    args.workers = [int(n) for n in str(args.workers).split(",")]
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    for name in args.models:
        if name not in ALL_MODELS:
            parser.error(f"unknown model {name} (known: {', '.join(ALL_MODELS)})")
    return args


def install_tools(args, python):
    """TorchServe into this venv, and perf_analyzer unless --perf-analyzer names one."""
    subprocess.run([os.path.join(ROOT, "tools", "install-torchserve.sh"), python, "--frontend"],
                   check=True)
    if not args.perf_analyzer:
        args.perf_analyzer = subprocess.run(
            [os.path.join(ROOT, "tools", "install-perf-analyzer.sh"), python], check=True,
            capture_output=True, text=True).stdout.strip()
    if not os.access(os.path.join(args.bin, "chorus-server"), os.X_OK):
        sys.exit(f"peers_bench: no chorus-server in {args.bin} (make build)")


def settings(args):
    """The run's settings, as the result records them."""
    return {
        "models": args.models, "workers": args.workers,
        "concurrency": args.concurrency, "quick": args.quick,
        "window_ms": args.window_ms, "stability_pct": args.stability_pct,
        "settle_s": args.settle_s,
        "max_trials": args.max_trials, "warmup_requests": args.warmup_requests,
        "cores": os.cpu_count(),
        "intra_op_threads": {str(n): intra_op_threads(n) for n in args.workers},
        "batching": "off on both (chorus archive not batchable; TorchServe batch size "
                    "1), except " + ", ".join(
                        f"{n}: up to {b['max_batch_size']} within {b['delay_ms']} ms "
                        "on both" for n, b in BATCHED.items()),
        "chorus": "chorus-server --interpreters N (supervised, as by default); "
                  f"perf_analyzer -i {args.chorus_protocol}; a .mar: N workers of its "
                  "handler (--torchserve-default-workers N) over min(N, cores) "
                  "interpreters",
        "torchserve": "TorchServe's defaults but system metrics off; --log-config "
                      + (args.torchserve_log_config or "TorchServe's own"),
    }


def versions(args, prepared):
    """The versions of everything compared and of the tools measuring them."""
    from importlib import metadata
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    return {
        "torch": prepared["torch"],
        "torchserve": metadata.version("torchserve"),
        "torch_model_archiver": metadata.version("torch-model-archiver"),
        "java": (re.search(r'version "([^"]+)"', java) or [None, java[:60]])[1],
        "perf_analyzer": args.perf_analyzer,
        "python": platform.python_version(),
    }


def run_cell(args, work, name, spec, workers, kinds):
    """One model and N: the pair of servers started in the order `kinds`, then the
    compute ceiling (`bare`) and the ratios. Returns (entry, whether a server failed)."""
    servers = [(ChorusServer if kind == "chorus" else TorchServe)(
        args, work, name, spec, workers) for kind in kinds]
    cells = run_pair(args, work, servers)
    failed = False
    for kind in kinds:
        log("  " + describe_cell(kind, cells[kind]))
        failed |= "error" in cells[kind]
    if spec.get("mar"):
        # The same archive on both: the same answer (JSON values within 1e-5).
        answers = [getattr(server, "answer", None) for server in servers]
        if None not in answers and not same_answer(*answers):
            failed = True
            cells[kinds[0]]["error"] = f"the servers' answers differ: {answers}"
            log(f"  FAILED: the servers' answers differ: {answers}")
        cells["bare"] = {"error": "no bare loop for a .mar archive (its handler's own code)"}
    else:
        try:
            cells["bare"] = bare_throughput(args, work, name, spec, workers)
            log(f"  bare: {cells['bare']['throughput_per_s']:.1f}/s")
        except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
            cells["bare"] = {"error": str(e)}
            log(f"  bare: FAILED: {e}")
    cells["chorus_vs_torchserve"] = ratios(
        cells["chorus"], cells["torchserve"], args.concurrency,
        None if "error" in cells["bare"] else cells["bare"])
    return {k: cells[k] for k in ("chorus_vs_torchserve", *SERVERS, "bare")}, failed


def run_models(args, work, prepared, result):
    """Every model at every N into result["models"]; whether a server failed. Which
    server goes first alternates from cell to cell."""
    failed = False
    order = 0
    for name in args.models:
        spec = prepared[name]
        entry = {"description": spec["description"], "input": spec.get("input", "a file"),
                 "weights_mib": round(spec["weights_mib"], 2), "workers": {}}
        result["models"][name] = entry
        for workers in args.workers:
            log(f"peers: {name}, N = {workers}")
            kinds = SERVERS if order % 2 == 0 else tuple(reversed(SERVERS))
            order += 1
            entry["workers"][str(workers)], cell_failed = run_cell(
                args, work, name, spec, workers, kinds)
            failed |= cell_failed
    return failed


def write_result(args, result):
    """The JSON (--out), the plot beside it, and the table on stdout."""
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    picture = os.path.splitext(args.out)[0] + ".png"
    plot(result, picture)
    log("")
    log(table(result))
    log(f"peers: {args.out}, {picture} ({result['seconds']:.0f} s)")


def run(args, work, python, began):
    """Everything in `work`: packaging, then every cell; whether a server failed."""
    os.makedirs(os.path.join(work, "logs"))
    log(f"peers: packaging {', '.join(args.models)}")
    subprocess.run([python, os.path.abspath(__file__), "--prepare", work,
                    "--models", ",".join(args.models)], check=True)
    with open(os.path.join(work, "prepared.json")) as f:
        prepared = json.load(f)
    write_inputs(work, prepared)
    args.torchserve_store = torchserve_store(work, prepared, python)
    result = {"settings": settings(args), "versions": versions(args, prepared), "models": {}}
    failed = run_models(args, work, prepared, result)
    result["goals"] = goals(result)
    result["torchserve_mar"] = mar_figures(result)
    result["seconds"] = round(time.monotonic() - began, 1)
    write_result(args, result)
    return failed


def main():
    args = parse_args()
    if args.prepare:
        return prepare(args.prepare, args.models)
    began = time.monotonic()
    python = sys.executable
    install_tools(args, python)

    work = tempfile.mkdtemp(prefix="chorus-peers-")
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    failed = False
    try:
        failed = run(args, work, python, began)
    except KeyboardInterrupt:
        failed = True
        log(f"peers: interrupted{' by signal %d' % interrupted[0] if interrupted else ''}; "
            "stopping the servers")
    finally:
        Stack.stop_all()
        if args.keep:
            log(f"peers: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
