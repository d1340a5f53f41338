"""What tests/gpu/serve_gpu.py measures, and the chorus-server processes it measures.

  chorus-server     Server (one serving process, --no-supervisor, on free ports), add_model
                    (packages a model into a repository), concurrent_infer.
  throughput        timed_window (N threads, warm-up, one common window) and Throughput:
                    the gpu_throughput_vs_threads step.
  device memory     MemoryProbe (nvidia-smi per process, else memory.used over idle; PSS
                    on the CPU), weight_copies and footprint: the gpu_weight_copies and
                    gpu_footprint_vs_processes steps.

The plain-Python baselines run as `serve_gpu.py --worker threads|hold` (their code is in
serve_gpu.py, which puts the bench suite's python_runner on the path); serve_gpu.py runs
the steps and writes the JSON.
"""

import concurrent.futures
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import warnings

import numpy as np
import torch

import gpu_models

# The script whose --worker runs the plain-Python baselines.
SERVE_GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_gpu.py")


def on_gpu(device):
    return device.startswith("cuda")


def gpu_index(device):
    """nvidia-smi's index of a torch device name ("cuda" is cuda:0)."""
    return device.partition(":")[2] or "0"


# ---------------------------------------------------------------- chorus-server


def read_line(process, timeout):
    """The next line `process` writes to its stdout pipe; "" at its end or after `timeout`."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline() if ready else ""


def stop_process(process, timeout=60):
    """SIGTERM, then SIGKILL after `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Server:
    """chorus-server serving `repository` in one process (--no-supervisor) on free ports."""

    def __init__(self, bin_dir, repository, interpreters, log_path, timeout=180):
        self.log = open(log_path, "w+")
        command = [os.path.join(bin_dir, "chorus-server"), "--model-repository", repository,
                   "--interpreters", str(interpreters), "--host", "127.0.0.1", "--port", "0",
                   "--http-port", "0", "--metrics-port", "-1", "--no-supervisor"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True)
        line = read_line(self.process, timeout)
        match = re.search(r"port (\d+) \(metrics -?\d+\), http (\d+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"chorus-server did not start: {line!r}\n{self.log_tail()}")
        self.address = f"127.0.0.1:{match.group(1)}"
        self.http = f"http://127.0.0.1:{match.group(2)}"
        self.pid = self.process.pid

    def client(self):
        from chorus.client import Client
        return Client(self.address, max_message_bytes=256 << 20)

    def wait_ready(self, names, timeout=300):
        """Waits until every model in `names` has loaded; raises with the reasons if not."""
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while True:
                index = {m.name: m for m in client.models()}
                pending = [n for n in names if n not in index or index[n].state == "LOADING"]
                if not pending or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        failed = {n: (index[n].state, index[n].reason) if n in index else "absent"
                  for n in names if n not in index or index[n].state != "READY"}
        if failed:
            raise RuntimeError(f"models not ready: {failed}\n{self.log_tail()}")

    def signature(self, model):
        """(input name, output name) of a one-input, one-output model."""
        with self.client() as client:
            metadata = client.metadata(model)
        return metadata.inputs[0].name, metadata.outputs[0].name

    def generate(self, model, prompt, max_tokens):
        """Triton's HTTP generate extension: greedy, the whole text at once."""
        body = {"text_input": prompt, "max_tokens": max_tokens, "temperature": 0}
        request = urllib.request.Request(f"{self.http}/v2/models/{model}/generate",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())["text_output"]

    def log_tail(self, chars=3000):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-chars:]

    def stop(self):
        stop_process(self.process)
        self.log.close()


def add_model(repository, name, model, example, config, **kwargs):
    """Packages `model` as `repository`/name/1/model.pt with its config.json; returns the
    archive's path."""
    from chorus.package import create_package
    version = os.path.join(repository, name, "1")
    os.makedirs(version)
    archive = os.path.join(version, "model.pt")
    create_package(archive, model, example, name=name, progress=False, **kwargs)
    with open(os.path.join(repository, name, "config.json"), "w") as config_file:
        json.dump(config, config_file)
    return archive


def concurrent_infer(server, model, arrays):
    """One request per array, all at once, each on its own channel: outputs in order."""
    input_name, output_name = server.signature(model)

    def call(array):
        with server.client() as client:
            return client.infer(model, {input_name: array})[output_name]

    with concurrent.futures.ThreadPoolExecutor(len(arrays)) as pool:
        return list(pool.map(call, arrays))


# ---------------------------------------------------------------- throughput


def timed_window(functions, warmup_s, measure_s):
    """Each function called in a loop on its own thread: warm-up, then a common window.
    Returns the calls made in the window per second."""
    barrier = threading.Barrier(len(functions) + 1)
    counts, errors, bounds = [0] * len(functions), [], {}

    def body(index, function):
        try:
            warm_until = time.perf_counter() + warmup_s
            function()
            while time.perf_counter() < warm_until:
                function()
            barrier.wait()
            barrier.wait()
            while time.perf_counter() < bounds["end"]:
                function()
                counts[index] += 1
        except Exception as error:  # re-raised by the caller's thread
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=body, args=item) for item in enumerate(functions)]
    for thread in threads:
        thread.start()
    try:
        barrier.wait()
        bounds["end"] = time.perf_counter() + measure_s
        start = time.perf_counter()
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sum(counts) / (time.perf_counter() - start)


def run_json(command, timeout=300):
    """Runs a command that prints one JSON object last; returns it."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class InputsHolder(torch.nn.Module):
    """The inputs bench_suite_runner reads: a TorchScript module's `inputs` attribute."""

    def __init__(self, inputs):
        super().__init__()
        self.inputs = inputs

    def forward(self):
        return self.inputs


class Throughput:
    """ResNet-18 batch 8: chorus (suite runner and server) against N threads, interleaved."""

    def __init__(self, args, sizes, resnet, work):
        self.args, self.sizes, self.archive = args, sizes, resnet.archive
        self.runner = os.path.join(args.bin_dir, "bench_suite_runner")
        self.inputs = os.path.join(work, "resnet18.inputs.pt")
        with warnings.catch_warnings():  # TorchScript's deprecation: what the runner reads
            warnings.simplefilter("ignore", FutureWarning)
            torch.jit.save(torch.jit.script(InputsHolder([resnet.example])), self.inputs)
        self.batch = resnet.example.numpy()

    def window_args(self):
        return ["--warmup-s", str(self.sizes.warmup_s), "--measure-s", str(self.sizes.measure_s)]

    def threads(self):
        command = [sys.executable, SERVE_GPU, "--worker", "threads", "--archive", self.archive,
                   "--device", self.args.device, "--interpreters", str(self.args.interpreters),
                   *self.window_args()]
        return run_json(command)["batches_per_s"]

    def suite_runner(self):
        command = [self.runner, "--model", self.archive, "--inputs", self.inputs,
                   "--workers", str(self.args.interpreters), *self.window_args()]
        return run_json(command)["items_per_s"] / len(self.batch)

    def server(self, server):
        from chorus.client import Client
        input_name, _ = server.signature("resnet18")
        request = Client.make_request("resnet18", {input_name: self.batch})
        clients = [server.client() for _ in range(self.args.interpreters)]
        try:
            return timed_window([lambda c=c: c.infer_request(request) for c in clients],
                                self.sizes.warmup_s, self.sizes.measure_s)
        finally:
            for client in clients:
                client.close()

    def measure(self, server):
        """Rates by path, round after round; a path that fails is dropped (its error kept)."""
        paths = {"threads": self.threads, "server_grpc": lambda: self.server(server)}
        if os.path.exists(self.runner):
            paths["suite_runner"] = self.suite_runner
        rates, errors = {name: [] for name in paths}, {}
        for _ in range(self.sizes.rounds):
            for name in [name for name in paths if name not in errors]:
                try:
                    rates[name].append(paths[name]())
                except Exception as error:  # the other paths go on
                    errors[name] = f"{type(error).__name__}: {error}"
        return rates, errors

    def check(self, server):
        rates, errors = self.measure(server)
        medians = {name: statistics.median(values) for name, values in rates.items() if values}
        method = next((m for m in ("suite_runner", "server_grpc") if m in medians), None)
        if "threads" not in medians or method is None:
            raise RuntimeError(f"no rate to compare: {errors}")
        ratio = medians[method] / medians["threads"]
        grpc = medians.get("server_grpc")
        return {"gpu_throughput_vs_threads": ratio if on_gpu(self.args.device) else None,
                "chorus_batches_per_s": medians[method],
                "threads_batches_per_s": medians["threads"],
                "method": METHODS[method],
                "throughput": {"chorus_vs_threads": ratio, "batch": list(self.batch.shape),
                               "precision": "fp32 (TF32 off)",
                               "server_grpc_batches_per_s": grpc,
                               "server_grpc_vs_threads": grpc and grpc / medians["threads"],
                               "batches_per_s_by_round": rates, "errors": errors,
                               "warmup_s": self.sizes.warmup_s,
                               "measure_s": self.sizes.measure_s}}


METHODS = {
    "suite_runner": "bench_suite_runner: N threads call chorus::Model::Forward in one "
                    "process with N interpreters (no RPC), the CPU suite's chorus cell",
    "server_grpc": "chorus-server over gRPC, N client threads each on its own channel",
}


# ---------------------------------------------------------------- device memory


def compute_apps():
    """{pid: MiB} of the processes nvidia-smi lists on any GPU."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    apps = {}
    for line in out.strip().splitlines():
        pid, used = (field.strip() for field in line.split(","))
        if used.isdigit():
            apps[int(pid)] = apps.get(int(pid), 0) + int(used)
    return apps


def family(pid):
    """`pid` and its descendants (a launcher that does not exec serves in a child)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            return [pid] + [p for child in children.read().split() for p in family(int(child))]
    except OSError:
        return [pid]


def pss_mib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss for process {pid}")


class MemoryProbe:
    """Memory of processes on `device`: nvidia-smi's per process, else the device's
    memory.used over its value when the probe was made; on the CPU, their PSS."""

    def __init__(self, device):
        self.gpu = on_gpu(device)
        self.index = gpu_index(device)
        self.idle = self.device_used() if self.gpu else None
        self.source = "cpu: PSS from /proc/PID/smaps_rollup"

    def device_used(self):
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,"
                              "nounits", "-i", self.index], capture_output=True, text=True,
                             check=True, timeout=60).stdout
        return float(out.strip())

    def mib(self, pids):
        """Summed over `pids` and their descendants."""
        time.sleep(1)  # let the driver's accounting settle
        families = [family(pid) for pid in pids]
        if not self.gpu:
            return sum(pss_mib(p) for members in families for p in members)
        apps = compute_apps()
        if all(any(p in apps for p in members) for members in families):
            self.source = "nvidia-smi --query-compute-apps, per process"
            return float(sum(apps.get(p, 0) for members in families for p in members))
        self.source = "nvidia-smi memory.used over its idle value (processes not listed)"
        return self.device_used() - self.idle


def serve_big_model(args, sizes, work):
    """A server holding a tiny model on the device, then the big MLP loaded beside it:
    its memory at each point."""
    repository, spares = os.path.join(work, "memory-repository"), os.path.join(work, "spares")
    os.makedirs(repository)
    os.makedirs(spares)
    # No batching: concurrent requests spread over the interpreters.
    config = {"device": args.device, "dynamic_batching": False}
    add_model(repository, "tiny", gpu_models.Tiny(), (torch.zeros(1, 4),), config)
    model = gpu_models.big_mlp(sizes.mlp_width, sizes.mlp_depth)
    weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2 ** 20
    archive = add_model(spares, "big", model, (torch.zeros(1, sizes.mlp_width),), config)
    del model
    probe = MemoryProbe(args.device)
    server = Server(args.bin_dir, repository, args.interpreters,
                    os.path.join(work, "memory-server.log"))
    try:
        server.wait_ready(["tiny"])
        baseline = probe.mib([server.pid])
        shutil.copytree(os.path.join(spares, "big"), os.path.join(repository, "big"))
        with server.client() as client:
            client.load("big")
        server.wait_ready(["big"])
        loaded = probe.mib([server.pid])
        x = np.zeros((1, sizes.mlp_width), dtype=np.float32)
        concurrent_infer(server, "big", [x] * (8 * args.interpreters))
        after = probe.mib([server.pid])
    finally:
        server.stop()
    return {"weights_mib": weights_mib, "archive": archive, "baseline_mib": baseline,
            "loaded_mib": loaded, "after_requests_mib": after, "probe": probe.source}


def weight_copies(args, sizes, work, memory):
    figures = serve_big_model(args, sizes, work)
    memory.update(figures)
    ratio = (figures["loaded_mib"] - figures["baseline_mib"]) / figures["weights_mib"]
    return {"gpu_weight_copies": ratio if on_gpu(args.device) else None, "weight_copies": {
        "ratio": ratio, "weights_mib": figures["weights_mib"],
        "server_with_tiny_model_mib": figures["baseline_mib"],
        "server_with_big_model_mib": figures["loaded_mib"],
        "after_requests_ratio": (figures["after_requests_mib"] - figures["baseline_mib"]) /
        figures["weights_mib"], "probe": figures["probe"]}}


def hold_in_processes(args, archive):
    """N plain Python processes, each holding the big MLP on the device after one forward:
    their memory summed, read while all of them are alive."""
    probe = MemoryProbe(args.device)
    command = [sys.executable, SERVE_GPU, "--worker", "hold", "--archive", archive,
               "--device", args.device]
    workers = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(args.interpreters)]
    try:
        for worker in workers:
            if read_line(worker, 300) != "ready\n":
                raise RuntimeError("a holding process did not get ready (its stderr above)")
        return probe.mib([worker.pid for worker in workers]), probe.source
    finally:
        for worker in workers:
            worker.stdin.close()
            stop_process(worker)


def footprint(args, memory):
    if "after_requests_mib" not in memory:
        raise RuntimeError("no chorus figure: the weight-copies step failed")
    processes_mib, source = hold_in_processes(args, memory["archive"])
    ratio = memory["after_requests_mib"] / processes_mib
    return {"gpu_footprint_vs_processes": ratio if on_gpu(args.device) else None, "footprint": {
        "ratio": ratio, "chorus_mib": memory["after_requests_mib"],
        "processes_mib": processes_mib, "processes": args.interpreters, "probe": source}}
