"""A model served by chorus-server with two interpreters answers as the Python and torch
it embeds compute it, and the same as every other Python it was served on.

Run by make test (python_versions_pytest) and by every `make test-python` leg, with only
pytest, torch and numpy beside the build: the requests are the Open Inference Protocol's
JSON over HTTP (urllib). The model is a Triton Python-backend repository entry, which
mixes torch (a seeded MLP) with pure Python whose answer would show a change in the
interpreter (string formatting, dict order, integer arithmetic).

Each run records its answer in chorus' cache (`served-answers/<the model's hash>/`, or
CHORUS_SERVED_ANSWERS) as `<python>-torch<version>.json`, and compares it with every answer
another Python recorded there for the same torch: how the Pythons are shown to answer the
same (the legs run one after another, each against those before it)."""

import hashlib
import json
import os
import platform
import re
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
import torch

BIN_DIR = os.environ["CHORUS_BIN_DIR"]

CONFIG = """
name: "versions"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4, 8 ] } ]
output [
  { name: "Y", data_type: TYPE_FP32, dims: [ 4, 3 ] },
  { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] }
]
instance_group [ { count: 2, kind: KIND_CPU } ]
"""

MODEL = '''
import json
import sys

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


def make_mlp():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def python_part(values):
    counts = {}
    for value in values:
        key = f"{value:+.3e}"[:4]
        counts[key] = counts.get(key, 0) + 1
    return json.dumps({"counts": counts, "digits": str(3 ** 200 // 7)[:40]})


class TritonPythonModel:
    def initialize(self, args):
        self.mlp = make_mlp().eval()

    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, "X").as_numpy())
            with torch.no_grad():
                y = self.mlp(x)
            text = python_part(y.flatten().tolist())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", y.numpy()),
                pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=np.object_)),
                ]))
        return responses
'''


def local_answer(x):
    """The model's answer computed here, by the Python and torch that chorus embeds."""
    namespace = {}
    exec(MODEL.replace("import triton_python_backend_utils as pb_utils", ""), namespace)
    with torch.no_grad():
        y = namespace["make_mlp"]().eval()(x)
    return y, namespace["python_part"](y.flatten().tolist())


class Server:
    """chorus-server on the repository, two interpreters, ports the kernel picks."""

    def __init__(self, repository, log_path):
        self.log = open(log_path, "w+")
        self.process = subprocess.Popen(
            [os.path.join(BIN_DIR, "chorus-server"), "--model-repository", str(repository),
             "--interpreters", "2", "--port", "0", "--metrics-port", "0", "--http-port", "0",
             "--host", "127.0.0.1"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.append(self.process.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(180)
        match = re.search(r"http (\d+)", lines[0] if lines else "")
        if not match:
            self.process.kill()
            self.log.seek(0)
            raise RuntimeError(f"chorus-server did not start:\n{self.log.read()}")
        self.url = f"http://127.0.0.1:{match.group(1)}"

    def infer(self, x):
        body = {"inputs": [{"name": "X", "shape": list(x.shape), "datatype": "FP32",
                            "data": x.flatten().tolist()}]}
        request = urllib.request.Request(f"{self.url}/v2/models/versions/infer",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            outputs = {o["name"]: o for o in json.loads(response.read())["outputs"]}
        y = torch.tensor(outputs["Y"]["data"], dtype=torch.float32).reshape(outputs["Y"]["shape"])
        return y, outputs["TEXT"]["data"][0]

    def stop(self):
        self.process.terminate()
        return self.process.wait(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    model = root / "repository" / "versions"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    process = Server(root / "repository", root / "server.log")
    yield process
    assert process.stop() == 0


def test_served_answer_is_the_embedded_pythons_and_torchs(server):
    generator = torch.Generator().manual_seed(5)
    for _ in range(8):  # over both interpreters (two instances)
        x = torch.randn(4, 8, generator=generator)
        served_y, served_text = server.infer(x)
        local_y, local_text = local_answer(x)
        assert torch.equal(served_y, local_y)
        assert served_text == local_text


def test_served_answer_is_the_same_on_every_python(server):
    x = torch.linspace(-2.0, 2.0, 32).reshape(4, 8)
    served_y, served_text = server.infer(x)
    answer = {"python": platform.python_version(), "torch": torch.__version__,
              "y": served_y.flatten().tolist(), "text": served_text}
    model_hash = hashlib.sha256((CONFIG + MODEL).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "chorus"
    folder = Path(os.environ.get("CHORUS_SERVED_ANSWERS", cache / "served-answers" / model_hash))
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / f"{answer['python']}-torch{answer['torch']}.json"
    mine.write_text(json.dumps(answer))
    others = [json.loads(p.read_text()) for p in folder.glob(f"*-torch{torch.__version__}.json")
              if p != mine]
    for other in others:
        assert (other["y"], other["text"]) == (answer["y"], answer["text"]), (
            f"Python {answer['python']} and {other['python']} answer differently")
    print(f"Python {answer['python']}: the same answer as {sorted(o['python'] for o in others)}")
