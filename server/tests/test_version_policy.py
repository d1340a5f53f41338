"""Triton's version policies (config.pbtxt's version_policy) served as Triton serves them:
several versions of a model ready at once, a request without a version answered by the
highest one loaded, the others refused with Triton's texts, each loaded version in the
repository index and in the model's metadata; reloads and polling follow the policy."""

import json
import shutil
import textwrap
import time
import urllib.request

import numpy as np
import pytest
import servable_models
import torch

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import ServerProcess, package
from tritonclient.utils import InferenceServerException

# Model -> (its version folders, its version_policy, the versions that serve).
POLICIES = {
    "vp_all": ([1, 2], "all { }", [1, 2]),
    "vp_latest2": ([1, 2, 3], "latest { num_versions: 2 }", [2, 3]),
    "vp_spec": ([1, 2], "specific { versions: [ 1 ] }", [1]),
    "vp_default": ([1, 2], None, [2]),
}


def add_versions(repo, name, versions, policy):
    """Versions of `name` that answer x * version, with `policy` in its config.pbtxt."""
    for version in versions:
        (repo / name / str(version)).mkdir(parents=True)
        package(repo / name / str(version) / "model.pt", servable_models.Scale(float(version)),
                torch.zeros(1, 4), name, batchable=False)
    policy_line = f"version_policy: {{ {policy} }}" if policy else ""
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "chorus"\n{policy_line}\n')


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions") / "repository"
    for name, (versions, policy, _) in POLICIES.items():
        add_versions(root, name, versions, policy)
    # An ensemble whose step names version 1 of vp_all (not the highest).
    (root / "pinned").mkdir()
    (root / "pinned" / "config.pbtxt").write_text(textwrap.dedent("""
        platform: "ensemble"
        input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
        ensemble_scheduling { step [ {
          model_name: "vp_all" model_version: 1
          input_map { key: "x" value: "IN" } output_map { key: "output" value: "OUT" } } ] }
        """))
    return root


@pytest.fixture(scope="module")
def server(repo):
    process = ServerProcess(repo, interpreters=1)
    yield process
    assert process.stop() == 0


def answer(client, module, name, version=""):
    tensor = module.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    return client.infer(name, [tensor], model_version=version).as_numpy("output")[0, 0]


def index_of(client):
    return {(m.name, m.version): (m.state, m.reason)
            for m in client.get_model_repository_index().models}


def test_each_policy_serves_the_versions_it_names(server):
    grpc_client = triton_grpc.InferenceServerClient(server.address)
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    index = index_of(grpc_client)
    for name, (versions, _, ready) in POLICIES.items():
        for module, client in ((triton_grpc, grpc_client), (triton_http, http_client)):
            assert answer(client, module, name) == max(ready), name  # the highest loaded
            for version in versions:
                assert client.is_model_ready(name, str(version)) == (version in ready)
                if version in ready:
                    assert answer(client, module, name, str(version)) == version
                    continue
                with pytest.raises(InferenceServerException) as refused:
                    answer(client, module, name, str(version))
                assert refused.value.message() == \
                    f"Request for unknown model: '{name}' version {version} is not found"
                assert refused.value.status() in ("StatusCode.NOT_FOUND", "404")
        # Only the versions loaded are listed (none other was tried).
        assert sorted(int(v) for (n, v) in index if n == name) == ready
        assert all(index[(name, str(v))] == ("READY", "") for v in ready)
        assert grpc_client.get_model_metadata(name).versions == [str(v) for v in ready]
        assert http_client.get_model_metadata(name)["versions"] == [str(v) for v in ready]
        assert grpc_client.get_model_metadata(name, "1" if 1 in ready else "").versions[-1] == \
            str(1 if 1 in ready else max(ready))
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}/v2/repository/index",
                                     data=json.dumps({"ready": True}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        ready_only = {(m["name"], m["version"]) for m in json.loads(response.read())}
    assert ("vp_latest2", "3") in ready_only and ("vp_latest2", "1") not in ready_only
    grpc_client.close()
    http_client.close()


def test_an_ensemble_step_can_name_a_version_that_is_not_the_highest(server):
    client = triton_grpc.InferenceServerClient(server.address)
    tensor = triton_grpc.InferInput("IN", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), 3.0, np.float32))
    assert client.infer("pinned", [tensor]).as_numpy("OUT").tolist() == [[3.0] * 4]  # v1: x * 1
    client.close()


def test_a_reload_with_another_policy_unloads_the_versions_it_no_longer_names(server):
    client = triton_grpc.InferenceServerClient(server.address)
    only_2 = {"backend": "chorus", "version_policy": {"specific": {"versions": [2]}}}
    client.load_model("vp_all", config=json.dumps(only_2))
    assert client.is_model_ready("vp_all", "2") and not client.is_model_ready("vp_all", "1")
    index = index_of(client)
    assert index[("vp_all", "1")] == ("UNAVAILABLE", "unloaded")
    assert index[("vp_all", "2")] == ("READY", "")
    with pytest.raises(InferenceServerException) as refused:
        answer(client, triton_grpc, "vp_all", "1")
    assert refused.value.message().startswith(
        "Request for unknown model: 'vp_all' version 1 is not at ready state")
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    client.load_model("vp_all")  # the folder's policy again: both
    assert client.is_model_ready("vp_all", "1") and client.is_model_ready("vp_all", "2")
    client.close()


def test_an_unloaded_model_has_no_available_versions(server):
    client = triton_grpc.InferenceServerClient(server.address)
    client.unload_model("vp_spec")
    with pytest.raises(InferenceServerException) as refused:
        answer(client, triton_grpc, "vp_spec")
    assert refused.value.message() == \
        "Request for unknown model: 'vp_spec' has no available versions"
    assert refused.value.status() == "StatusCode.NOT_FOUND"
    assert index_of(client)[("vp_spec", "1")] == ("UNAVAILABLE", "unloaded")
    client.load_model("vp_spec")
    assert answer(client, triton_grpc, "vp_spec") == 1
    client.close()


def test_polling_follows_a_new_version_under_the_policy(tmp_path, repo):
    polled = tmp_path / "repository"
    polled.mkdir()
    shutil.copytree(repo / "vp_latest2", polled / "vp_latest2")
    server = ServerProcess(polled, "--model-control-mode", "poll", "--repository-poll-secs", "1",
                           interpreters=1)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        assert client.get_model_metadata("vp_latest2").versions == ["2", "3"]
        staging = tmp_path / "staging"
        add_versions(staging, "vp_latest2", [4], None)
        (staging / "vp_latest2" / "4").rename(polled / "vp_latest2" / "4")  # whole, at once
        deadline = time.monotonic() + 60
        while client.get_model_metadata("vp_latest2").versions != ["3", "4"]:
            assert time.monotonic() < deadline, client.get_model_metadata("vp_latest2")
            time.sleep(0.2)
        assert answer(client, triton_grpc, "vp_latest2") == 4
        assert not client.is_model_ready("vp_latest2", "2")
        client.close()
    finally:
        assert server.stop() == 0


PYTHON_VERSION_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

VERSION = {version}


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("VERSION", np.array([VERSION], np.int32))]) for _ in requests]
"""


def test_versions_of_a_python_model_each_answer_with_their_own_code(tmp_path):
    repo = tmp_path / "repository"
    for version in (1, 2):
        (repo / "py_all" / str(version)).mkdir(parents=True)
        (repo / "py_all" / str(version) / "model.py").write_text(
            PYTHON_VERSION_MODEL.format(version=version))
    (repo / "py_all" / "config.pbtxt").write_text(textwrap.dedent("""
        name: "py_all"
        backend: "python"
        version_policy: { all { } }
        input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "VERSION" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """))
    server = ServerProcess(repo, interpreters=1)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        tensor = triton_grpc.InferInput("X", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        for version in ("1", "2"):
            result = client.infer("py_all", [tensor], model_version=version)
            assert result.as_numpy("VERSION").tolist() == [int(version)]
        client.close()
    finally:
        assert server.stop() == 0
