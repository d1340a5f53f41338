"""Wire details Triton's clients rely on, each found trying them against chorus as a new
user would: every field of a model's config printed (zeros too), compression of infer
and generate answers only (gzip, as Triton), unknown load parameters refused rather than
ignored, and Triton's own names for the server's flags."""

import gzip
import http.client
import json
import os
import re
import subprocess

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import BIN_DIR, ServerProcess, package


@pytest.fixture(scope="module")
def rest_server(repository):
    process = ServerProcess(repository[0])
    yield process
    assert process.stop() == 0


def fetch(server, method, path, body=None, accept_encoding=None):
    """(status, headers, raw body) of one request over plain http.client."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if accept_encoding:
        headers["Accept-Encoding"] = accept_encoding
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    answer = (response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    connection.close()
    return answer


def test_model_config_prints_zero_valued_fields(rest_server):
    client = triton_http.InferenceServerClient(f"127.0.0.1:{rest_server.http_port}")
    unbatched = client.get_model_config("raiser")
    assert unbatched["max_batch_size"] == 0  # present, as Triton prints it
    assert client.get_model_config("mlp")["max_batch_size"] == 64
    client.close()


INFER_BODY = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4],
                                     "data": [1.0] * 8}]})


@pytest.mark.parametrize("accept", ["gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.5"])
def test_only_infer_answers_are_compressed_and_only_with_gzip(rest_server, accept):
    status, headers, body = fetch(rest_server, "POST", "/v2/models/mlp/infer", INFER_BODY,
                                  accept_encoding=accept)
    assert status == 200 and headers.get("content-encoding") == "gzip"
    assert json.loads(gzip.decompress(body))["outputs"][0]["shape"] == [2, 3]
    for path in ("/v2/models/mlp", "/v2/models/mlp/config", "/v2/models/mlp/stats", "/v2"):
        status, headers, body = fetch(rest_server, "GET", path, accept_encoding=accept)
        assert status == 200 and "content-encoding" not in headers, path
        json.loads(body)  # plain JSON
    status, headers, _ = fetch(rest_server, "POST", "/v2/models/mlp/infer", INFER_BODY,
                               accept_encoding="br")
    assert status == 200 and "content-encoding" not in headers


def test_tritonclient_aio_reads_every_answer(rest_server):
    import asyncio

    import tritonclient.http.aio as triton_aio

    async def calls():
        client = triton_aio.InferenceServerClient(f"127.0.0.1:{rest_server.http_port}")
        try:
            config = await client.get_model_config("mlp")
            stats = await client.get_inference_statistics("mlp")
            tensor = triton_aio.InferInput("x", [2, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((2, 4), np.float32))
            result = await client.infer("mlp", [tensor], response_compression_algorithm="gzip")
            return config["max_batch_size"], stats["model_stats"][0]["name"], result
        finally:
            await client.close()

    max_batch_size, name, result = asyncio.run(calls())
    assert max_batch_size == 64 and name == "mlp"
    (output,) = [o["name"] for o in result.get_response()["outputs"]]
    assert result.as_numpy(output).shape == (2, 3)


def test_load_parameters_chorus_does_not_take_are_refused_not_ignored(rest_server):
    # ("config" and "file:<path>", Triton's, are taken: test_triton_surface.py.)
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    status, _, body = fetch(rest_server, "POST", "/v2/repository/models/mlp/load",
                            json.dumps({"parameters": {"unknownparam": "x"}}))
    assert status == 400
    assert json.loads(body)["error"].startswith("load parameter 'unknownparam' is not supported")
    status, _, body = fetch(rest_server, "POST", "/v2/repository/models/mlp/load", "{not json")
    assert status == 400
    assert json.loads(body)["error"].startswith("failed to parse the request JSON buffer")
    with grpc.insecure_channel(f"127.0.0.1:{rest_server.port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for key, value, why in (
                ("unknownparam", service_pb2.ModelRepositoryParameter(string_param="x"),
                 "load parameter 'unknownparam' is not supported"),
                ("config", service_pb2.ModelRepositoryParameter(bytes_param=b"{}"),
                 "invalid value type for load parameter 'config', expected string_param."),
                ("file:1/model.pt", service_pb2.ModelRepositoryParameter(string_param="x"),
                 "invalid value type for load parameter 'file:1/model.pt', expected "
                 "bytes_param.")):
            request = service_pb2.RepositoryModelLoadRequest(model_name="mlp")
            request.parameters[key].CopyFrom(value)
            with pytest.raises(grpc.RpcError) as refused:
                stub.RepositoryModelLoad(request, timeout=60)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert refused.value.details().startswith(why), refused.value.details()
    client = triton_http.InferenceServerClient(f"127.0.0.1:{rest_server.http_port}")
    client.load_model("mlp")  # with no parameters: loads (it is loaded already)
    assert client.is_model_ready("mlp")
    client.close()


def test_tritons_flag_names_are_accepted(repository):
    # (and --eager-imports: the server serves with every interpreter importing all of torch)
    server = subprocess.Popen(
        [os.path.join(BIN_DIR, "chorus-server"), "--model-store", str(repository[0]),
         "--grpc-port", "0", "--http-port", "-1", "--metrics-port", "-1", "--interpreters", "1",
         "--host", "127.0.0.1", "--eager-imports"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        port = int(re.search(r"port (\d+)", line).group(1))
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_model_ready("mlp")
        client.close()
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_tensorflow_style_tensor_names_are_served(tmp_path):
    repo = tmp_path / "repository"
    (repo / "tf_names" / "1").mkdir(parents=True)
    package(repo / "tf_names" / "1" / "model.pt", servable_models.Scale(2.0), torch.zeros(1, 4),
            "tf_names", batchable=False, input_names=["input:0"],
            output_names=["serving_default/scaled"])
    server = ServerProcess(repo, interpreters=1)
    try:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        grpc_client = triton_grpc.InferenceServerClient(server.address)
        tensor = triton_grpc.InferInput("input:0", [1, 4], "FP32")
        tensor.set_data_from_numpy(x)
        answer = grpc_client.infer("tf_names", [tensor]).as_numpy("serving_default/scaled")
        assert answer.tolist() == (2 * x).tolist()
        http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        tensor = triton_http.InferInput("input:0", [1, 4], "FP32")
        tensor.set_data_from_numpy(x)
        answer = http_client.infer("tf_names", [tensor]).as_numpy("serving_default/scaled")
        assert answer.tolist() == (2 * x).tolist()
        grpc_client.close()
        http_client.close()
    finally:
        assert server.stop() == 0


def raw_exchange(server, request: bytes) -> bytes:
    """The bytes answered to `request` sent as is; a socket timeout fails the test."""
    import socket

    with socket.create_connection(("127.0.0.1", server.http_port), timeout=2) as connection:
        connection.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += connection.recv(65536)
        head, _, body = answer.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
        while len(body) < length:
            body += connection.recv(65536)
        return head + b"\r\n\r\n" + body


@pytest.mark.parametrize("path", ["/v2/repository/index", "/v2/repository/models/mlp/load"])
def test_a_post_without_a_body_is_answered_at_once(rest_server, path):
    # What `curl -X POST URL` sends: no Content-Length, no body. cpp-httplib on its own
    # waited for the connection to close (5 s), then answered 400.
    answer = raw_exchange(rest_server, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "User-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    if path.endswith("index"):
        body = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert "mlp" in [entry["name"] for entry in body]


def test_a_form_encoded_infer_body_of_any_size_is_read_as_json(rest_server):
    # urllib and `curl -d` send Content-Type application/x-www-form-urlencoded; cpp-httplib
    # on its own refused such bodies over 8 KiB with 413.
    import urllib.request

    rows = 64  # the model's max_batch_size
    x = np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [rows, 4],
                                   "data": x.tolist()}]}, indent=4).encode()
    assert len(body) > 8192
    request = urllib.request.Request(
        f"http://127.0.0.1:{rest_server.http_port}/v2/models/mlp/infer", data=body)
    with urllib.request.urlopen(request, timeout=30) as response:
        assert request.get_header("Content-type") == "application/x-www-form-urlencoded"
        answer = json.loads(response.read())
    (output,) = answer["outputs"]
    assert output["shape"] == [rows, 3]
    client = triton_http.InferenceServerClient(f"127.0.0.1:{rest_server.http_port}")
    tensor = triton_http.InferInput("x", [rows, 4], "FP32")
    tensor.set_data_from_numpy(x)
    expected = client.infer("mlp", [tensor]).as_numpy(output["name"])
    client.close()
    assert np.array_equal(np.array(output["data"], np.float32).reshape(rows, 3), expected)


UNSIGNED = {"UINT16": (np.uint16, torch.uint16), "UINT32": (np.uint32, torch.uint32),
            "UINT64": (np.uint64, torch.uint64)}


def test_unsigned_tensors_travel_with_their_whole_range(tmp_path):
    repo = tmp_path / "repository"
    for wire, (_, torch_dtype) in UNSIGNED.items():
        (repo / wire.lower() / "1").mkdir(parents=True)
        package(repo / wire.lower() / "1" / "model.pt", servable_models.Identity(),
                torch.zeros(1, 3, dtype=torch_dtype), wire.lower(), batchable=False)
    server = ServerProcess(repo, interpreters=1)
    try:
        grpc_client = triton_grpc.InferenceServerClient(server.address)
        http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        for wire, (np_dtype, _) in UNSIGNED.items():
            x = np.array([[0, 7, np.iinfo(np_dtype).max]], dtype=np_dtype)
            config = http_client.get_model_config(wire.lower())
            assert config["input"][0]["data_type"] == "TYPE_" + wire
            for module, client in ((triton_grpc, grpc_client), (triton_http, http_client)):
                tensor = module.InferInput(config["input"][0]["name"], [1, 3], wire)
                tensor.set_data_from_numpy(x)
                result = client.infer(wire.lower(), [tensor])
                (output,) = [o["name"] for o in config["output"]]
                answer = result.as_numpy(output)
                assert answer.dtype == np_dtype and answer.tolist() == x.tolist(), module
            # JSON values, not binary: the largest value stays whole.
            body = json.dumps({"inputs": [{"name": config["input"][0]["name"], "datatype": wire,
                                           "shape": [1, 3], "data": x.flatten().tolist()}]})
            status, _, answer = fetch(server, "POST", f"/v2/models/{wire.lower()}/infer", body)
            assert status == 200
            assert json.loads(answer)["outputs"][0]["data"] == x.flatten().tolist()
        grpc_client.close()
        http_client.close()
    finally:
        assert server.stop() == 0
