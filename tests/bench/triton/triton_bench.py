"""make bench-triton: Triton 2.51 itself as the peer, serving one model repository folder
(config.pbtxt and model.py, Triton's format) with chorus-server, side by side in one run.

    triton_bench.py --bin build/bin --out build/bench/triton.json [--quick]
                    [--instances 2] [--rounds 2] [--fleet 20,50] [--keep]

Triton is nvidia-pytriton 0.7.0's tritonserver 2.51.0 (tools/install-triton.sh installs it
into chorus' cache on first use); its Python-backend stubs run chorus' venv (its bin/ first
on PATH), so both servers run the same Python, torch and model files.

The repository (triton_models.py, model_py/): identity (FP32 [1,4]); pyloop (~1 ms of
branchy pure Python); mlp (a torch MLP, 4-1024-1024-4); resnet18 (torchvision's, 3x64x64
items, dynamic batching up to 8), measured with requests of 1 item and of 8 (resnet18_b8);
bls (a model.py calling identity then mlp per request with InferenceRequest.exec);
decoupled (16 streamed answers per request). One folder per instance count (1 and N =
--instances); chorus-server serves it with as many interpreters as instances, Triton
starts a stub process per instance, and models needing torch's threads use cores over
the instance count in both (chorus' own setting).

For each instance count, --rounds rounds; in each, the two servers in turn (which goes
first alternates), on the same three ports, each from spawn to stop
(triton_measure.run_server): time to ready; every model answers a fixed request
correctly; every row warmed up and measured by perf_analyzer over gRPC (identity over
HTTP too, at N instances) at concurrency 1 and 2N, the peers benchmark's windows until
they agree (tests/bench/peers/drive.py), the server's statistics read around each
measurement; after --settle-s idle, PSS summed over the server and every child (Triton's
stubs). Each ratio is taken within a round, then the median over the rounds.

Bounds: at N instances each round also measures the floor under identity (an echo server,
triton_servers.EchoServer); after the rounds, with no server running, each model row's
ceiling (triton_measure.run_ceilings): the model's own execute() in N processes at once
and one call's time (bare_execute.py); with the echo's CPU per request at 2N (the
transport's floor) added, a bound. Each goal on a throughput or latency ratio is reported
with the bound a server costing nothing else would reach (summary's GOALS).

Density (--fleet): M distinct Python models (fleet_mlp.py, each importing torch and
holding its own weights, widths 128 to 1024), one instance each and N each, both
servers in turn: time to ready, footprint after bench-density's warm-up load and
--settle-s, throughput of its load generator over the fleet. A server that runs the
machine under --memory-floor-mib while starting is stopped and its footprint estimated
from its stubs so far.

Output (--out): the cells, the issue's figures (identity.p50_vs_triton,
pyloop/mlp/resnet18_b8.throughput_vs_triton, bls.added_us and bls.added_vs_triton,
footprint_vs_triton, density.<M>.footprint_vs_triton, ready_vs_triton and
growth_2_instances, same_repository), where the CPU goes per request at 2N
(<row>.cpu_us: each server's frontend, models, perf_analyzer, the machine), the bounds
(<row>.ceiling_vs_triton, transport.cpu_us, <row>.bound_vs_triton,
identity.execute_floor_vs_triton), goals; the tables beside it (.md, printed; the same
that triton_report.py writes into docs/benchmarks.md) and the plot (.png).
"""

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)

import triton_report  # noqa: E402
from triton_measure import log, run_ceilings, run_fleet, run_floor, run_server  # noqa: E402
from triton_models import ROWS, fleet_names  # noqa: E402
from triton_servers import ChorusServer, EchoServer, TritonServer  # noqa: E402
from triton_summary import SERVERS, summarize  # noqa: E402

from stacks import Stack, free_ports  # noqa: E402 (tests/bench/peers, on the path)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "triton.json"))
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run (a few minutes): 1 round, short windows, fleets of 4, 8")
    parser.add_argument("--instances", type=int, default=2, help="N (the other count is 1)")
    parser.add_argument("--rounds", type=int, default=None, help="default 2 (--quick 1)")
    parser.add_argument("--rows", default=",".join(r[0] for r in ROWS))
    parser.add_argument("--fleet", default=None, help="fleet sizes, default 20,50 (--quick "
                                                       "4,8; empty: no density part)")
    parser.add_argument("--window-ms", type=int, default=None,
                        help="perf_analyzer's window (default 1500; --quick 500)")
    parser.add_argument("--stability-pct", type=int, default=None,
                        help="windows agree within this (default 20; --quick 50)")
    parser.add_argument("--max-trials", type=int, default=None, help="default 6 (--quick 3)")
    parser.add_argument("--warmup-requests", type=int, default=None,
                        help="requests per row before measuring (default 64; --quick 16)")
    parser.add_argument("--cpu-window-s", type=float, default=None,
                        help="how long each row's CPU breakdown runs, default 3 (--quick 1)")
    parser.add_argument("--settle-s", type=float, default=None,
                        help="idle before memory is read (default 8; --quick 2)")
    parser.add_argument("--fleet-threads", type=int, default=4)
    parser.add_argument("--fleet-warmup-s", type=float, default=None, help="default 5 (quick 2)")
    parser.add_argument("--fleet-load-s", type=float, default=None, help="default 10 (quick 3)")
    parser.add_argument("--memory-floor-mib", type=float, default=1536)
    parser.add_argument("--perf-analyzer", default=os.environ.get("CHORUS_PERF_ANALYZER", ""))
    parser.add_argument("--tritonserver", default="", help="default: tools/install-triton.sh's")
    parser.add_argument("--start-timeout-s", type=float, default=600)
    parser.add_argument("--perf-timeout-s", type=float, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the work folder and logs")
    args = parser.parse_args()
    quick = args.quick
    defaults = {"rounds": 1 if quick else 2, "fleet": "4,8" if quick else "20,50",
                "window_ms": 500 if quick else 1500, "stability_pct": 50 if quick else 20,
                "max_trials": 3 if quick else 6, "warmup_requests": 16 if quick else 64,
                "settle_s": 2.0 if quick else 8.0, "cpu_window_s": 1.0 if quick else 3.0,
                "fleet_warmup_s": 2.0 if quick else 5.0, "fleet_load_s": 3.0 if quick else 10.0}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.bin = os.path.abspath(args.bin)
    args.rows = [r for r in ROWS if r[0] in args.rows.split(",")]
    args.fleet = sorted(int(m) for m in args.fleet.split(",") if m)
    args.counts = sorted({1, args.instances})
    return args


def install_tools(args):
    python = sys.executable
    if not args.perf_analyzer:
        args.perf_analyzer = subprocess.run(
            [os.path.join(ROOT, "tools", "install-perf-analyzer.sh"), python], check=True,
            capture_output=True, text=True).stdout.strip()
    if not args.tritonserver:
        args.tritonserver = subprocess.run(
            [os.path.join(ROOT, "tools", "install-triton.sh"), python, "--quiet"], check=True,
            stdout=subprocess.PIPE, text=True).stdout.strip()
    args.stub_python = subprocess.run(
        [os.path.join(ROOT, "tools", "install-triton.sh"), python, "--stub-python"], check=True,
        stdout=subprocess.PIPE, text=True).stdout.strip()
    if not os.access(os.path.join(args.bin, "chorus-server"), os.X_OK):
        sys.exit(f"triton_bench: no chorus-server in {args.bin} (make build)")


def make_server(args, work, kind, repository, ports, label, interpreters):
    folder = os.path.join(work, repository)
    if kind == "chorus":
        return ChorusServer(args.bin, work, folder, ports, label, interpreters)
    return TritonServer(args.tritonserver, args.stub_python, work, folder, ports, label)


def describe(kind, cell):
    if "error" in cell:
        return f"  {kind:<7} error: {cell['error'][:200]}"
    parts = [f"  {kind:<7} ready {cell['ready_s']:.1f} s, PSS "
             f"{cell.get('memory', {}).get('pss_mib', 0):.0f} MiB"]
    for row, by_c in cell.get("rows", {}).items():
        if "error" in by_c:
            parts.append(f"{row} error")
            continue
        parts.append(row + " " + "/".join(
            f"{f['throughput_per_s']:.0f}/s p50 {1000 * f['p50_ms']:.0f}us" for f in by_c.values()))
    return "; ".join(parts)


def run_repository(args, work, ports):
    """The six models at each instance count, --rounds rounds, both servers per round;
    at N instances, each round also measures the floor under identity (the echo).
    Returns (cells, floor_cells)."""
    cells, floors = {}, {}
    concurrencies = [1, 2 * args.instances]
    identity = [r for r in args.rows if r[0] == "identity"]
    for n in args.counts:
        rows = [r for r in args.rows if r[3] == "grpc" or n == args.instances]
        for r in range(args.rounds):
            kinds = SERVERS if (r + n) % 2 == 0 else tuple(reversed(SERVERS))
            log(f"triton: {n} instance(s), round {r + 1} of {args.rounds}")
            for kind in kinds:
                server = make_server(args, work, kind, f"repository-n{n}", ports,
                                     f"n{n}-r{r}", n)
                # The CPU breakdown only where the summary reads it: at N instances.
                cell = run_server(args, server, rows, concurrencies,
                                  os.path.join(work, "checks"), work, f"n{n}-r{r}",
                                  cpu=n == args.instances)
                cells.setdefault(str(n), {}).setdefault(str(r), {})[kind] = cell
                log(describe(kind, cell))
            if n == args.instances and identity:
                echo = EchoServer(args.bin, work, os.path.join(work, f"repository-n{n}"),
                                  ports, f"n{n}-r{r}")
                floors[str(r)] = run_floor(args, echo, identity[0], concurrencies, work,
                                           f"n{n}-r{r}")
                log("  echo    identity " + "/".join(
                    f"{f['throughput_per_s']:.0f}/s p50 {1000 * f['p50_ms']:.0f}us"
                    for f in floors[str(r)].values() if isinstance(f, dict)))
    return cells, floors


def run_density(args, work, ports, prepared):
    """Each fleet size at 1 and N instances each, both servers in turn."""
    cells = {}
    for size in args.fleet:
        specs = {name: prepared["fleet"][name] for name in fleet_names(size)}
        for i, n in enumerate(args.counts):
            kinds = SERVERS if i % 2 == 0 else tuple(reversed(SERVERS))
            for kind in kinds:
                log(f"triton: fleet of {size}, {n} instance(s) each: {kind}")
                server = make_server(args, work, kind, f"fleet-{size}-n{n}", ports,
                                     f"fleet{size}-n{n}", args.instances)
                cell = run_fleet(args, server, specs, stubs=size * n)
                cell["repository"] = server.repository
                cells.setdefault(str(size), {}).setdefault(str(n), {})[kind] = cell
                log(f"    {kind}: ready {cell.get('ready_s')} s, PSS {cell.get('pss_mib')} MiB"
                    f", {(cell.get('load') or {}).get('requests_per_s')} req/s")
    return cells


def settings(args, prepared):
    return {"instances": args.instances, "instance_counts": args.counts, "rounds": args.rounds,
            "rows": [r[0] for r in args.rows], "concurrency": [1, 2 * args.instances],
            "fleet": args.fleet, "quick": args.quick, "window_ms": args.window_ms,
            "stability_pct": args.stability_pct, "max_trials": args.max_trials,
            "warmup_requests": args.warmup_requests, "settle_s": args.settle_s,
            "fleet_threads": args.fleet_threads, "fleet_load_s": args.fleet_load_s,
            "cores": os.cpu_count(), "pyloop_iterations": prepared["pyloop_iterations"],
            "chorus": "chorus-server --interpreters <instances> (supervised, as by default); "
                      "the fleet with --interpreters N",
            "triton": "tritonserver --model-repository <the same folder>, defaults otherwise "
                      "(--exit-timeout-secs 5); the stubs run chorus' venv"}


def versions(args, prepared, result):
    def server_version(kind):
        for rounds in result["cells"].values():
            for pair in rounds.values():
                if pair.get(kind, {}).get("server"):
                    return pair[kind]["server"].get("version")
        return None
    return {"triton": server_version("triton"), "chorus": server_version("chorus"),
            "nvidia_pytriton": "0.7.0", "tritonserver": args.tritonserver,
            "torch": prepared["torch"], "perf_analyzer": args.perf_analyzer,
            "python": platform.python_version(), "numpy": {
                "chorus": importlib.metadata.version("numpy"),
                "triton": subprocess.run(
                    [args.stub_python, "-c", "import numpy; print(numpy.__version__)"],
                    capture_output=True, text=True).stdout.strip() or None}}


def run(args, work, began):
    os.makedirs(os.path.join(work, "logs"))
    log("triton: writing the repositories")
    subprocess.run([sys.executable, os.path.join(HERE, "triton_models.py"), work,
                    "--instances", ",".join(map(str, args.counts)),
                    "--fleet", ",".join(map(str, args.fleet)),
                    "--fleet-instances", ",".join(map(str, args.counts))], check=True)
    with open(os.path.join(work, "prepared.json")) as f:
        prepared = json.load(f)
    ports = free_ports(3)  # gRPC, HTTP, metrics: both servers, in turn
    cells, floors = run_repository(args, work, ports)
    log(f"triton: ceilings, {args.instances} bare execute() loops at once, no server")
    ceilings = run_ceilings(args, args.rows, os.path.join(work, f"repository-n{args.instances}"),
                            args.instances)
    result = {"cells": cells, "floor_cells": floors, "ceiling_cells": ceilings,
              "fleet_cells": run_density(args, work, ports, prepared) if args.fleet else {},
              "weights_mib": prepared["weights_mib"]}
    result["settings"] = settings(args, prepared)
    result["versions"] = versions(args, prepared, result)
    summarize(result, args.instances, [r[0] for r in args.rows])
    result["seconds"] = round(time.monotonic() - began, 1)
    result["date"] = time.strftime("%Y-%m-%d %H:%M")
    write_result(args, result)
    return any("error" in cell for rounds in result["cells"].values()
               for pair in rounds.values() for cell in pair.values())


def write_result(args, result):
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    base = os.path.splitext(args.out)[0]
    text = triton_report.markdown(result)
    with open(base + ".md", "w") as f:
        f.write(text)
    triton_report.plot(result, base + ".png")
    log("")
    log(text)
    log(f"triton: {args.out}, {base}.md, {base}.png ({result['seconds']:.0f} s)")


def main():
    args = parse_args()
    began = time.monotonic()
    install_tools(args)
    work = tempfile.mkdtemp(prefix="chorus-triton-")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    failed = False
    try:
        failed = run(args, work, began)
    except KeyboardInterrupt:
        failed = True
        log("triton: interrupted; stopping the servers")
    finally:
        Stack.stop_all()
        # Shared-memory regions of Triton's stubs a killed server left behind.
        for entry in os.listdir("/dev/shm"):
            if entry.startswith(TritonServer.shm_prefix_of_this_run()):
                os.unlink(os.path.join("/dev/shm", entry))
        if args.keep:
            log(f"triton: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
