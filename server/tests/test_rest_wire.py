"""Wire details Triton's clients rely on, each found trying them against chorus as a new
user would: every field of a model's config printed (zeros too), compression of infer
and generate answers only (gzip, as Triton), load parameters refused rather than ignored,
and Triton's own names for the server's flags."""

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
from tritonclient.utils import InferenceServerException


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


def test_load_parameters_are_refused_not_ignored(rest_server):
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{rest_server.http_port}")
    grpc_client = triton_grpc.InferenceServerClient(f"127.0.0.1:{rest_server.port}")
    config = json.dumps({"max_batch_size": 4})
    for client in (http_client, grpc_client):
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("mlp", config=config)
        assert 'load parameter "config" of model mlp is not supported' in str(refused.value)
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("mlp", files={"file:1/model.pt": b"not a model"})
        assert 'load parameter "file:1/model.pt"' in str(refused.value)
        client.load_model("mlp")  # with no parameters: loads (it is loaded already)
        assert client.is_model_ready("mlp")
    http_client.close()
    grpc_client.close()


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
