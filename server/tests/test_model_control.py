"""Triton's model control modes with Triton's clients: explicit (only --load-model's models
at start, the rest on request), poll (the repository's new, changed and removed models
followed without a call) and none (every model, no load/unload calls)."""

import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
from conftest import BIN_DIR, ServerProcess, package
from tritonclient.utils import InferenceServerException


def add_model(repo, name, factor, version=1):
    """Packages Scale(factor) as `name`/`version`, appearing whole (one rename)."""
    staging = repo.parent / f".staging-{name}-{version}"
    (staging / str(version)).mkdir(parents=True)
    package(staging / str(version) / "model.pt", servable_models.Scale(factor), torch.zeros(1, 4),
            name)
    if (repo / name).exists():
        os.rename(staging / str(version), repo / name / str(version))
        shutil.rmtree(staging)
    else:
        os.rename(staging, repo / name)


def answer(client, name):
    tensor = triton_grpc.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    output = client.get_model_metadata(name).outputs[0].name
    return client.infer(name, [tensor]).as_numpy(output)[0, 0]


def wait_for(condition, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "repository"
    path.mkdir()
    add_model(path, "first", 2.0)
    add_model(path, "second", 3.0)
    return path


def test_explicit_serves_the_models_named_then_loads_on_request(repo):
    server = ServerProcess(repo, "--model-control-mode", "explicit", "--load-model", "first",
                           interpreters=1)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        assert client.is_model_ready("first") and not client.is_model_ready("second")
        assert client.is_server_ready()  # a model not asked for is not a failed one
        client.load_model("second")
        assert answer(client, "second") == 3.0
        client.unload_model("first")
        assert not client.is_model_ready("first")
        client.close()
    finally:
        assert server.stop() == 0


def test_explicit_refuses_to_start_with_a_model_the_repository_lacks(repo):
    done = subprocess.run(
        [os.path.join(BIN_DIR, "chorus-server"), "--model-repository", str(repo), "--port", "0",
         "--http-port", "-1", "--metrics-port", "-1", "--interpreters", "1", "--no-supervisor",
         "--model-control-mode", "explicit", "--load-model", "nope"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--load-model nope: no such model in the repository" in done.stderr


def test_poll_follows_new_changed_and_removed_models(repo):
    shutil.rmtree(repo / "second")
    server = ServerProcess(repo, "--model-control-mode", "poll", "--repository-poll-secs", "1",
                           interpreters=1)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        assert answer(client, "first") == 2.0 and not client.is_model_ready("second")
        add_model(repo, "second", 3.0)
        assert wait_for(lambda: client.is_model_ready("second"))
        assert answer(client, "second") == 3.0
        add_model(repo, "first", 5.0, version=2)  # a new version replaces the one serving
        assert wait_for(lambda: client.is_model_ready("first", "2"))
        assert answer(client, "first") == 5.0
        shutil.rmtree(repo / "second")
        assert wait_for(lambda: not client.is_model_ready("second"))
        with pytest.raises(InferenceServerException, match="model control mode is poll"):
            client.load_model("second")
        client.close()
    finally:
        assert server.stop() == 0


def test_none_serves_every_model_and_refuses_load_and_unload(repo):
    server = ServerProcess(repo, "--model-control-mode", "none", interpreters=1)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        assert client.is_model_ready("first") and client.is_model_ready("second")
        with pytest.raises(InferenceServerException, match="model control mode is none"):
            client.unload_model("first")
        assert client.is_model_ready("first")
        client.close()
    finally:
        assert server.stop() == 0


def test_loading_an_ensemble_loads_the_models_of_its_steps(repo):
    (repo / "pipeline").mkdir()
    (repo / "pipeline" / "config.json").write_text(json.dumps({
        "platform": "ensemble",
        "inputs": [{"name": "IN", "datatype": "FP32", "dims": [1, 4]}],
        "outputs": [{"name": "OUT", "datatype": "FP32", "dims": [1, 4]}],
        "ensemble_scheduling": {"step": [
            {"model_name": "first", "input_map": {"x": "IN"}, "output_map": {"output": "mid"}},
            {"model_name": "second", "input_map": {"x": "mid"},
             "output_map": {"output": "OUT"}}]}}))
    server = ServerProcess(repo, "--model-control-mode", "explicit", "--load-model", "pipeline")
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        assert client.is_model_ready("pipeline")
        assert client.is_model_ready("first") and client.is_model_ready("second")
        tensor = triton_grpc.InferInput("IN", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        assert client.infer("pipeline", [tensor]).as_numpy("OUT").tolist() == [[6.0] * 4]
        client.close()
    finally:
        assert server.stop() == 0
