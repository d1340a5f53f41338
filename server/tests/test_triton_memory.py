"""A Python-backend model's weights, read from its folder with torch.load or safetensors, are
held once for all its instances (Triton holds a copy per instance process: server#4975)."""

import textwrap

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from conftest import ServerProcess
from safetensors.torch import save_file

WEIGHT_ELEMENTS = 50_000_000  # 200 MB of float32
INSTANCES = 4

CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "TOTAL" data_type: TYPE_FP64 dims: [ 1 ] } ]
instance_group [ { count: %d kind: KIND_CPU } ]
""" % INSTANCES

# Reads every page of its weights at load (as a model using them would), and answers their sum.
MODEL = """
import os
import numpy as np
import torch
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.weights = {LOAD}
        self.total = float(self.weights.double().sum())

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TOTAL", np.array([self.total]))])
                for _ in requests]
"""

LOADS = {
    "torch_load": 'torch.load(os.path.join(folder, "weights.pt"))["w"]',
    "safetensors": ('__import__("safetensors.torch").torch.load_file('
                    'os.path.join(folder, "weights.safetensors"))["w"]'),
    "none": "torch.zeros(1)",
}


def write_model(repo, name, load, weights):
    version = repo / name / "1"
    version.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG)
    (version / "model.py").write_text(textwrap.dedent(MODEL.replace("{LOAD}", LOADS[load])))
    torch.save({"w": weights}, version / "weights.pt")
    save_file({"w": weights}, str(version / "weights.safetensors"))


def total_of(server, name):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = httpclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.zeros(1, np.float32))
    return float(client.infer(name, [x]).as_numpy("TOTAL")[0])


@pytest.mark.parametrize("load", ["torch_load", "safetensors"])
def test_four_instances_hold_one_copy_of_the_weights(tmp_path, load):
    torch.manual_seed(0)
    weights = torch.randn(WEIGHT_ELEMENTS)
    expected = float(weights.double().sum())
    pss = {}
    for kind in ("none", load):
        repo = tmp_path / kind / "models"
        write_model(repo, "weighted", kind, weights)
        server = ServerProcess(repo)
        try:
            if kind == load:
                assert total_of(server, "weighted") == pytest.approx(expected)
            pss[kind] = server.serving_pss_mib()
        finally:
            assert server.stop() == 0
    added = pss[load] - pss["none"]
    print(f"{load}: {INSTANCES} instances added {added:.0f} MiB of PSS")
    # One copy is 191 MiB; Triton's four stub processes would hold four (763 MiB).
    assert added < 260, f"{INSTANCES} instances added {added:.0f} MiB of PSS"
