"""Triton's response cache with Triton's clients: a model whose config enables it is
answered from the cache for a request it has answered before (gRPC or REST alike, the same
bytes), counted as Triton counts hits and misses; other models, and a cached model asked for
different inputs or outputs, run."""

import json
import urllib.request

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import ServerProcess, package


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("cache") / "repository"
    for name, cached in (("cached", True), ("uncached", False)):
        (repo / name / "1").mkdir(parents=True)
        package(repo / name / "1" / "model.pt", servable_models.TwoLayer(), torch.zeros(1, 4),
                name)
        (repo / name / "config.json").write_text(json.dumps(
            {"response_cache": {"enable": cached}}))
    (repo / "streaming" / "1").mkdir(parents=True)
    package(repo / "streaming" / "1" / "model.pt", servable_models.TwoLayer(), torch.zeros(1, 4),
            "streaming")
    (repo / "streaming" / "config.json").write_text(json.dumps(
        {"decoupled": True, "response_cache": {"enable": True}}))
    process = ServerProcess(repo, "--cache-size-bytes", "1048576", interpreters=1)
    yield process
    assert process.stop() == 0


def stats(client, model):
    (model_stats,) = client.get_inference_statistics(model).model_stats
    return model_stats


def infer(module, client, model, x, output=None, binary=True):
    tensor = module.InferInput("x", list(x.shape), "FP32")
    if module is triton_http:
        tensor.set_data_from_numpy(x, binary_data=binary)
    else:
        tensor.set_data_from_numpy(x)
    outputs = [module.InferRequestedOutput(output)] if output else None
    result = client.infer(model, [tensor], outputs=outputs)
    return result.as_numpy(result.get_response().outputs[0].name if module is triton_grpc
                           else result.get_response()["outputs"][0]["name"])


def test_a_repeated_request_is_answered_from_the_cache(server):
    grpc_client = triton_grpc.InferenceServerClient(server.address)
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    first = infer(triton_grpc, grpc_client, "cached", x)
    again = infer(triton_grpc, grpc_client, "cached", x)
    over_rest = infer(triton_http, http_client, "cached", x)
    # The same values as JSON numbers: decoded, then keyed alike.
    as_json = infer(triton_http, http_client, "cached", x, binary=False)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, over_rest)
    np.testing.assert_array_equal(first, as_json)
    with torch.no_grad():
        expected = servable_models.TwoLayer()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(first, expected, rtol=1e-6, atol=1e-6)
    counted = stats(grpc_client, "cached")
    assert counted.inference_stats.cache_miss.count == 1
    assert counted.inference_stats.cache_hit.count == 3
    assert counted.inference_stats.cache_hit.ns > 0
    assert counted.execution_count == 1  # the model ran once
    assert counted.inference_stats.success.count == 4
    # Different values run the model; so does the same request to a model without the cache.
    infer(triton_grpc, grpc_client, "cached", x + 1)
    assert stats(grpc_client, "cached").execution_count == 2
    for _ in range(2):
        infer(triton_grpc, grpc_client, "uncached", x)
    plain = stats(grpc_client, "uncached")
    assert plain.execution_count == 2 and plain.inference_stats.cache_hit.count == 0
    assert grpc_client.get_model_config("cached").config.response_cache.enable
    assert not grpc_client.get_model_config("uncached").config.response_cache.enable
    rest_stats = http_client.get_inference_statistics("cached")["model_stats"][0]
    assert rest_stats["inference_stats"]["cache_hit"]["count"] == 3
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as answer:
        text = answer.read().decode()
    assert 'nv_cache_num_hits_per_model{model="cached",version="1"} 3\n' in text
    grpc_client.close()
    http_client.close()


def test_a_decoupled_model_cannot_enable_the_cache(server):
    client = triton_grpc.InferenceServerClient(server.address)
    (entry,) = [m for m in client.get_model_repository_index().models if m.name == "streaming"]
    assert entry.state == "UNAVAILABLE"
    assert "config.json: response_cache: only a model that answers each request once" in (
        entry.reason)
    client.close()
