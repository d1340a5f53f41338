"""The stacks make bench-density compares, each serving a whole fleet:

  chorus      one chorus-server (under its supervisor) with I interpreters;
              requests over KServe v2 HTTP/REST with binary tensor data
  torchserve  one TorchServe with one worker per model (its default shape:
              every model its own Python process), requests to /predictions
  processes   one Python process per model (Triton's Python-backend shape),
              each a small HTTP server taking the raw input bytes

Every stack answers the same request bytes with the same output bytes (raw,
C order), over HTTP/1.1 keep-alive connections, so the one load generator
(load.py) drives all three alike. The models are loaded with stock
torch.package outside chorus (the peers' TorchServe handler, which
model_process.py reuses), one intra-op thread per worker process.
"""

import http.client
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))

from servers import form_body, torchserve_environment, write_torchserve_config  # noqa: E402
from stacks import Stack, free_ports, stack_memory  # noqa: E402
from workloads import archive_for_torchserve  # noqa: E402

DATATYPES = {"float32": "FP32", "int64": "INT64"}


class ChorusFleet:
    def __init__(self, bin_dir, work, repository, interpreters):
        self.kind = f"chorus_{interpreters}"
        self.command = [os.path.join(bin_dir, "chorus-server"), "--model-repository",
                        repository, "--host", "127.0.0.1", "--port", "0", "--http-port", "0",
                        "--metrics-port", "-1", "--interpreters", str(interpreters)]
        self.work = work
        self.log_path = os.path.join(work, "logs", f"{self.kind}.log")

    def start(self):
        self.stack = Stack(self.command, dict(os.environ), self.work, self.log_path,
                           read_stdout=True)
        line = self.stack.process.stdout.readline()
        match = re.search(r"http (\d+)", line)
        if not match:
            raise RuntimeError(f"chorus-server did not start: {line!r} (see {self.log_path})")
        self.port = int(match.group(1))

    def request(self, connections, model, spec, payload):
        header = json.dumps({
            "inputs": [{"name": spec["input"]["name"], "shape": spec["input"]["shape"],
                        "datatype": DATATYPES[spec["input"]["dtype"]],
                        "parameters": {"binary_data_size": len(payload)}}],
            "outputs": [{"name": spec["output"]["name"],
                         "parameters": {"binary_data": True}}]}).encode()
        status, headers, body = connections.post(
            self.port, f"/v2/models/{model}/infer", header + payload,
            {"Inference-Header-Content-Length": str(len(header)),
             "Content-Type": "application/octet-stream"})
        if status != 200:
            raise RuntimeError(f"chorus answered {status}: {body[:200]!r}")
        return body[int(headers["inference-header-content-length"]):]

    def memory(self):
        root = self.stack.process.pid
        return stack_memory(root, lambda pid, name: "supervisor" if pid == root else "serving")

    def stop(self):
        self.stack.stop()


class TorchServeFleet:
    kind = "torchserve"

    def __init__(self, python, work, store, models):
        self.python, self.work, self.store, self.models = python, work, store, models
        self.home = os.path.join(work, "torchserve-home")
        self.log_path = os.path.join(work, "logs", "torchserve.log")

    def start(self):
        ports = free_ports(5)
        self.port = ports[0]
        os.makedirs(self.home, exist_ok=True)
        config = write_torchserve_config(self.home, ports, workers_per_model=1)
        env = torchserve_environment(self.home, threads=1)
        command = [os.path.join(os.path.dirname(self.python), "torchserve"), "--start",
                   "--foreground", "--ncs", "--disable-token-auth", "--model-store", self.store,
                   "--ts-config", config, "--models", *[f"{m}={m}" for m in self.models]]
        self.stack = Stack(command, env, self.home, self.log_path)

    def request(self, connections, model, spec, payload):
        body, content_type = form_body(payload)
        status, _, answer = connections.post(self.port, f"/predictions/{model}", body,
                                             {"Content-Type": content_type})
        if status != 200:
            raise RuntimeError(f"TorchServe answered {status}: {answer[:200]!r}")
        return answer

    def memory(self):
        launcher = self.stack.process.pid
        return stack_memory(launcher, lambda pid, name: "frontend" if name == "java" else "worker",
                            exclude=(launcher,))

    def stop(self):
        self.stack.stop()


class ProcessFleet:
    kind = "processes"

    def __init__(self, python, work, prepared):
        self.python, self.work, self.prepared = python, work, prepared

    def start(self):
        names = list(self.prepared)
        self.ports = dict(zip(names, free_ports(len(names))))
        env = dict(os.environ, CHORUS_PEERS_INTRA_OP_THREADS="1")
        env.pop("PYTHONPATH", None)
        self.stacks = [
            Stack([self.python, os.path.join(HERE, "model_process.py"),
                   self.prepared[name]["archive"], str(self.ports[name])], env, self.work,
                  os.path.join(self.work, "logs", f"process-{name}.log"))
            for name in names]

    def request(self, connections, model, spec, payload):
        status, _, answer = connections.post(self.ports[model], "/", payload,
                                             {"Content-Type": "application/octet-stream"})
        if status != 200:
            raise RuntimeError(f"process of {model} answered {status}: {answer[:200]!r}")
        return answer

    def memory(self):
        processes, pss, rss = [], 0.0, 0.0
        for stack in self.stacks:
            one = stack_memory(stack.process.pid, lambda pid, name: "model process")
            processes += one["processes"]
            pss, rss = pss + one["pss_mib"], rss + one["rss_mib"]
        return {"pss_mib": round(pss, 1), "rss_mib": round(rss, 1), "processes": processes}

    def stop(self):
        for stack in self.stacks:
            stack.stop()


class Connections:
    """One thread's keep-alive HTTP connections, one per port."""

    def __init__(self, timeout_s=60.0):
        self.timeout_s = timeout_s
        self.by_port = {}

    def post(self, port, path, body, headers):
        """(status, lower-cased headers, body); reconnects once on a dropped connection."""
        for attempt in (0, 1):
            connection = self.by_port.get(port)
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", port,
                                                        timeout=self.timeout_s)
                self.by_port[port] = connection
            try:
                connection.request("POST", path, body, headers)
                response = connection.getresponse()
                answer = response.read()
                return (response.status, {k.lower(): v for k, v in response.getheaders()},
                        answer)
            except (http.client.HTTPException, OSError):
                connection.close()
                del self.by_port[port]
                if attempt:
                    raise

    def close(self):
        for connection in self.by_port.values():
            connection.close()
        self.by_port.clear()


def torchserve_store(python, work, prepared):
    """TorchServe's model store holding every model of `prepared` (once)."""
    store = os.path.join(work, "torchserve_store")
    os.makedirs(store, exist_ok=True)
    for name, spec in prepared.items():
        if not os.path.isdir(os.path.join(store, name)):
            archive_for_torchserve(python, store, name, spec["archive"])
    return store
