"""make bench-peers: chorus against TorchServe, serving the same models side by side.

    peers_bench.py --bin build/bin --out build/bench/peers.json [--quick]
                   [--models resnet18,control_flow,big_mlp,resnet18_batched]
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

For each model and N in --workers, one chorus-server with N interpreters and one
TorchServe with N workers (batch size 1 but in BATCHED configurations; intra-op
threads max(1, cores / N) in both, which is what chorus-server sets), A-B-A (A
is chorus or TorchServe, alternating from cell to cell):

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
footprint >= 3) and whether this run met them, the throughput goal with its
ceiling and whether the ceiling reaches it. The ratio table is printed, and
a plot written beside the JSON (peers.png).
"""

import argparse
import base64
import csv
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

ALL_MODELS = ["resnet18", "control_flow", "big_mlp", "resnet18_batched"]
# Configurations that batch on both sides, with the same settings: the model packaged
# batchable up to max_batch_size; chorus' dynamic batching waits up to delay_ms for a
# batch to fill (config.json max_queue_delay_us), TorchServe's frontend likewise
# (batchSize, maxBatchDelay in the archive's model-config.yaml), whose handler then
# runs the batch as one call. perf_analyzer still sends one item per request.
BATCHED = {"resnet18_batched": {"model": "resnet18", "max_batch_size": 8, "delay_ms": 2}}
GOALS = [  # (model, workers, ratio, at least)
    ("resnet18", 4, "throughput", 1.5),
    ("resnet18", 4, "footprint", 2.0),
    ("big_mlp", 4, "footprint", 3.0),
]
SERVERS = ("chorus", "torchserve")


def log(message):
    print(message, flush=True)


# --------------------------------------------------------------------------
# Preparation (a child process: the driver itself never imports torch, so it
# maps none of libtorch's pages and cannot lower either stack's PSS by sharing
# them).

def prepare(work, names):
    """Packages each model, writes its input bytes and reference output; runs in a
    child process. Writes work/prepared.json."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "bench", "suite"))
    sys.path.insert(0, HERE)
    import torch

    import models as suite_models
    from chorus.package import create_package
    prepared = {"torch": torch.__version__}
    for name in names:
        if name == "big_mlp":
            import big_mlp
            model, inputs = big_mlp.build(), big_mlp.example_inputs()
            description = ("16 fp32 Linear layers 4096x4096 with ReLU (1.0 GiB of weights), "
                           "forward on 1x4096")
        else:
            spec = suite_models.MODELS[BATCHED.get(name, {}).get("model", name)]
            model, inputs = spec.build()
            description = spec.description
        model.eval()
        folder = os.path.join(work, "chorus", name, "1")
        os.makedirs(folder)
        archive = os.path.join(folder, "model.pt")
        batching = BATCHED.get(name)
        if batching:
            description += (f"; batched up to {batching['max_batch_size']} within "
                            f"{batching['delay_ms']} ms on both sides")
            manifest = create_package(archive, model, inputs, name=name, batchable=True,
                                      max_batch_size=batching["max_batch_size"],
                                      progress=False)
            with open(os.path.join(work, "chorus", name, "config.json"), "w") as f:
                json.dump({"max_queue_delay_us": batching["delay_ms"] * 1000}, f)
        else:
            manifest = create_package(archive, model, inputs, name=name, batchable=False,
                                      progress=False)
        (x,) = inputs
        with torch.inference_mode():
            y = model(x)
        input_bin = os.path.join(work, "inputs", f"{name}.bin")
        os.makedirs(os.path.dirname(input_bin), exist_ok=True)
        with open(input_bin, "wb") as f:
            f.write(x.contiguous().numpy().tobytes())
        with open(os.path.join(work, "inputs", f"{name}.expected.bin"), "wb") as f:
            f.write(y.contiguous().numpy().tobytes())
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        prepared[name] = {"archive": archive, "input_bin": input_bin,
                          "input": manifest["inputs"][0], "output": manifest["outputs"][0],
                          "description": description, "weights_mib": weights / 2**20}
        del model
    with open(os.path.join(work, "prepared.json"), "w") as f:
        json.dump(prepared, f, indent=1)


def torchserve_store(work, prepared, python):
    """A TorchServe model store holding each model as torch-model-archiver makes it
    (no-archive format: a folder, so TorchServe does not unzip it at start), with
    the archive itself hard-linked in (the tool copies it)."""
    store = os.path.join(work, "torchserve_store")
    os.makedirs(store)
    archiver = os.path.join(os.path.dirname(python), "torch-model-archiver")
    for name in ALL_MODELS:
        if name not in prepared:
            continue
        archive = prepared[name]["archive"]
        command = [archiver, "--model-name", name, "--version", "1.0",
                   "--serialized-file", archive,
                   "--handler", os.path.join(HERE, "torchserve_handler.py"),
                   "--export-path", store, "--archive-format", "no-archive"]
        if name in BATCHED:
            config = os.path.join(work, f"{name}.model-config.yaml")
            with open(config, "w") as f:
                f.write(f"batchSize: {BATCHED[name]['max_batch_size']}\n"
                        f"maxBatchDelay: {BATCHED[name]['delay_ms']}\n")
            command += ["--config-file", config]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        copy = os.path.join(store, name, os.path.basename(archive))
        try:
            os.unlink(copy)
            os.link(archive, copy)
        except OSError:
            shutil.copyfile(archive, copy)
    return store


# --------------------------------------------------------------------------
# Processes and memory

class Stack:
    """A server's process group; stopped by stop() or by the driver's cleanup."""
    running = []

    def __init__(self, command, env, cwd, log_path, read_stdout=False):
        self.log_file = open(log_path, "w")
        self.process = subprocess.Popen(
            command, env=env, cwd=cwd, stderr=self.log_file, text=True,
            stdout=subprocess.PIPE if read_stdout else self.log_file, start_new_session=True)
        self.pgid = self.process.pid
        Stack.running.append(self)

    def alive(self):
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False

    def stop(self, grace_s=30.0):
        if self not in Stack.running:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.process.poll()  # reaps the group leader
                if not self.alive():
                    break
                time.sleep(0.1)
            if not self.alive():
                break
        self.process.poll()
        if self.process.stdout:
            self.process.stdout.close()
        self.log_file.close()
        Stack.running.remove(self)

    @classmethod
    def stop_all(cls):
        for stack in list(cls.running):
            stack.stop(grace_s=10.0)


def process_tree(root):
    """[root and every descendant], by scanning /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def process_memory(pid):
    """(PSS, RSS) MiB of one process from /proc/PID/smaps_rollup, and its name."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:"):
                fields[parts[0]] = int(parts[1]) / 1024.0
    with open(f"/proc/{pid}/comm") as f:
        name = f.read().strip()
    return fields["Pss:"], fields["Rss:"], name


def resident_frames(pid):
    """The physical page frames (PFNs) `pid` has resident, from /proc/PID/pagemap
    (root only: others read zeros, and then None is returned)."""
    import numpy as np
    frames = []
    with open(f"/proc/{pid}/smaps") as smaps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        span = None
        for line in smaps:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(v, 16) for v in head.split("-"))
                span = (start, end)
            elif head == "Rss:" and span and int(line.split()[1]) > 0:
                start, end = span
                try:
                    pagemap.seek(start // 4096 * 8)
                    entries = np.frombuffer(pagemap.read((end - start) // 4096 * 8),
                                            dtype=np.uint64)
                except OSError:
                    continue
                present = entries[(entries >> np.uint64(63)).astype(bool)]
                frames.append(present & np.uint64((1 << 55) - 1))
    if not frames:
        return np.zeros(0, dtype=np.uint64)
    frames = np.concatenate(frames)
    if frames.size and not frames.any():
        return None
    return frames


def stack_memory(root, roles, exclude=()):
    """Summed PSS and RSS over `root`'s process tree, with each process."""
    processes = []
    for pid in process_tree(root):
        if pid in exclude:
            continue
        try:
            pss, rss, name = process_memory(pid)
        except (OSError, KeyError):
            continue
        processes.append({"pid": pid, "name": name, "role": roles(pid, name),
                          "pss_mib": round(pss, 1), "rss_mib": round(rss, 1)})
    memory = {"pss_mib": round(sum(p["pss_mib"] for p in processes), 1),
              "rss_mib": round(sum(p["rss_mib"] for p in processes), 1)}
    # The stack's distinct physical pages, each counted once however many of its
    # processes map it and whoever else does: what it would take on a machine of
    # its own. PSS splits a page among all its mappers, so another program that
    # maps the same libtorch files (a test, a second server) lowers it.
    try:
        import numpy as np
        frames = [resident_frames(p["pid"]) for p in processes]
        if all(f is not None for f in frames):
            memory["unique_mib"] = round(np.unique(np.concatenate(frames)).size * 4096 / 2**20,
                                         1)
    except OSError:
        pass
    memory["processes"] = processes
    return memory


def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# --------------------------------------------------------------------------
# The two servers

def answers_match(raw, expected_path):
    import numpy as np
    expected = np.fromfile(expected_path, dtype=np.float32)
    got = np.frombuffer(raw, dtype=np.float32)
    scale = max(1e-6, float(np.abs(expected).max()))
    return got.shape == expected.shape and bool(np.allclose(got, expected, rtol=1e-3,
                                                            atol=1e-4 * scale))


class ChorusServer:
    kind = "chorus"

    def __init__(self, args, work, name, spec, workers):
        self.args, self.name, self.spec, self.workers = args, name, spec, workers
        repository = os.path.join(work, "repositories", f"{name}-{workers}-{time.time_ns()}")
        os.makedirs(repository)
        os.symlink(os.path.join(work, "chorus", name), os.path.join(repository, name))
        server = os.path.join(args.bin, "chorus-server")
        self.command = [server, "--model-repository", repository, "--host", "127.0.0.1",
                        "--port", "0", "--metrics-port", "0", "--interpreters", str(workers)]
        if chorus_has_http(server):
            # Served as by default, on a free port (the default, 8000, may be taken).
            self.command += ["--http-port", "0"]
        self.log_path = os.path.join(work, "logs", f"chorus-{name}-{workers}.log")
        self.work = work

    def start(self):
        """Starts the server; returns (first_answer_s, all_ready_s)."""
        import numpy as np
        import tritonclient.grpc as grpcclient
        env = dict(os.environ)
        started = time.monotonic()
        self.stack = Stack(self.command, env, self.work, self.log_path, read_stdout=True)
        line = self.stack.process.stdout.readline()
        match = re.search(r"port (\d+)", line)
        if not match:
            raise RuntimeError(f"chorus-server did not start: {line!r} (see {self.log_path})")
        self.port = int(match.group(1))
        self.address = f"127.0.0.1:{self.port}"
        http = re.search(r"http (\d+)", line)
        self.http_address = f"127.0.0.1:{http.group(1)}" if http else None
        if self.args.chorus_protocol == "http" and not self.http_address:
            raise RuntimeError("this chorus-server serves no HTTP/REST")
        spec = self.spec
        data = np.fromfile(spec["input_bin"], dtype=np.float32).reshape(spec["input"]["shape"])
        deadline = started + self.args.start_timeout_s
        while True:
            # A new channel each time: one that saw a refused connection would wait
            # out gRPC's reconnect backoff, the client's delay, not the server's.
            client = grpcclient.InferenceServerClient(self.address)
            try:
                request = grpcclient.InferInput(spec["input"]["name"], list(data.shape), "FP32")
                request.set_data_from_numpy(data)
                result = client.infer(self.name, [request])
                raw = result.as_numpy(spec["output"]["name"]).tobytes()
                first = time.monotonic() - started
                break
            except Exception as e:  # noqa: BLE001 (not serving yet)
                if self.crashes() or "quarantined" in str(e):
                    raise RuntimeError(
                        f"chorus-server crashed: {e} (see {self.log_path})") from None
                if time.monotonic() > deadline or not self.stack.alive():
                    raise RuntimeError(
                        f"chorus-server gave no answer: {e} (see {self.log_path})") from None
                time.sleep(0.02)
            finally:
                client.close()
        if not answers_match(raw, os.path.join(self.work, "inputs", f"{self.name}.expected.bin")):
            raise RuntimeError(f"chorus' answer for {self.name} differs from the model's")
        # chorus loads the model on every interpreter before it answers.
        return first, first

    def perf_args(self):
        address = self.http_address if self.args.chorus_protocol == "http" else self.address
        return ["-m", self.name, "-i", self.args.chorus_protocol, "-u", address, "--input-data",
                os.path.join(self.work, "inputs", f"{self.name}.grpc.json")]

    def crashes(self):
        """Times the serving process died (the supervisor restarts it)."""
        with open(self.log_path, errors="replace") as f:
            return f.read().count("fatal signal")

    def memory(self):
        root = self.stack.process.pid

        def role(pid, name):
            return "supervisor" if pid == root else "serving process"
        return stack_memory(root, role)

    def stop(self):
        self.stack.stop()


class TorchServe:
    kind = "torchserve"

    def __init__(self, args, work, name, spec, workers):
        self.args, self.name, self.spec, self.workers = args, name, spec, workers
        self.work = work
        self.home = tempfile.mkdtemp(prefix=f"torchserve-{name}-{workers}-", dir=work)
        self.log_path = os.path.join(work, "logs", f"torchserve-{name}-{workers}.log")

    def start(self):
        ports = free_ports(5)
        self.port, self.management_port = ports[0], ports[1]
        config = os.path.join(self.home, "config.properties")
        with open(config, "w") as f:
            f.write("\n".join([
                f"inference_address=http://127.0.0.1:{ports[0]}",
                f"management_address=http://127.0.0.1:{ports[1]}",
                f"metrics_address=http://127.0.0.1:{ports[2]}",
                f"grpc_inference_port={ports[3]}",
                f"grpc_management_port={ports[4]}",
                "grpc_inference_address=127.0.0.1",
                "grpc_management_address=127.0.0.1",
                f"default_workers_per_model={self.workers}",
                # A periodic collector process (a fresh Python every minute) that
                # would land in random measurement windows; chorus runs none.
                "disable_system_metrics=true",
                "",
            ]))
        for sub in ("tmp", "logs"):
            os.makedirs(os.path.join(self.home, sub))
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the workers see TorchServe and the venv, not chorus
        tmp = os.path.join(self.home, "tmp")
        env.update({
            "TEMP": tmp,  # the frontend's java.io.tmpdir: worker sockets
            "TMPDIR": tmp,  # the launcher's pid file
            "LOG_LOCATION": os.path.join(self.home, "logs"),
            "METRICS_LOCATION": os.path.join(self.home, "logs"),
            "CHORUS_PEERS_INTRA_OP_THREADS": str(intra_op_threads(self.workers)),
        })
        python = sys.executable
        command = [os.path.join(os.path.dirname(python), "torchserve"), "--start",
                   "--foreground", "--ncs", "--disable-token-auth",
                   "--model-store", self.args.torchserve_store,
                   "--models", f"{self.name}={self.name}", "--ts-config", config]
        if self.args.torchserve_log_config:
            command += ["--log-config", self.args.torchserve_log_config]
        started = time.monotonic()
        self.stack = Stack(command, env, self.home, self.log_path)
        with open(self.spec["input_bin"], "rb") as f:
            payload = f.read()
        url = f"http://127.0.0.1:{self.port}/predictions/{self.name}"
        deadline = started + self.args.start_timeout_s
        while True:
            try:
                raw = post_form(url, payload)
                first = time.monotonic() - started
                break
            except (OSError, urllib.error.URLError, ConnectionError) as e:
                if time.monotonic() > deadline or not self.stack.alive():
                    raise RuntimeError(f"TorchServe gave no answer: {e} (see {self.log_path} "
                                       f"and {self.home}/logs)") from None
                time.sleep(0.02)
        if not answers_match(raw, os.path.join(self.work, "inputs", f"{self.name}.expected.bin")):
            raise RuntimeError(f"TorchServe's answer for {self.name} differs from the model's")
        # TorchServe answers as soon as one worker is up; the others follow.
        status = f"http://127.0.0.1:{self.management_port}/models/{self.name}"
        while True:
            try:
                with urllib.request.urlopen(status, timeout=10) as response:
                    (description,) = json.loads(response.read())
                ready = sum(w.get("status") == "READY" for w in description.get("workers", []))
                if ready >= self.workers:
                    return first, time.monotonic() - started
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"TorchServe's {self.workers} workers were not ready")
            time.sleep(0.02)

    def crashes(self):
        """Times a worker died (the frontend restarts it)."""
        with open(self.log_path, errors="replace") as f:
            return f.read().count("Backend worker error")

    def perf_args(self):
        return ["-m", self.name, "--service-kind", "torchserve", "-i", "http",
                "-u", f"127.0.0.1:{self.port}", "--input-data",
                os.path.join(self.work, "inputs", f"{self.name}.torchserve.json")]

    def memory(self):
        # The `torchserve` script started with --foreground stays as the Java
        # frontend's parent; without it, it exits at once: not part of the stack.
        launcher = self.stack.process.pid

        def role(pid, name):
            return "frontend (java)" if name == "java" else "worker"
        return stack_memory(launcher, role, exclude=(launcher,))

    def stop(self):
        self.stack.stop()


def post_form(url, payload):
    """POSTs `payload` as perf_analyzer's TorchServe client does: multipart form
    data, one part named "data" without file name or content type."""
    boundary = "chorus-peers-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"data\"\r\n\r\n"
            .encode() + payload + f"\r\n--{boundary}--\r\n".encode())
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def chorus_has_http(server):
    """Whether this chorus-server serves HTTP/REST (--http-port)."""
    done = subprocess.run([server, "--help"], capture_output=True, text=True)
    return "--http-port" in done.stdout


def intra_op_threads(workers):
    """What chorus-server gives libtorch's one pool (InterpreterManagerOptions'
    default): the cores over the interpreters, at least 1."""
    return max(1, (os.cpu_count() or 1) // workers)


# --------------------------------------------------------------------------
# perf_analyzer

def perf_analyzer(args, server, concurrency, work, label, request_count=None):
    """One perf_analyzer run; returns its figures (or raises). With request_count,
    exactly that many requests, no stability check (the warm-up). Otherwise time
    windows until 3 agree; if they never do, the load is measured again over a
    fixed number of requests (about 3 windows' worth at the server's last measured
    rate, server.rate) and marked stable: false."""
    report = os.path.join(work, "logs", f"perf-{label}.csv")
    output = os.path.join(work, "logs", f"perf-{label}.log")
    base = [args.perf_analyzer, *server.perf_args(), "--concurrency-range", str(concurrency),
            "-f", report]
    if request_count:
        attempts = [["--request-count", str(request_count)]]
    else:
        fallback = max(4 * concurrency,
                       int(getattr(server, "rate", 0) * 3 * args.window_ms / 1000.0))
        attempts = [["-p", str(args.window_ms), "-s", str(args.stability_pct),
                     "-r", str(args.max_trials)],
                    ["--request-count", str(fallback)]]
    for attempt, extra in enumerate(attempts):
        if os.path.exists(report):
            os.unlink(report)
        with open(output, "w") as out:
            done = subprocess.run(base + extra, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=args.perf_timeout_s)
        if done.returncode == 0 and os.path.exists(report):
            rows = list(csv.DictReader(open(report)))
            if rows:
                row = rows[0]
                count = re.search(r"Request count: (\d+)", open(output).read())
                figures = {"requests": int(count.group(1)) if count else None,
                           "throughput_per_s": round(float(row["Inferences/Second"]), 2),
                           "p50_ms": round(int(row["p50 latency"]) / 1000.0, 3),
                           "p99_ms": round(int(row["p99 latency"]) / 1000.0, 3),
                           "stable": request_count is not None or attempt == 0}
                server.rate = figures["throughput_per_s"]
                return figures
        text = open(output).read()
        if "Failed to obtain stable measurement" not in text:
            break
    tail = "\n".join(line for line in open(output).read().splitlines()
                     if "Timer not set correctly" not in line)[-2000:]
    raise RuntimeError(f"perf_analyzer failed against {server.kind} ({label}):\n{tail}")


def write_inputs(work, prepared):
    """perf_analyzer's input files: the same bytes for both servers."""
    for name, spec in prepared.items():
        if not isinstance(spec, dict):
            continue
        with open(spec["input_bin"], "rb") as f:
            payload = f.read()
        inputs = os.path.join(work, "inputs")
        with open(os.path.join(inputs, f"{name}.grpc.json"), "w") as f:
            json.dump({"data": [{spec["input"]["name"]: {
                "b64": base64.b64encode(payload).decode()}}]}, f)
        with open(os.path.join(inputs, f"{name}.torchserve.json"), "w") as f:
            json.dump({"data": [{"TORCHSERVE_INPUT": [spec["input_bin"]]}]}, f)


# --------------------------------------------------------------------------
# One cell: a server with N workers, from start to stop

def run_pair(args, work, servers):
    """Both servers for one model and N, A-B-A: A starts alone, is warmed and
    measured, and its memory read; then B starts (A idle), is warmed and measured;
    then A is measured again (its figures are the mean of its two passes, so a
    machine whose speed drifts over the minute hurts neither side); A stops and
    B's memory is read alone. Each stack's memory is read while the other is not
    running (they map the same libtorch files; PSS would split those pages between
    them). Returns {kind: cell}; a failure is recorded in its cell."""
    a, b = servers
    cells = {server.kind: {"workers": server.workers,
                           "intra_op_threads": intra_op_threads(server.workers)}
             for server in servers}

    def attempt(server, step):
        cell = cells[server.kind]
        if "error" in cell:
            return
        try:
            step(server, cell)
        except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
            cell["error"] = str(e)
            log(f"  {server.kind}: FAILED: {e}")
            if hasattr(server, "stack"):
                server.stop()

    def start(server, cell):
        first, ready = server.start()
        cell["first_answer_s"] = round(first, 3)
        cell["all_ready_s"] = round(ready, 3)
        top = max(args.concurrency)
        label = f"{server.kind}-{server.name}-{server.workers}"
        try:
            perf_analyzer(args, server, top, work, f"{label}-warmup",
                          request_count=max(args.warmup_requests, 2 * top))
        except RuntimeError:
            pass  # the measurement reports the failure

    def measure(server, cell):
        label = f"{server.kind}-{server.name}-{server.workers}"
        for concurrency in args.concurrency:
            passes = cell.setdefault("passes", {}).setdefault(str(concurrency), [])
            passes.append(perf_analyzer(args, server, concurrency, work,
                                        f"{label}-c{concurrency}-{len(passes) + 1}"))
        server.load_ended = time.monotonic()
        if server.crashes():
            raise RuntimeError(f"{server.kind} lost a worker {server.crashes()} time(s) "
                               f"(see {server.log_path})")

    def memory(server, cell):
        # The same settling time for both stacks, alone and idle (chorus gives
        # memory back after a quiet second and pages out every 10 s while
        # quiet; pages the other stack still mapped are not reclaimed).
        settled = max(server.load_ended, getattr(server, "alone_since", 0.0)) + args.settle_s
        time.sleep(max(0.0, settled - time.monotonic()))
        cell["memory"] = server.memory()

    try:
        attempt(a, start)
        attempt(a, measure)
        attempt(a, memory)
        attempt(b, start)
        attempt(b, measure)
        attempt(a, measure)
        if hasattr(a, "stack"):
            a.stop()
        b.alone_since = time.monotonic()
        attempt(b, memory)
    finally:
        for server in servers:
            if hasattr(server, "stack"):
                server.stop()
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
    loops = [subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(workers)]
    try:
        for loop in loops:
            if loop.stdout.readline().strip() != "ready":
                raise RuntimeError(f"bare_loop.py failed for {name} (exit {loop.wait()})")
        windows = []
        for _ in range(3):
            for loop in loops:
                loop.stdin.write(f"{args.window_ms / 1000.0}\n")
                loop.stdin.flush()
            rates = []
            for loop in loops:
                items, seconds = loop.stdout.readline().split()
                rates.append(int(items) / float(seconds))
            windows.append(round(sum(rates), 2))
    finally:
        for loop in loops:
            loop.stdin.close()
            loop.wait(timeout=60)
    return {"throughput_per_s": sorted(windows)[1], "windows": windows, "processes": workers,
            "intra_op_threads": intra_op_threads(workers), "batch": batch}


def merge_passes(passes):
    """One figure per concurrency: the mean of the passes (each kept too)."""
    merged = {key: round(sum(p[key] for p in passes) / len(passes), 3)
              for key in ("throughput_per_s", "p50_ms", "p99_ms")}
    merged["requests"] = sum(p["requests"] or 0 for p in passes)
    merged["stable"] = all(p["stable"] for p in passes)
    if len(passes) > 1:
        merged["passes"] = passes
    return merged


def describe_cell(kind, cell):
    if "error" in cell:
        return f"{kind:<10} error"
    parts = [f"{kind:<10} first answer {cell['first_answer_s']:.2f} s "
             f"(all {cell['all_ready_s']:.2f} s)"]
    for c, load in cell["load"].items():
        parts.append(f"c{c} {load['throughput_per_s']:.1f}/s p50 {load['p50_ms']:.1f} "
                     f"p99 {load['p99_ms']:.1f} ms{'' if load['stable'] else ' (unstable)'}")
    memory = cell["memory"]
    parts.append(f"PSS {memory['pss_mib']:.0f} MiB (unique {memory.get('unique_mib', 0):.0f}) "
                 f"RSS {memory['rss_mib']:.0f} MiB")
    return ", ".join(parts)


def ratios(chorus, torchserve, concurrency, bare=None):
    if "error" in chorus or "error" in torchserve:
        return None
    by = {}
    for c in concurrency:
        a, b = chorus["load"][str(c)], torchserve["load"][str(c)]
        by[str(c)] = {"throughput": round(a["throughput_per_s"] / b["throughput_per_s"], 3),
                      "p99_latency": round(b["p99_ms"] / a["p99_ms"], 3),
                      "p50_latency": round(b["p50_ms"] / a["p50_ms"], 3)}
    top = str(max(concurrency))
    return {"throughput": by[top]["throughput"], "p99_latency": by[top]["p99_latency"],
            "footprint": round(torchserve["memory"]["pss_mib"] / chorus["memory"]["pss_mib"], 3),
            "footprint_unique": (round(torchserve["memory"]["unique_mib"] /
                                       chorus["memory"]["unique_mib"], 3)
                                 if "unique_mib" in chorus["memory"] and
                                 "unique_mib" in torchserve["memory"] else None),
            "rss": round(torchserve["memory"]["rss_mib"] / chorus["memory"]["rss_mib"], 3),
            "first_answer": round(torchserve["first_answer_s"] / chorus["first_answer_s"], 3),
            "all_ready": round(torchserve["all_ready_s"] / chorus["all_ready_s"], 3),
            "throughput_ceiling": (round(bare["throughput_per_s"] /
                                         torchserve["load"][top]["throughput_per_s"], 3)
                                   if bare else None),
            "at_concurrency": int(top), "by_concurrency": by}


# --------------------------------------------------------------------------
# Report

def table(result):
    lines = ["chorus_vs_torchserve (higher is better for chorus; throughput and p99 at "
             f"concurrency {max(result['settings']['concurrency'])})",
             f"{'model':<13} {'N':>2} {'throughput':>10} {'p99_latency':>11} {'footprint':>9} "
             f"{'(unique)':>8} {'rss':>6} {'first_answer':>12} {'ceiling':>7}"]
    for name, model in result["models"].items():
        for n, entry in model["workers"].items():
            r = entry.get("chorus_vs_torchserve")
            if r is None:
                lines.append(f"{name:<13} {n:>2} {'failed':>10}")
                continue
            unique = "n/a" if r["footprint_unique"] is None else f"{r['footprint_unique']:.2f}"
            ceiling = ("n/a" if r.get("throughput_ceiling") is None
                       else f"{r['throughput_ceiling']:.2f}")
            lines.append(f"{name:<13} {n:>2} {r['throughput']:>10.2f} {r['p99_latency']:>11.2f} "
                         f"{r['footprint']:>9.2f} {unique:>8} {r['rss']:>6.2f} "
                         f"{r['first_answer']:>12.2f} {ceiling:>7}")
    lines.append("goals (N = 4):")
    for goal in result["goals"]:
        value = "n/a" if goal["value"] is None else f"{goal['value']:.2f}"
        line = (f"  {goal['model']} {goal['ratio']} >= {goal['at_least']}: {value} "
                f"({'met' if goal['met'] else 'not met'})")
        if "ceiling" in goal:
            line += (f"; ceiling (bare workers over TorchServe) {goal['ceiling']:.2f}, "
                     f"{'reachable' if goal['reachable'] else 'out of reach on this machine'}")
        if "value_unique" in goal:
            line += (f"; on distinct pages {goal['value_unique']:.2f} "
                     f"({'met' if goal['met_unique'] else 'not met'})")
        lines.append(line)
    return "\n".join(lines)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(result["models"])
    top = str(max(result["settings"]["concurrency"]))
    rows = [("throughput (req/s), c" + top, lambda c: c["load"][top]["throughput_per_s"]),
            ("p99 latency (ms), c" + top, lambda c: c["load"][top]["p99_ms"]),
            ("footprint: summed PSS (MiB)", lambda c: c["memory"]["pss_mib"]),
            ("first answer (s)", lambda c: c["first_answer_s"])]
    fig, axes = plt.subplots(len(rows), len(names), figsize=(3.4 * len(names), 2.4 * len(rows)),
                             squeeze=False)
    style = {"chorus": ("tab:blue", "o"), "torchserve": ("tab:orange", "s")}
    for column, name in enumerate(names):
        workers = result["models"][name]["workers"]
        for row, (label, value) in enumerate(rows):
            ax = axes[row][column]
            for kind in SERVERS:
                points = [(int(n), value(w[kind])) for n, w in workers.items()
                          if "error" not in w[kind]]
                if points:
                    ax.plot(*zip(*points), marker=style[kind][1], color=style[kind][0],
                            label=kind)
                unique = [(int(n), w[kind]["memory"]["unique_mib"]) for n, w in workers.items()
                          if "unique_mib" in w[kind].get("memory", {})]
                if row == 2 and unique:
                    ax.plot(*zip(*unique), marker=style[kind][1], color=style[kind][0],
                            linestyle="--", fillstyle="none",
                            label=f"{kind}, distinct pages")
            ax.set_xticks([int(n) for n in workers])
            ax.set_ylim(bottom=0, top=1.15 * max([ax.get_ylim()[1], 1e-9]))
            ax.set_xlim(0.5, max(int(n) for n in workers) + 0.5)
            ax.tick_params(labelsize=7)
            if row == 0:
                ax.set_title(name, fontsize=9)
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            if row == len(rows) - 1:
                ax.set_xlabel("workers / interpreters", fontsize=8)
    handles = {}
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=len(handles),
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------

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


def main():
    args = parse_args()
    if args.prepare:
        return prepare(args.prepare, args.models)
    began = time.monotonic()
    python = sys.executable
    subprocess.run([os.path.join(ROOT, "tools", "install-torchserve.sh"), python], check=True)
    if not args.perf_analyzer:
        args.perf_analyzer = subprocess.run(
            [os.path.join(ROOT, "tools", "install-perf-analyzer.sh"), python], check=True,
            capture_output=True, text=True).stdout.strip()
    if not os.access(os.path.join(args.bin, "chorus-server"), os.X_OK):
        sys.exit(f"peers_bench: no chorus-server in {args.bin} (make build)")

    work = tempfile.mkdtemp(prefix="chorus-peers-")
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    failed = False
    try:
        os.makedirs(os.path.join(work, "logs"))
        log(f"peers: packaging {', '.join(args.models)}")
        subprocess.run([python, os.path.abspath(__file__), "--prepare", work,
                        "--models", ",".join(args.models)], check=True)
        with open(os.path.join(work, "prepared.json")) as f:
            prepared = json.load(f)
        write_inputs(work, prepared)
        args.torchserve_store = torchserve_store(work, prepared, python)
        from importlib import metadata
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
        result = {
            "settings": {
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
                          f"perf_analyzer -i {args.chorus_protocol}",
                "torchserve": "TorchServe's defaults but system metrics off; --log-config "
                              + (args.torchserve_log_config or "TorchServe's own"),
            },
            "versions": {
                "torch": prepared["torch"],
                "torchserve": metadata.version("torchserve"),
                "torch_model_archiver": metadata.version("torch-model-archiver"),
                "java": (re.search(r'version "([^"]+)"', java) or [None, java[:60]])[1],
                "perf_analyzer": args.perf_analyzer,
                "python": platform.python_version(),
            },
            "models": {},
        }
        order = 0
        for name in args.models:
            spec = prepared[name]
            entry = {"description": spec["description"], "input": spec["input"],
                     "weights_mib": round(spec["weights_mib"], 2), "workers": {}}
            result["models"][name] = entry
            for workers in args.workers:
                log(f"peers: {name}, N = {workers}")
                kinds = SERVERS if order % 2 == 0 else tuple(reversed(SERVERS))
                order += 1
                servers = [(ChorusServer if kind == "chorus" else TorchServe)(
                    args, work, name, spec, workers) for kind in kinds]
                cells = run_pair(args, work, servers)
                for kind in kinds:
                    log("  " + describe_cell(kind, cells[kind]))
                    failed |= "error" in cells[kind]
                try:
                    cells["bare"] = bare_throughput(args, work, name, spec, workers)
                    log(f"  bare: {cells['bare']['throughput_per_s']:.1f}/s")
                except Exception as e:  # noqa: BLE001 (recorded; the run goes on)
                    cells["bare"] = {"error": str(e)}
                    log(f"  bare: FAILED: {e}")
                cells["chorus_vs_torchserve"] = ratios(
                    cells["chorus"], cells["torchserve"], args.concurrency,
                    None if "error" in cells["bare"] else cells["bare"])
                entry["workers"][str(workers)] = {k: cells[k] for k in
                                                  ("chorus_vs_torchserve", *SERVERS, "bare")}
        result["goals"] = []
        for model, workers, ratio, at_least in GOALS:
            r = (result["models"].get(model, {}).get("workers", {}).get(str(workers), {})
                 .get("chorus_vs_torchserve"))
            value = r[ratio] if r else None
            goal = {"model": model, "workers": workers, "ratio": ratio, "at_least": at_least,
                    "value": value, "met": value is not None and value >= at_least}
            if ratio == "throughput" and r and r["throughput_ceiling"] is not None:
                # What a server doing nothing but the model's calls would reach.
                goal["ceiling"] = r["throughput_ceiling"]
                goal["reachable"] = r["throughput_ceiling"] >= at_least
            if ratio == "footprint" and r and r["footprint_unique"] is not None:
                # The same goal on the stack's distinct pages (PSS as if alone).
                goal["value_unique"] = r["footprint_unique"]
                goal["met_unique"] = r["footprint_unique"] >= at_least
            result["goals"].append(goal)
        result["seconds"] = round(time.monotonic() - began, 1)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        picture = os.path.splitext(args.out)[0] + ".png"
        plot(result, picture)
        log("")
        log(table(result))
        log(f"peers: {args.out}, {picture} ({result['seconds']:.0f} s)")
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
