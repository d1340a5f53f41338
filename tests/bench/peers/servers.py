"""The two servers compared: chorus-server and TorchServe, each started from
nothing, timed until it answers, driven by perf_analyzer and measured."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from stacks import Stack, free_ports, intra_op_threads, stack_memory

SERVERS = ("chorus", "torchserve")


def answers_match(raw, expected_path):
    import numpy as np
    expected = np.fromfile(expected_path, dtype=np.float32)
    got = np.frombuffer(raw, dtype=np.float32)
    scale = max(1e-6, float(np.abs(expected).max()))
    return got.shape == expected.shape and bool(np.allclose(got, expected, rtol=1e-3,
                                                            atol=1e-4 * scale))


def mar_interpreters(workers):
    """chorus' interpreters for N workers of a .mar's handler: one per worker up to
    one per core. Beyond the cores an interpreter adds memory (its own import of
    torch, about 85 MiB) and no parallelism; further workers share them, each still
    one handler object whose batches run one at a time, as a TorchServe worker's."""
    return max(1, min(workers, os.cpu_count() or 1))


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
        if spec.get("mar"):
            # The archive as it is, from its store, through TorchServe's inference API:
            # N workers of its handler (TorchServe's default_workers_per_model) over
            # one interpreter each, up to one per core (mar_interpreters).
            self.command = [server, "--model-store", spec["store"], "--models",
                            f"{name}={name}.mar", "--torchserve-inference-port", "0",
                            "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
                            "--interpreters", str(mar_interpreters(workers)),
                            "--torchserve-default-workers", str(workers)]
        if chorus_has_http(server):
            # Served as by default, on a free port (the default, 8000, may be taken).
            self.command += ["--http-port", "0"]
        self.log_path = os.path.join(work, "logs", f"chorus-{name}-{workers}.log")
        self.work = work

    def start(self):
        """Starts the server; returns (first_answer_s, all_ready_s)."""
        if self.spec.get("mar"):
            return self._start_mar()
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

    def _start_mar(self):
        """start() for a .mar served through TorchServe's inference API: the first
        answer to the request's bytes, as TorchServe's clients send them."""
        started = time.monotonic()
        self.stack = Stack(self.command, dict(os.environ), self.work, self.log_path,
                           read_stdout=True)
        line = self.stack.process.stdout.readline()
        match = re.search(r"torchserve inference (\d+)", line)
        if not match:
            raise RuntimeError(f"chorus-server did not start: {line!r} (see {self.log_path})")
        self.torchserve_port = int(match.group(1))
        with open(self.spec["input_bin"], "rb") as f:
            payload = f.read()
        url = f"http://127.0.0.1:{self.torchserve_port}/predictions/{self.name}"
        deadline = started + self.args.start_timeout_s
        while True:
            try:
                self.answer = post_form(url, payload)
                first = time.monotonic() - started
                return first, first
            except (OSError, urllib.error.URLError, ConnectionError) as e:
                if time.monotonic() > deadline or not self.stack.alive():
                    raise RuntimeError(f"chorus-server gave no answer: {e} "
                                       f"(see {self.log_path})") from None
                time.sleep(0.02)

    def perf_args(self):
        if self.spec.get("mar"):
            return ["-m", self.name, "--service-kind", "torchserve", "-i", "http",
                    "-u", f"127.0.0.1:{self.torchserve_port}", "--input-data",
                    os.path.join(self.work, "inputs", f"{self.name}.torchserve.json")]
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
        """Starts TorchServe; returns (first_answer_s, all_ready_s)."""
        config = self._write_config(free_ports(5))
        python = sys.executable
        mar = self.spec.get("mar")
        command = [os.path.join(os.path.dirname(python), "torchserve"), "--start",
                   "--foreground", "--ncs", "--disable-token-auth",
                   "--model-store", self.spec["store"] if mar else self.args.torchserve_store,
                   "--models", f"{self.name}={self.name}{'.mar' if mar else ''}",
                   "--ts-config", config]
        if self.args.torchserve_log_config:
            command += ["--log-config", self.args.torchserve_log_config]
        started = time.monotonic()
        self.stack = Stack(command, self._environment(), self.home, self.log_path)
        deadline = started + self.args.start_timeout_s
        raw, first = self._first_answer(started, deadline)
        if self.spec.get("mar"):
            self.answer = raw  # compared with chorus' by run_cell
        elif not answers_match(raw, os.path.join(self.work, "inputs",
                                                 f"{self.name}.expected.bin")):
            raise RuntimeError(f"TorchServe's answer for {self.name} differs from the model's")
        # TorchServe answers as soon as one worker is up; the others follow.
        self._wait_all_ready(deadline)
        return first, time.monotonic() - started

    def _write_config(self, ports):
        """config.properties on the given 5 ports; returns its path."""
        self.port, self.management_port = ports[0], ports[1]
        return write_torchserve_config(self.home, ports, self.workers)

    def _environment(self):
        return torchserve_environment(self.home, intra_op_threads(self.workers))

    def _first_answer(self, started, deadline):
        """(answer bytes, seconds from `started`) of the first request answered."""
        with open(self.spec["input_bin"], "rb") as f:
            payload = f.read()
        url = f"http://127.0.0.1:{self.port}/predictions/{self.name}"
        while True:
            try:
                raw = post_form(url, payload)
                return raw, time.monotonic() - started
            except (OSError, urllib.error.URLError, ConnectionError) as e:
                if time.monotonic() > deadline or not self.stack.alive():
                    raise RuntimeError(f"TorchServe gave no answer: {e} (see {self.log_path} "
                                       f"and {self.home}/logs)") from None
                time.sleep(0.02)

    def _wait_all_ready(self, deadline):
        """Until the management API reports all the workers READY."""
        status = f"http://127.0.0.1:{self.management_port}/models/{self.name}"
        while True:
            try:
                with urllib.request.urlopen(status, timeout=10) as response:
                    (description,) = json.loads(response.read())
                ready = sum(w.get("status") == "READY" for w in description.get("workers", []))
                if ready >= self.workers:
                    return
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


def write_torchserve_config(home, ports, workers_per_model):
    """TorchServe's config.properties in `home` on the given 5 ports (inference,
    management, metrics, gRPC inference and management), with its tmp and logs
    folders; returns the config's path."""
    config = os.path.join(home, "config.properties")
    with open(config, "w") as f:
        f.write("\n".join([
            f"inference_address=http://127.0.0.1:{ports[0]}",
            f"management_address=http://127.0.0.1:{ports[1]}",
            f"metrics_address=http://127.0.0.1:{ports[2]}",
            f"grpc_inference_port={ports[3]}",
            f"grpc_management_port={ports[4]}",
            "grpc_inference_address=127.0.0.1",
            "grpc_management_address=127.0.0.1",
            f"default_workers_per_model={workers_per_model}",
            # A periodic collector process (a fresh Python every minute) that
            # would land in random measurement windows; chorus runs none.
            "disable_system_metrics=true",
            "",
        ]))
    for sub in ("tmp", "logs"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    return config


def torchserve_environment(home, threads):
    """The environment TorchServe runs in from `home`, its workers with `threads`
    intra-op threads (torchserve_handler.py reads it)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the workers see TorchServe and the venv, not chorus
    tmp = os.path.join(home, "tmp")
    env.update({
        "TEMP": tmp,  # the frontend's java.io.tmpdir: worker sockets
        "TMPDIR": tmp,  # the launcher's pid file
        "LOG_LOCATION": os.path.join(home, "logs"),
        "METRICS_LOCATION": os.path.join(home, "logs"),
        "CHORUS_PEERS_INTRA_OP_THREADS": str(threads),
    })
    return env


def form_body(payload):
    """(body, content type) of `payload` as perf_analyzer's TorchServe client
    sends it: multipart form data, one part named "data" without file name or
    content type."""
    boundary = "chorus-peers-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"data\"\r\n\r\n"
            .encode() + payload + f"\r\n--{boundary}--\r\n".encode())
    return body, f"multipart/form-data; boundary={boundary}"


def post_form(url, payload):
    """POSTs `payload` as form_body makes it."""
    body, content_type = form_body(payload)
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read()


def chorus_has_http(server):
    """Whether this chorus-server serves HTTP/REST (--http-port)."""
    done = subprocess.run([server, "--help"], capture_output=True, text=True)
    return "--http-port" in done.stdout
