"""Fixtures: packaged models, model repositories and real chorus-server processes."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
BIN_DIR = os.environ["CHORUS_BIN_DIR"]

import servable_models  # noqa: E402
from chorus.client import Client  # noqa: E402
from chorus.package import create_package  # noqa: E402


def package(path, model, example, name, **kwargs):
    create_package(str(path), model, (example,), name=name, progress=False, **kwargs)


# How long a server may take to print its ports: a server that cannot start (a
# supervisor restarting a serving process that fails) fails the test, not hangs it.
START_TIMEOUT_S = 180


def first_line(process, timeout_s):
    """The first line `process` prints on stdout, or "" if none comes within `timeout_s`."""
    lines = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return lines[0] if lines else ""


class ServerProcess:
    """A chorus-server subprocess on a free port; stopped with SIGTERM."""

    def __init__(self, repository, *args, interpreters=2, host="127.0.0.1", prefix=()):
        """`host`: the address it listens on; `prefix`: what runs it (e.g. `ip netns exec NS`)."""
        self.log = open(os.path.join(str(repository), "..", f"server-{time.time_ns()}.log"), "w+")
        command = [*prefix, os.path.join(BIN_DIR, "chorus-server"),
                   "--model-repository", str(repository),
                   "--port", "0", "--metrics-port", "0", "--http-port", "0",
                   "--interpreters", str(interpreters),
                   "--host", host, *args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = first_line(self.process, START_TIMEOUT_S)
        match = re.search(r"port (\d+) \(metrics (-?\d+)\), http (-?\d+)", line)
        if not match:
            self.process.kill()
            self.log.seek(0)
            raise RuntimeError(f"chorus-server did not start: {line!r}\n{self.log.read()}")
        self.port, self.metrics_port, self.http_port = (int(g) for g in match.groups())
        torchserve = re.search(r"torchserve inference (\d+)", line)
        self.torchserve_port = int(torchserve.group(1)) if torchserve else -1
        management = re.search(r"torchserve management (\d+)", line)
        self.torchserve_management_port = int(management.group(1)) if management else -1
        metrics = re.search(r"torchserve metrics (\d+)", line)
        self.torchserve_metrics_port = int(metrics.group(1)) if metrics else -1
        self.host = host
        self.address = f"{host}:{self.port}"

    def client(self, **kwargs):
        return Client(self.address, **kwargs)

    def metrics(self):
        import urllib.request
        with urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics") as response:
            return response.read().decode()

    def serving_pid(self):
        """The supervised serving process (the supervisor's one child)."""
        pid = self.process.pid
        (child,) = [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]
        return child

    def serving_pss_mib(self):
        """The serving process's PSS (/proc's smaps_rollup), in MiB."""
        for line in open(f"/proc/{self.serving_pid()}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no Pss in smaps_rollup")

    def serving_memory_mib(self, field):
        """A memory figure of the serving process from /proc ("VmRSS", "VmHWM"), in MiB."""
        status = open(f"/proc/{self.serving_pid()}/status").read()
        return int(status.split(f"{field}:")[1].split()[0]) / 1024

    def kill_serving(self, sig):
        """Sends `sig` to the serving process and waits until it is gone (reaped by the
        supervisor, which then restarts it)."""
        pid = self.serving_pid()
        os.kill(pid, sig)
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{pid}"):
            assert time.monotonic() < deadline, f"serving process {pid} did not die of {sig}"
            time.sleep(0.05)

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self, timeout=60):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


@pytest.fixture(scope="session")
def repository(tmp_path_factory):
    """A repository with the models every server test uses, and spares to load later."""
    root = tmp_path_factory.mktemp("models")
    repo = root / "repository"
    spares = root / "spares"
    for directory in (repo, spares):
        directory.mkdir()

    def add(where, name, model, example, config=None, **kwargs):
        (where / name / "1").mkdir(parents=True)
        package(where / name / "1" / "model.pt", model, example, name, **kwargs)
        if config:
            (where / name / "config.json").write_text(config)

    add(repo, "mlp", servable_models.TwoLayer(), torch.randn(2, 4), max_batch_size=64,
        config='{"max_queue_delay_us": 20000}')
    add(repo, "raiser", servable_models.Raiser(), torch.zeros(1, 4), batchable=False)
    add(repo, "hanger", servable_models.Hanger(), torch.zeros(1, 4), batchable=False)
    add(repo, "sleeper", servable_models.Sleeper(0.05), torch.zeros(1, 4), batchable=False)
    add(repo, "identity", servable_models.Identity(), torch.zeros(1, 4), max_batch_size=32,
        config='{"dynamic_batching": false}')
    add(spares, "scale", servable_models.Scale(3.0), torch.zeros(1, 4), batchable=False)
    add(spares, "slow", servable_models.Sleeper(0.5), torch.zeros(1, 4), batchable=False)
    return repo, spares


@pytest.fixture(scope="module")
def server(repository):
    process = ServerProcess(repository[0])
    yield process
    assert process.stop() == 0


def wait_until(condition, timeout=120, why=lambda: "timed out"):
    """Polls `condition` until it holds; fails with why() after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, why()
        time.sleep(0.05)


class ThreadGroup:
    """Threads started together (`with`) and stopped together: each watches `stop`."""

    def __init__(self):
        self.stop = threading.Event()
        self.threads = []

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()


def copy_model(spares, repo, name):
    shutil.copytree(spares / name, repo / name)


def metric(text, name):
    """The value of an unlabelled Prometheus metric, or of the first series of `name`."""
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def rpc_code(callable_):
    """The grpc.StatusCode a call fails with (None if it succeeds)."""
    from chorus.client import ClientError
    try:
        callable_()
    except ClientError as e:
        return e.code
    except grpc.RpcError as e:
        return e.code()
    return None
