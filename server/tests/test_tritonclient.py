"""Triton's own Python client (tritonclient, from PyPI) against chorus-server, in the same
process as chorus' client: both register the protocol's message names, and chorus keeps
its own in a private descriptor pool so that neither import breaks the other."""

import numpy as np
import pytest
import torch

import chorus.client  # noqa: F401  (first, as a user's program would)
import servable_models
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def triton(server):
    client = triton_grpc.InferenceServerClient(server.address)
    yield client
    client.close()


def test_both_clients_load_in_one_process_and_agree(server, triton):
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    with server.client() as ours:
        (expected,) = ours.infer("mlp", {"x": x}).values()
    request = triton_grpc.InferInput("x", list(x.shape), "FP32")
    request.set_data_from_numpy(x)
    result = triton.infer("mlp", [request])
    (output,) = [o.name for o in triton.get_model_metadata("mlp").outputs]
    np.testing.assert_array_equal(result.as_numpy(output), expected)
    with torch.no_grad():
        reference = servable_models.TwoLayer()(torch.from_numpy(x)).numpy()
    assert float(np.abs(expected - reference).max()) <= 1e-6


def test_tritonclient_health_metadata_and_repository_calls(triton):
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("mlp")
    metadata = triton.get_model_metadata("mlp")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == \
        [("x", "FP32", [-1, 4])]
    index = {m.name: m.state for m in triton.get_model_repository_index().models}
    assert index["mlp"] == "READY"
    stats = triton.get_inference_statistics("mlp")
    assert stats.model_stats[0].name == "mlp"
    with pytest.raises(InferenceServerException) as unknown:
        triton.get_model_metadata("no_such_model")
    assert "no_such_model" in unknown.value.message()


def test_model_config_is_triton_shaped(triton):
    config = triton.get_model_config("mlp", as_json=True)["config"]
    assert config["name"] == "mlp" and config["platform"] == "pytorch_torch_package"
    assert config["max_batch_size"] == 64
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": ["4"]}]
    assert [(o["data_type"], o["dims"]) for o in config["output"]] == [("TYPE_FP32", ["3"])]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == "20000"
    assert config["instance_group"] == [{"name": "mlp", "kind": "KIND_CPU", "count": 2}]
    assert config["default_model_filename"] == "model.pt"
    # Announced as not decoupled: the field is there, with its default value.
    assert config["model_transaction_policy"] == {}
    unbatched = triton.get_model_config("identity", as_json=True)["config"]
    assert unbatched["max_batch_size"] == 32 and "dynamic_batching" not in unbatched
    with pytest.raises(InferenceServerException) as unknown:
        triton.get_model_config("no_such_model")
    assert "no_such_model" in unknown.value.message()
