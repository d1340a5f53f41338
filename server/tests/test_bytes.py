"""BYTES tensors (text) end to end, with Triton's clients: a Python model and a TorchScript
model that take and return strings, over gRPC (raw and typed contents), HTTP/REST (JSON and
binary), curl and a stream; batched together like tensors; declared in metadata and
Triton's ModelConfig; malformed strings refused with the server serving on. Strings reach
Python models as str (UTF-8, bytes that are not UTF-8 as lone surrogates) and come back as
the same bytes."""

import csv
import json
import os
import subprocess
import threading
from typing import List

import numpy as np
import pytest
import torch

import servable_models
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from chorus.client import Client
from chorus.client.client import pb
from chorus.package import create_package
from conftest import ServerProcess
from tritonclient.utils import InferenceServerException

# Bytes that are not UTF-8 on purpose: they must come back unchanged.
WORDS = [b"hello", b"", "gr\u00fc\u00df".encode(), b"\xffraw"]


class ScriptedShout(torch.nn.Module):
    """TorchScript's view of text in a batched Triton config (dims [1]): List[List[str]]."""

    def forward(self, text: List[List[str]]) -> List[List[str]]:
        return [[row[0].upper()] for row in text]


@pytest.fixture(scope="module")
def text_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("bytes") / "repository"
    for name in ("shout", "words", "scripted"):
        (repo / name / "1").mkdir(parents=True)
    create_package(str(repo / "shout" / "1" / "model.pt"), servable_models.Shout(),
                   (["a", "b"],), name="shout", progress=False, max_batch_size=16,
                   input_names=["text"], output_names=["upper", "length"])
    (repo / "shout" / "config.json").write_text('{"max_queue_delay_us": 100000}')
    create_package(str(repo / "words" / "1" / "model.pt"), servable_models.Words(),
                   (["a b"],), name="words", progress=False, batchable=False,
                   input_names=["text"], output_names=["word"])
    (repo / "words" / "config.json").write_text('{"decoupled": true}')
    torch.jit.script(ScriptedShout()).save(str(repo / "scripted" / "1" / "model.pt"))
    (repo / "scripted" / "config.json").write_text(json.dumps({
        "max_batch_size": 8,
        "inputs": [{"name": "text", "datatype": "TYPE_STRING", "dims": [1]}]}))
    process = ServerProcess(repo, interpreters=2)
    yield process
    assert process.stop() == 0


def words_array():
    return np.array(WORDS, dtype=np.object_)


def expect_shouted(upper, length):
    # str.upper() on the Python side; the non-UTF-8 byte crossed as a lone surrogate.
    assert list(upper) == [b"HELLO", b"", "GR\u00dcSS".encode(), b"\xffRAW"]
    assert length.tolist() == [5, 0, 4, 4]


def test_grpc_raw_bytes_round_trip(text_server):
    client = triton_grpc.InferenceServerClient(text_server.address)
    text = triton_grpc.InferInput("text", [4], "BYTES")
    text.set_data_from_numpy(words_array())
    result = client.infer("shout", [text])
    expect_shouted(result.as_numpy("upper"), result.as_numpy("length"))
    assert result.get_output("upper").datatype == "BYTES"
    assert list(result.get_output("upper").shape) == [4]


def test_grpc_typed_bytes_contents(text_server):
    request = pb.ModelInferRequest(model_name="shout")
    tensor = request.inputs.add(name="text", datatype="BYTES", shape=[4])
    tensor.contents.bytes_contents.extend(WORDS)
    with Client(text_server.address) as client:
        outputs = client.infer_request(request)
    assert list(outputs) == ["upper", "length"]
    expect_shouted(outputs["upper"], outputs["length"])


@pytest.mark.parametrize("binary", [False, True])
def test_http_json_and_binary_bytes(text_server, binary):
    client = triton_http.InferenceServerClient(f"127.0.0.1:{text_server.http_port}")
    # JSON carries text only; the binary extension carries any bytes.
    words = WORDS if binary else WORDS[:3]
    text = triton_http.InferInput("text", [len(words)], "BYTES")
    text.set_data_from_numpy(np.array(words, dtype=np.object_), binary_data=binary)
    outputs = [triton_http.InferRequestedOutput("upper", binary_data=binary)]
    result = client.infer("shout", [text], outputs=outputs)
    # JSON answers are parsed as str, binary ones as bytes.
    upper = [v if isinstance(v, bytes) else v.encode() for v in result.as_numpy("upper")]
    expected = [b"HELLO", b"", "GR\u00dcSS".encode(), b"\xffRAW"]
    assert upper == expected[:len(words)]
    assert all(isinstance(v, bytes) == binary for v in result.as_numpy("upper"))


def test_curl_rest_json_strings(text_server):
    body = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                   "data": ["hi", "there"]}]})
    answer = subprocess.run(
        ["curl", "-s", "-X", "POST", "-H", "Content-Type: application/json", "-d", body,
         f"http://127.0.0.1:{text_server.http_port}/v2/models/shout/infer"],
        check=True, capture_output=True, text=True).stdout
    outputs = {o["name"]: o for o in json.loads(answer)["outputs"]}
    assert outputs["upper"] == {"name": "upper", "datatype": "BYTES", "shape": [2],
                                "data": ["HI", "THERE"]}
    assert outputs["length"]["data"] == [2, 5]


def test_metadata_and_triton_config_declare_strings(text_server):
    client = triton_grpc.InferenceServerClient(text_server.address)
    metadata = client.get_model_metadata("shout")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("text", "BYTES", [-1])]
    assert [(t.name, t.datatype) for t in metadata.outputs] == [
        ("upper", "BYTES"), ("length", "INT64")]
    config = client.get_model_config("scripted").config
    assert config.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("text", triton_grpc.model_config_pb2.TYPE_STRING, [1])]
    assert [(t.data_type, list(t.dims)) for t in config.output] == [
        (triton_grpc.model_config_pb2.TYPE_STRING, [1])]


def test_torchscript_takes_lists_of_str(text_server):
    client = triton_grpc.InferenceServerClient(text_server.address)
    text = triton_grpc.InferInput("text", [2, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"torch"], [b"script"]], dtype=np.object_))
    result = client.infer("scripted", [text])
    assert result.as_numpy("output").tolist() == [[b"TORCH"], [b"SCRIPT"]]


def test_string_requests_batch_together(text_server):
    client = triton_grpc.InferenceServerClient(text_server.address)
    before = client.get_inference_statistics("shout").model_stats[0]
    answers = {}

    def ask(i):
        own = triton_grpc.InferenceServerClient(text_server.address)
        text = triton_grpc.InferInput("text", [2], "BYTES")
        text.set_data_from_numpy(np.array([f"r{i}a".encode(), f"r{i}bb".encode()],
                                          dtype=np.object_))
        result = own.infer("shout", [text])
        answers[i] = (list(result.as_numpy("upper")), result.as_numpy("length").tolist())

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {i: ([f"R{i}A".encode(), f"R{i}BB".encode()], [3, 4]) for i in range(8)}
    after = client.get_inference_statistics("shout").model_stats[0]
    assert after.inference_count - before.inference_count == 16
    # 8 requests within the 100 ms queue delay: fewer executions than requests.
    assert after.execution_count - before.execution_count < 8


def test_strings_stream_from_a_decoupled_model(text_server):
    client = triton_grpc.InferenceServerClient(text_server.address)
    received = []
    done = threading.Event()

    def callback(result, error):
        if error is not None:
            received.append(error)
            done.set()
            return
        final = result.get_response().parameters["triton_final_response"].bool_param
        if not final:
            received.append(result.as_numpy("word").tolist())
        else:
            done.set()

    client.start_stream(callback=callback)
    text = triton_grpc.InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"one two three"], dtype=np.object_))
    client.async_stream_infer("words", [text], enable_empty_final_response=True)
    assert done.wait(30)
    client.stop_stream()
    assert received == [[b"one"], [b"two"], [b"three"]]


def test_malformed_strings_are_refused_and_the_server_serves_on(text_server):
    # A length that runs past the end, sent raw with tritonclient's own plumbing bypassed.
    request = pb.ModelInferRequest(model_name="shout")
    request.inputs.add(name="text", datatype="BYTES", shape=[2])
    request.raw_input_contents.append(b"\x02\x00\x00\x00ab\x09\x00\x00\x00abc")
    with Client(text_server.address) as client:
        with pytest.raises(Exception) as error:
            client.infer_request(request)
    assert "raw BYTES element 1 claims 9 bytes; 3 are left" in str(error.value)

    client = triton_grpc.InferenceServerClient(text_server.address)
    floats = triton_grpc.InferInput("text", [2], "FP32")
    floats.set_data_from_numpy(np.zeros(2, dtype=np.float32))
    with pytest.raises(InferenceServerException, match="expected datatype BYTES, got FP32"):
        client.infer("shout", [floats])

    rest = subprocess.run(
        ["curl", "-s", "-w", "%{http_code}", "-X", "POST", "-d",
         json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                 "data": ["a", 7]}]}),
         f"http://127.0.0.1:{text_server.http_port}/v2/models/shout/infer"],
        check=True, capture_output=True, text=True).stdout
    assert rest.endswith("400")
    assert "value 1 (7) is not a string" in rest

    text = triton_grpc.InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"still here"], dtype=np.object_))
    assert client.infer("shout", [text]).as_numpy("upper").tolist() == [b"STILL HERE"]


def test_perf_analyzer_drives_a_string_model(text_server, tmp_path):
    """perf_analyzer makes up strings for BYTES inputs (--string-length) from the
    metadata and config (Triton's batched dims [1]); batches of 2 rows, two requests at a
    time."""
    perf_analyzer = os.environ.get("CHORUS_PERF_ANALYZER", "")
    assert os.access(perf_analyzer, os.X_OK), "perf_analyzer not found: `make configure`"
    client = triton_grpc.InferenceServerClient(text_server.address)
    before = client.get_inference_statistics("scripted").model_stats[0].inference_count
    report = tmp_path / "scripted.csv"
    done = subprocess.run(
        [perf_analyzer, "-m", "scripted", "-i", "grpc", "-u", text_server.address, "-b", "2",
         "--string-length", "16", "-p", "500", "--concurrency-range", "2", "--max-trials", "6",
         "--stability-percentage", "50", "-f", str(report)],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = list(csv.DictReader(report.open()))
    assert float(row["Inferences/Second"]) > 0
    assert int(row["Server Compute Infer"]) > 0
    after = client.get_inference_statistics("scripted").model_stats[0].inference_count
    assert after - before >= 2 * 10  # at least ten requests of two rows each
