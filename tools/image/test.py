"""make test-image: runs the chorus image with podman (host network, loopback) on the
demo MLP, and checks that it serves: ready over HTTP, the same answer over REST and gRPC
(tritonclient) as the model computes in this process, as the non-root user, and a clean
stop. Prints the start-to-ready time and writes it, with the image's size, to
BUILD/image.json.

    python tools/image/test.py BUILD [IMAGE]
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import torch
import tritonclient.grpc as triton

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "packaging", "mlp")
NAME = "chorus-test-image"


def podman(*args, **kwargs):
    # This host's podman settings (tools/image/containers.conf) unless the caller has some.
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", os.path.join(ROOT, "tools", "image", "containers.conf"))
    return subprocess.run(["podman", *args], env=env, check=True, text=True,
                          capture_output=True, **kwargs).stdout


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def package_demo(build, models):
    os.makedirs(os.path.join(models, "mlp", "1"))
    subprocess.run([os.path.join(build, "bin", "chorus-package"), "create",
                    os.path.join(models, "mlp", "1", "mlp.pt"), "--module", "model:build",
                    "--example-inputs", "model:example_inputs", "--name", "mlp",
                    "--max-batch-size", "32", "--quiet"], cwd=EXAMPLE, check=True)
    os.chmod(models, 0o755)


def expected_output(x):
    sys.path.insert(0, EXAMPLE)
    import model
    with torch.no_grad():
        return model.build()(torch.from_numpy(x)).numpy()


def wait_ready(http_port, deadline_s=300):
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready",
                                        timeout=1) as answer:
                if answer.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        state = podman("inspect", "--format", "{{.State.Status}}", NAME).strip()
        if state != "running":
            raise RuntimeError(f"the container is {state}:\n{podman('logs', NAME)}")
        time.sleep(0.1)
    raise RuntimeError(f"not ready after {deadline_s} s:\n{podman('logs', NAME)}")


def rest_infer(http_port, x):
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.ravel().tolist()}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/models/mlp/infer",
                                     data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        (output,) = json.load(answer)["outputs"]
    return np.array(output["data"], np.float32).reshape(output["shape"])


def grpc_infer(grpc_port, x):
    client = triton.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    request = triton.InferInput("x", list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    result = client.infer("mlp", [request])
    return result.as_numpy(result.get_response().outputs[0].name)


def main():
    build = os.path.abspath(sys.argv[1])
    image = sys.argv[2] if len(sys.argv) > 2 else "localhost/chorus:latest"
    work = os.path.join(build, "image-test")
    shutil.rmtree(work, ignore_errors=True)
    models = os.path.join(work, "models")
    package_demo(build, models)
    http_port, grpc_port, metrics_port = free_ports(3)
    podman("rm", "-f", NAME)
    started = time.monotonic()
    podman("run", "-d", "--name", NAME, "--network", "host",
           "-v", f"{models}:/mnt/models:ro", image,
           "--model-repository=/mnt/models", "--host=127.0.0.1", f"--http-port={http_port}",
           f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}", "--interpreters=2")
    try:
        wait_ready(metrics_port)
        ready_s = time.monotonic() - started  # from `podman run`
        x = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float32)
        expected = expected_output(x)
        by_rest, by_grpc = rest_infer(http_port, x), grpc_infer(grpc_port, x)
        assert np.abs(by_rest - expected).max() <= 1e-5, (by_rest, expected)
        assert np.abs(by_grpc - by_rest).max() <= 1e-6, (by_grpc, by_rest)
        user = podman("exec", NAME, "id", "-un").strip()
        assert user == "chorus", user
        podman("stop", "--time", "30", NAME)
        code = int(podman("inspect", "--format", "{{.State.ExitCode}}", NAME).strip())
        assert code == 0, podman("logs", NAME)
    except BaseException:
        print(podman("logs", NAME), file=sys.stderr)
        raise
    finally:
        podman("rm", "-f", NAME)
    figures_path = os.path.join(build, "image.json")
    figures = json.load(open(figures_path)) if os.path.exists(figures_path) else {}
    figures["start_to_ready_s"] = round(ready_s, 2)
    with open(figures_path, "w") as out:
        json.dump(figures, out)
    print(f"test-image: {image} served the demo MLP over REST and gRPC as user {user}, "
          f"ready {ready_s:.1f} s after `podman run`; stopped cleanly")


if __name__ == "__main__":
    main()
