"""The two servers of make bench-triton: Triton 2.51 and chorus-server, each serving one
model repository folder as it is, started on the same three ports in turn (one runs at a
time: they map the same libtorch files, and PSS splits shared pages among their mappers).

Both are timed from spawn until /v2/health/ready answers 200 (strict readiness, the
default of both: every model of the repository loaded on every instance), read through
Triton's statistics extension (GET /v2/models/stats, which both serve) and measured as a
tree of processes: Triton's tritonserver and one Python-backend stub per model instance,
chorus' supervisor and serving process.

A third, EchoServer, is the floor under the identity row: bench_grpc_echo
(tests/bench/grpc_echo_server.cc) answers identity's ModelInfer with its inputs from one
worker thread woken per request (the one thread hop any server with a request queue
makes) and describes the model to perf_analyzer from the same config.pbtxt, so that
perf_analyzer drives it exactly as it drives the two servers.
"""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
sys.path.insert(0, os.path.join(HERE, "..", "density"))

from fleet_stacks import ChorusFleet  # noqa: E402
from load import OutOfMemory, available_mib  # noqa: E402
from stacks import Stack, stack_memory, thread_cpu  # noqa: E402

SERVERS = ("chorus", "triton")


def http_get(address, path, timeout_s=10.0):
    """(status, body) of GET http://address/path; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, urllib.error.URLError):
        return 0, b""


class RepositoryServer:
    """A server serving `repository` on `ports` (gRPC, HTTP, metrics)."""

    kind = ""

    def __init__(self, work, repository, ports, label):
        self.work, self.repository = work, repository
        self.grpc_port, self.http_port, self.metrics_port = ports
        self.address = f"127.0.0.1:{self.grpc_port}"
        self.http_address = f"127.0.0.1:{self.http_port}"
        self.port = self.http_port  # what fleet_stacks' KServe v2 requests go to
        self.log_path = os.path.join(work, "logs", f"{self.kind}-{label}.log")

    # KServe v2 HTTP/REST with binary tensor data, as bench-density sends it (load.py).
    request = ChorusFleet.request

    def command(self):
        raise NotImplementedError

    def environment(self):
        return dict(os.environ)

    def start(self, timeout_s, floor_mib=None):
        """Spawns the server and waits until it is ready; returns the seconds that took.
        Raises OutOfMemory when `floor_mib` is given and the machine's available memory
        falls under it first (the server is left running: memory() reads it, stop()
        stops it)."""
        started = time.monotonic()
        self.stack = Stack(self.command(), self.environment(), self.work, self.log_path)
        while True:
            status, _ = http_get(self.http_address, "/v2/health/ready", timeout_s=5.0)
            if status == 200:
                return time.monotonic() - started
            if floor_mib is not None and available_mib() < floor_mib:
                raise OutOfMemory(f"{self.kind}: under {floor_mib} MiB available before "
                                  "every model was ready")
            if not self.stack.alive():
                raise RuntimeError(f"{self.kind} exited at start (see {self.log_path})")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"{self.kind} not ready in {timeout_s:.0f} s "
                                   f"(see {self.log_path})")
            time.sleep(0.05)

    def alive(self):
        return self.stack.alive()

    def metadata(self):
        """GET /v2: the server's name, version and extensions."""
        status, body = http_get(self.http_address, "/v2")
        return json.loads(body) if status == 200 else {}

    def statistics(self):
        """{model: cumulative figures} from GET /v2/models/stats (Triton's statistics
        extension): successful requests and their time, time queued and computing
        (input, infer, output), executions (batches run)."""
        status, body = http_get(self.http_address, "/v2/models/stats")
        if status != 200:
            return {}
        figures = {}
        for model in json.loads(body).get("model_stats", []):
            stats = model.get("inference_stats", {})
            entry = {"executions": int(model.get("execution_count", 0))}
            for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
                entry[f"{key}_count"] = int(stats.get(key, {}).get("count", 0))
                entry[f"{key}_ns"] = int(stats.get(key, {}).get("ns", 0))
            figures[model["name"]] = entry
        return figures

    def memory(self):
        root = self.stack.process.pid
        return stack_memory(root, lambda pid, name: self.role(pid == root, name))

    def role(self, is_root, name):
        raise NotImplementedError

    def cpu_part(self, process, thread):
        """Which part of the server a thread's CPU time counts to: "models" (the threads
        or processes that run the models' code) or "server" (the rest: its gRPC and HTTP
        frontends, scheduling, answering)."""
        return "server"

    def threads_cpu(self):
        """thread_cpu() of the server's processes."""
        return thread_cpu(self.stack.process.pid)

    def stop(self):
        if hasattr(self, "stack"):
            self.stack.stop()


class ChorusServer(RepositoryServer):
    kind = "chorus"

    def __init__(self, bin_dir, work, repository, ports, label, interpreters):
        super().__init__(work, repository, ports, label)
        self.bin_dir, self.interpreters = bin_dir, interpreters

    def command(self):
        return [os.path.join(self.bin_dir, "chorus-server"), "--model-repository",
                self.repository, "--host", "127.0.0.1", "--grpc-port", str(self.grpc_port),
                "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port),
                "--interpreters", str(self.interpreters)]

    def role(self, is_root, name):
        return "supervisor" if is_root else "serving process"

    def cpu_part(self, process, thread):
        # The scheduler's worker threads run execute() (and write its answers).
        return "models" if thread == "chorus-worker" else "server"


class TritonServer(RepositoryServer):
    kind = "triton"

    def __init__(self, tritonserver, python, work, repository, ports, label):
        super().__init__(work, repository, ports, label)
        self.tritonserver, self.python = tritonserver, python
        # The stubs' shared-memory regions (/dev/shm) carry this prefix, so that the
        # ones a killed server leaves behind are ours to remove.
        self.shm_prefix = f"{self.shm_prefix_of_this_run()}{label}_"

    @staticmethod
    def shm_prefix_of_this_run():
        return f"chorus_bench_triton_{os.getpid()}_"

    def command(self):
        backends = os.path.join(os.path.dirname(os.path.dirname(self.tritonserver)),
                                "backends")
        return [self.tritonserver, "--model-repository", self.repository,
                "--backend-directory", backends,
                "--http-address", "127.0.0.1", "--http-port", str(self.http_port),
                "--grpc-address", "127.0.0.1", "--grpc-port", str(self.grpc_port),
                "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
                "--exit-timeout-secs", "5",
                f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}"]

    def environment(self):
        # The stubs embed Python and take their packages from the first python3 on
        # PATH: `python`, tools/install-triton.sh's venv for them, which adds chorus'
        # venv (its torch and torchvision) under numpy 1.26 (with chorus' numpy 2,
        # Triton 2.51's stub sends outputs without their data).
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env["PATH"] = os.path.dirname(self.python) + os.pathsep + env.get("PATH", "")
        return env

    def role(self, is_root, name):
        return "tritonserver" if is_root else "worker"  # a Python-backend stub

    def cpu_part(self, process, thread):
        # The Python backend's stub processes (triton_python_backend_stub, 15 letters).
        return "models" if process.startswith("triton_python") else "server"

    def stop(self):
        super().stop()
        for entry in os.listdir("/dev/shm"):
            if entry.startswith(self.shm_prefix):
                try:
                    os.unlink(os.path.join("/dev/shm", entry))
                except OSError:
                    pass


class EchoServer(RepositoryServer):
    kind = "echo"

    def __init__(self, bin_dir, work, repository, ports, label, model="identity"):
        super().__init__(work, repository, ports, label)
        self.bin_dir, self.model = bin_dir, model

    def command(self):
        return [os.path.join(self.bin_dir, "bench_grpc_echo"), "--handoff", "sleep",
                "--model-config", os.path.join(self.repository, self.model, "config.pbtxt"),
                "--port", str(self.grpc_port)]

    def start(self, timeout_s, floor_mib=None):
        """Spawns the echo and waits until its gRPC port accepts connections."""
        started = time.monotonic()
        self.stack = Stack(self.command(), self.environment(), self.work, self.log_path)
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1.0).close()
                return time.monotonic() - started
            except OSError:
                pass
            if not self.stack.alive():
                raise RuntimeError(f"echo exited at start (see {self.log_path})")
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"echo not listening in {timeout_s:.0f} s")
            time.sleep(0.05)

    def statistics(self):
        return {}  # it keeps none

    def role(self, is_root, name):
        return "echo"
