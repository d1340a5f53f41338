"""A Triton model repository's config.pbtxt, read as Triton reads it, for every kind of model
chorus serves: Python-backend model.py, TorchScript (platform pytorch_libtorch), ensembles
and chorus' own packages; what chorus cannot honour fails the load naming the field."""

import textwrap
import urllib.request

import numpy as np
import pytest
import servable_models
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import ServerProcess, package
from triton_models import ADD_SUB

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [{ kind: KIND_CPU }]
"""


# Triton 2.51's answer to GET /v2/models/add_sub/config for the config above, as it prints
# it (its JSON form: every field, defaults too, 64-bit integers as numbers).
ADD_SUB_NORMALIZED = (
    '{"name":"add_sub","platform":"","backend":"python","runtime":"","version_policy":'
    '{"latest":{"num_versions":1}},"max_batch_size":0,"input":[{"name":"INPUT0","data_type":'
    '"TYPE_FP32","format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch"'
    ':false,"optional":false,"is_non_linear_format_io":false},{"name":"INPUT1","data_type":'
    '"TYPE_FP32","format":"FORMAT_NONE","dims":[4],"is_shape_tensor":false,"allow_ragged_batch"'
    ':false,"optional":false,"is_non_linear_format_io":false}],"output":[{"name":"OUTPUT0",'
    '"data_type":"TYPE_FP32","dims":[4],"label_filename":"","is_shape_tensor":false,'
    '"is_non_linear_format_io":false},{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[4],'
    '"label_filename":"","is_shape_tensor":false,"is_non_linear_format_io":false}],'
    '"batch_input":[],"batch_output":[],"optimization":{"priority":"PRIORITY_DEFAULT",'
    '"input_pinned_memory":{"enable":true},"output_pinned_memory":{"enable":true},'
    '"gather_kernel_buffer_threshold":0,"eager_batching":false},"instance_group":[{"name":'
    '"add_sub_0","kind":"KIND_CPU","count":1,"gpus":[],"secondary_devices":[],"profile":[],'
    '"passive":false,"host_policy":""}],"default_model_filename":"model.py",'
    '"cc_model_filenames":{},"metric_tags":{},"parameters":{},"model_warmup":[]}')

TORCHSCRIPT_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { }
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

ENSEMBLE_CONFIG = """
platform: "ensemble"
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "add_sub" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } } ] }
"""


NAMED_CONFIG = """
platform: "pytorch_libtorch"
input [ { name: "b" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "a" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "difference" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


class Difference(torch.nn.Module):
    """Named: Triton's PyTorch backend matches inputs to forward()'s arguments by name."""

    def forward(self, a, b):
        return a - b


class SubAdd(torch.nn.Module):
    """Positional: forward(INPUT__0, INPUT__1) -> (OUTPUT__0, OUTPUT__1)."""

    def forward(self, a, b):
        return a - b, a + b


def write(repo, name, config=None, files=None):
    (repo / name / "1").mkdir(parents=True)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    for path, text in (files or {}).items():
        (repo / name / path).write_text(textwrap.dedent(text))


@pytest.fixture(scope="module")
def triton_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("triton") / "models"
    write(repo, "add_sub", ADD_SUB_CONFIG, {"1/model.py": ADD_SUB})
    write(repo, "sub_add", TORCHSCRIPT_CONFIG)
    torch.jit.script(SubAdd()).save(str(repo / "sub_add" / "1" / "model.pt"))
    write(repo, "named", NAMED_CONFIG)
    torch.jit.script(Difference()).save(str(repo / "named" / "1" / "model.pt"))
    write(repo, "pipeline", ENSEMBLE_CONFIG)
    write(repo, "packaged", 'backend: "chorus"\nmax_batch_size: 32\n')
    package(repo / "packaged" / "1" / "model.pt", servable_models.Identity(), torch.zeros(1, 4),
            "packaged", max_batch_size=32)
    write(repo, "inferred", None, {"1/model.py": ADD_SUB.replace(
        "class TritonPythonModel:", textwrap.dedent("""
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                for name in ("INPUT0", "INPUT1"):
                    config.add_input({"name": name, "data_type": "TYPE_FP32", "dims": [4]})
                for name in ("OUTPUT0", "OUTPUT1"):
                    config.add_output({"name": name, "data_type": "TYPE_FP32", "dims": [4]})
                return config
        """).strip())})
    write(repo, "both", ADD_SUB_CONFIG.replace("add_sub", "both"), {"1/model.py": ADD_SUB})
    (repo / "both" / "config.json").write_text("{}")
    write(repo, "limited", ADD_SUB_CONFIG.replace("add_sub", "limited").replace(
        "{ kind: KIND_CPU }", "{ kind: KIND_CPU rate_limiter { priority: 1 } }"),
        {"1/model.py": ADD_SUB})
    write(repo, "typo", 'backend: "python"\nmax_batch_sise: 4\n', {"1/model.py": ADD_SUB})
    write(repo, "onnx", 'backend: "onnxruntime"\n')
    return repo


@pytest.fixture(scope="module")
def server(triton_repo):
    process = ServerProcess(triton_repo, "--strict-readiness", "false")
    yield process
    assert process.stop() == 0


def http(server):
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def infer(client, model, inputs, outputs=None):
    tensors = []
    for name, value in inputs.items():
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return client.infer(model, tensors)


def test_python_model_config_is_answered_as_triton_normalizes_it(server):
    client = http(server)
    assert client.get_model_metadata("add_sub")["platform"] == "python"
    url = f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/config"
    with urllib.request.urlopen(url) as response:
        assert response.read().decode() == ADD_SUB_NORMALIZED
    grpc_config = grpcclient.InferenceServerClient(server.address).get_model_config("add_sub")
    assert grpc_config.config.instance_group[0].name == "add_sub_0"
    assert grpc_config.config.default_model_filename == "model.py"


def test_torchscript_tensors_take_their_positions_from_their_names(server):
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 4), np.float32), rng.random((3, 4), np.float32)
    result = infer(http(server), "sub_add", {"INPUT__0": a, "INPUT__1": b})
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), a - b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), a + b, rtol=1e-6)
    config = http(server).get_model_config("sub_add")
    assert config["platform"] == "pytorch_libtorch" and config["max_batch_size"] == 8
    assert config["dynamic_batching"]["preferred_batch_size"] == [8]


def test_torchscript_inputs_named_after_forwards_arguments_go_there(server):
    rng = np.random.default_rng(3)
    a, b = rng.random(4, np.float32), rng.random(4, np.float32)
    result = infer(http(server), "named", {"a": a, "b": b})
    np.testing.assert_allclose(result.as_numpy("difference"), a - b, rtol=1e-6)


def test_ensemble_and_chorus_package_from_config_pbtxt(server):
    rng = np.random.default_rng(1)
    a, b = rng.random(4, np.float32), rng.random(4, np.float32)
    np.testing.assert_allclose(
        infer(http(server), "pipeline", {"A": a, "B": b}).as_numpy("SUM"), a + b, rtol=1e-6)
    x = rng.random((2, 4), np.float32)
    result = infer(http(server), "packaged", {"x": x})
    np.testing.assert_allclose(result.as_numpy(result.get_response()["outputs"][0]["name"]), x)


def test_a_folder_with_model_py_and_no_config_is_a_python_model(server):
    rng = np.random.default_rng(2)
    a, b = rng.random(4, np.float32), rng.random(4, np.float32)
    result = infer(http(server), "inferred", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    config = http(server).get_model_config("inferred")
    assert config["backend"] == "python" and [i["name"] for i in config["input"]] == [
        "INPUT0", "INPUT1"]


def reasons(server):
    index = http(server).get_model_repository_index()
    return {entry["name"]: entry.get("reason", "") for entry in index}


def test_what_chorus_cannot_honour_fails_the_load_naming_it(server):
    reason = reasons(server)
    assert "config.json and config.pbtxt" in reason["both"]
    assert "instance_group[0].rate_limiter" in reason["limited"]
    assert "config.pbtxt:2:" in reason["typo"] and "max_batch_sise" in reason["typo"]
    assert 'backend: "onnxruntime" is not served by chorus' in reason["onnx"]
    for name in ("add_sub", "sub_add", "named", "pipeline", "packaged", "inferred"):
        assert reason[name] == "", f"{name}: {reason[name]}"
