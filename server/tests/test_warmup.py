"""Triton's model warm-up: the samples a model's config describes run before the model is
ready, each `count` times on every interpreter (zeros, random values, or a file's bytes);
a sample that fails keeps the model from serving, saying which."""

import json

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
from conftest import ServerProcess, package


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    root = tmp_path_factory.mktemp("warmup")
    repo, log = root / "repository", root / "calls.log"
    (repo / "probe" / "1").mkdir(parents=True)
    package(repo / "probe" / "1" / "model.pt", servable_models.WarmupProbe(str(log)),
            torch.zeros(1, 4), "probe")
    (repo / "probe" / "warmup").mkdir()
    np.full((2, 4), 0.5, np.float32).tofile(repo / "probe" / "warmup" / "halves.bin")
    (repo / "probe" / "config.json").write_text(json.dumps({"model_warmup": [
        {"name": "zeros", "batch_size": 3, "count": 2, "inputs": {"x": {"zero_data": True}}},
        {"name": "random", "inputs": {"x": {"random_data": True}}},
        {"name": "file", "batch_size": 2, "inputs": {"x": {"input_data_file": "halves.bin"}}}]}))
    (repo / "broken" / "1").mkdir(parents=True)
    package(repo / "broken" / "1" / "model.pt", servable_models.TwoLayer(), torch.zeros(1, 4),
            "broken")
    (repo / "broken" / "config.json").write_text(json.dumps({"model_warmup": [
        {"name": "missing", "inputs": {"x": {"input_data_file": "nowhere.bin"}}}]}))
    log.write_text("")  # packaging ran the model once here
    server = ServerProcess(repo, interpreters=2)
    yield server, log
    assert server.stop() == 0


def test_samples_run_on_every_interpreter_before_the_model_is_ready(warmed):
    server, log = warmed
    client = triton_grpc.InferenceServerClient(server.address)
    assert client.is_model_ready("probe")
    calls = [line.split() for line in log.read_text().splitlines()]  # before any request
    shapes = [" ".join(c[:-2]) for c in calls]
    interpreters = {c[-2] for c in calls}
    assert len(interpreters) == 2
    # zeros: 2 runs x 2 interpreters, random: 1 x 2, file: 1 x 2.
    assert shapes.count("[3, 4]") == 4 and shapes.count("[1, 4]") == 2
    assert shapes.count("[2, 4]") == 2
    sums = [float(c[-1]) for c in calls]
    assert [s for c, s in zip(shapes, sums) if c == "[3, 4]"] == [0.0] * 4
    assert [s for c, s in zip(shapes, sums) if c == "[2, 4]"] == [4.0, 4.0]  # 8 halves
    random_sums = [s for c, s in zip(shapes, sums) if c == "[1, 4]"]
    assert all(0 < s < 4 for s in random_sums)
    (stats,) = client.get_inference_statistics("probe").model_stats
    assert stats.inference_count == 0  # warm-up runs are not client requests
    x = np.ones((1, 4), np.float32)
    tensor = triton_grpc.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(x)
    output = client.get_model_metadata("probe").outputs[0].name
    assert client.infer("probe", [tensor]).as_numpy(output).tolist() == [[2.0] * 4]
    client.close()


def test_a_failing_sample_keeps_the_model_from_serving(warmed):
    server, _ = warmed
    client = triton_grpc.InferenceServerClient(server.address)
    (entry,) = [m for m in client.get_model_repository_index().models if m.name == "broken"]
    assert entry.state == "UNAVAILABLE"
    assert 'config.json: model_warmup "missing": input "x": cannot read warmup/nowhere.bin' in (
        entry.reason)
    client.close()
