"""KServe v2 HTTP/REST: Triton's HTTP client (tritonclient.http, from PyPI) for every
endpoint, and curl for the raw protocol, bad requests included. The REST port shares the
gRPC service's core, so answers agree with gRPC's to the bit."""

import json
import shutil
import subprocess

import numpy as np
import pytest
import torch

import servable_models
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import ServerProcess
from tritonclient.utils import InferenceServerException

MAX_BODY = 1 << 20


@pytest.fixture(scope="module")
def rest_server(repository):
    process = ServerProcess(repository[0], "--max-message-bytes", str(MAX_BODY))
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def http(rest_server):
    client = triton_http.InferenceServerClient(f"127.0.0.1:{rest_server.http_port}")
    yield client
    client.close()


def curl(server, method, path, body=None, headers=()):
    """(status, parsed JSON body) of a request made by the curl program."""
    command = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}",
               f"http://127.0.0.1:{server.http_port}{path}"]
    for header in headers:
        command += ["-H", header]
    if body is not None:
        command += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    result = subprocess.run(command, input=body.encode() if isinstance(body, str) else body,
                            capture_output=True, check=True)
    text, _, code = result.stdout.decode().rpartition("\n")
    return int(code), json.loads(text) if text else None


def reference(x):
    with torch.no_grad():
        return servable_models.TwoLayer()(torch.from_numpy(x)).numpy()


def test_health_and_metadata(rest_server, http):
    assert http.is_server_live() and http.is_server_ready()
    assert http.is_model_ready("mlp") and not http.is_model_ready("no_such_model")
    server = http.get_server_metadata()
    assert server["name"] == "chorus" and "binary_tensor_data" in server["extensions"]
    metadata = http.get_model_metadata("mlp")
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert metadata["outputs"][0]["shape"] == [-1, 3] and metadata["versions"] == ["1"]
    assert http.get_model_metadata("mlp", model_version="1")["name"] == "mlp"
    config = http.get_model_config("mlp")
    # Triton's JSON: 64-bit integers as numbers, as perf_analyzer's HTTP mode reads them.
    assert config["max_batch_size"] == 64
    # Every field, zero-valued ones too, as Triton prints them.
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4],
                                "format": "FORMAT_NONE", "allow_ragged_batch": False,
                                "is_shape_tensor": False, "optional": False,
                                "is_non_linear_format_io": False}]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 20000
    status, live = curl(rest_server, "GET", "/v2/health/live")
    assert (status, live) == (200, {"live": True})


@pytest.mark.parametrize("binary", [False, True])
def test_infer_json_and_binary_agree_with_grpc(rest_server, http, binary):
    x = np.random.default_rng(11).standard_normal((3, 4)).astype(np.float32)
    tensor = triton_http.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    (output,) = [o["name"] for o in http.get_model_metadata("mlp")["outputs"]]
    requested = triton_http.InferRequestedOutput(output, binary_data=binary)
    result = http.infer("mlp", [tensor], outputs=[requested], request_id="rest-7")
    assert result.get_response()["id"] == "rest-7"
    if binary:
        assert result.get_output(output)["parameters"]["binary_data_size"] == 3 * 3 * 4
    grpc = triton_grpc.InferenceServerClient(rest_server.address)
    grpc_tensor = triton_grpc.InferInput("x", list(x.shape), "FP32")
    grpc_tensor.set_data_from_numpy(x)
    expected = grpc.infer("mlp", [grpc_tensor]).as_numpy(output)
    grpc.close()
    if binary:
        np.testing.assert_array_equal(result.as_numpy(output), expected)
    else:  # JSON numbers round-trip float32 exactly
        np.testing.assert_array_equal(result.as_numpy(output).astype(np.float32), expected)
    assert float(np.abs(expected - reference(x)).max()) <= 1e-6


def test_curl_infer_with_nested_data(rest_server):
    x = [[0.5, -1.0, 2.0, 0.0], [1.5, -0.5, 0.25, 1.0]]
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4],
                                   "data": x}]})
    status, answer = curl(rest_server, "POST", "/v2/models/mlp/versions/1/infer", body)
    assert status == 200, answer
    (output,) = answer["outputs"]
    assert output["shape"] == [2, 3] and output["datatype"] == "FP32"
    expected = reference(np.array(x, np.float32)).reshape(-1)
    np.testing.assert_allclose(output["data"], expected, rtol=0, atol=1e-6)


def test_statistics_and_repository(rest_server, http, repository):
    stats = http.get_inference_statistics("mlp")["model_stats"][0]
    assert stats["name"] == "mlp" and stats["inference_count"] >= 2
    assert stats["inference_stats"]["success"]["count"] >= 2
    everything = http.get_inference_statistics()["model_stats"]
    assert {"mlp", "identity"} <= {m["name"] for m in everything}
    index = {m["name"]: m["state"] for m in http.get_model_repository_index()}
    assert index["mlp"] == "READY"
    repo, spares = repository
    # Its own copy of the spare: other modules load and unload "scale" too.
    shutil.copytree(spares / "scale", repo / "rest_scale")
    try:
        http.load_model("rest_scale")
        assert http.is_model_ready("rest_scale")
        tensor = triton_http.InferInput("x", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        (output,) = [o["name"] for o in http.get_model_metadata("rest_scale")["outputs"]]
        assert http.infer("rest_scale", [tensor]).as_numpy(output).tolist() == [[3.0] * 4]
        http.unload_model("rest_scale")
        assert not http.is_model_ready("rest_scale")
    finally:
        shutil.rmtree(repo / "rest_scale")


BAD_REQUESTS = [
    # (what, path, body, status, words the error must contain)
    ("malformed JSON", "/v2/models/mlp/infer", '{"inputs": [', 400, "not valid JSON"),
    ("wrong shape", "/v2/models/mlp/infer",
     '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 5], "data": [1,2,3,4,5]}]}',
     400, "shape"),
    ("wrong datatype", "/v2/models/mlp/infer",
     '{"inputs": [{"name": "x", "datatype": "INT32", "shape": [1, 4], "data": [1,2,3,4]}]}',
     400, "INT32"),
    ("a string for a number", "/v2/models/mlp/infer",
     '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1,2,"3",4]}]}',
     400, "not a number"),
    ("too few values", "/v2/models/mlp/infer",
     '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4], "data": [1,2,3,4]}]}',
     400, "4 values for shape [2,4] (8 elements)"),
    ("an unknown input", "/v2/models/mlp/infer",
     '{"inputs": [{"name": "y", "datatype": "FP32", "shape": [1, 4], "data": [1,2,3,4]}]}',
     400, '"y"'),
    ("an unknown model", "/v2/models/no_such_model/infer",
     '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1,2,3,4]}]}',
     404, "no_such_model"),
    ("an unknown endpoint", "/v2/nothing/here", "{}", 404, "no such endpoint"),
    ("a model that raises", "/v2/models/raiser/infer",
     '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1,1,1,1]}]}',
     500, "refusing a positive input"),
]


@pytest.mark.parametrize("what,path,body,status,words", BAD_REQUESTS,
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_requests_get_their_status_and_a_clear_error(rest_server, what, path, body, status,
                                                         words):
    got, answer = curl(rest_server, "POST", path, body)
    assert got == status, (what, answer)
    assert set(answer) == {"error"} and words in answer["error"], answer
    assert "Traceback" not in answer["error"]
    # And the server keeps serving.
    ok, _ = curl(rest_server, "POST", "/v2/models/mlp/infer", json.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [0, 0, 0, 0]}]}))
    assert ok == 200


def test_oversized_and_inconsistent_binary_bodies(rest_server):
    data = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                   "data": [0.0] * 4}], "padding": "x" * MAX_BODY})
    status, answer = curl(rest_server, "POST", "/v2/models/mlp/infer", data)
    assert status == 413 and str(MAX_BODY) in answer["error"], answer
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                     "parameters": {"binary_data_size": 16}}]})
    # Binary data shorter than the input claims, and a header length past the body.
    for length, blob in ((len(header), b"\0" * 8), (len(header) + 100, b"\0" * 16)):
        status, answer = curl(rest_server, "POST", "/v2/models/mlp/infer", header.encode() + blob,
                              headers=[f"Inference-Header-Content-Length: {length}"])
        assert status == 400 and ("binary" in answer["error"] or "exceeds" in answer["error"]), \
            answer
    status, answer = curl(rest_server, "POST", "/v2/models/mlp/infer",
                          header.encode() + np.ones(4, np.float32).tobytes(),
                          headers=[f"Inference-Header-Content-Length: {len(header)}"])
    assert status == 200 and len(answer["outputs"][0]["data"]) == 3


def test_http_client_errors_are_exceptions_with_the_message(http):
    with pytest.raises(InferenceServerException) as unknown:
        http.get_model_metadata("no_such_model")
    assert "no_such_model" in unknown.value.message()


def test_the_bearer_token_guards_every_endpoint_but_health(repository):
    guarded = ServerProcess(repository[0], "--auth-token", "s3cret", interpreters=1)
    try:
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                       "data": [0, 0, 0, 0]}]})
        for method, path, data in (("GET", "/v2", None), ("GET", "/v2/models/mlp", None),
                                   ("POST", "/v2/models/mlp/infer", body)):
            status, answer = curl(guarded, method, path, data)
            assert status == 401 and "bearer token" in answer["error"], (path, answer)
            status, _ = curl(guarded, method, path, data,
                             headers=["Authorization: Bearer wrong"])
            assert status == 401
            status, _ = curl(guarded, method, path, data,
                             headers=["Authorization: Bearer s3cret"])
            assert status == 200, path
        assert curl(guarded, "GET", "/v2/health/ready")[0] == 200
    finally:
        assert guarded.stop() == 0
