"""TorchServe's .mar archives on chorus-server (--model-store with --models), answered
through TorchServe's inference API (/ping, /predictions) as TorchServe answers:
archives made with torch-model-archiver, requests as TorchServe's clients send them."""

import http.client
import json
import os
import subprocess
import threading
import uuid

import pytest
import torch
from conftest import BIN_DIR, ServerProcess
from torchserve_archives import (ECHO_HANDLER, archive, echo_archive, multipart, net_archive,
                                 net_forward, net_state_dict)

TORCHSERVE_FLAGS = ("--models", "all", "--torchserve-inference-port", "0",
                    "--torchserve-metrics-port", "0")

BATCHING_CONFIG = """
minWorkers: 1
batchSize: 4
maxBatchDelay: 20000
"""

TWO_WORKERS_CONFIG = """
minWorkers: 2
"""


def call(server, path, body=b"", headers=None, method="POST"):
    """(status, headers, body) of one request; header names go as written."""
    connection = http.client.HTTPConnection("127.0.0.1", server.torchserve_port, timeout=120)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def workers_seen(server, model, calls=60, at_once=4):
    """The distinct workers (their Context objects) that answered `calls` requests sent
    `at_once` at a time."""
    seen = set()
    lock = threading.Lock()

    def ask():
        for _ in range(calls // at_once):
            status, _, body = call(server, f"/predictions/{model}", b"x")
            assert status == 200, body
            with lock:
                seen.add(json.loads(body)["worker"])

    threads = [threading.Thread(target=ask) for _ in range(at_once)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(seen)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("torchserve") / "store")
    echo_archive(store)
    echo_archive(store, "batched", config=BATCHING_CONFIG)
    echo_archive(store, "two_workers", config=TWO_WORKERS_CONFIG)
    net_archive(store)
    started = ServerProcess(store, *TORCHSERVE_FLAGS)
    yield started
    assert started.stop() == 0


def test_ping_answers_healthy_as_torchserve(server):
    for method in ("GET", "POST"):
        status, _, body = call(server, "/ping", method=method)
        assert (status, json.loads(body)) == (200, {"status": "Healthy"})


def test_a_raw_body_reaches_the_handler_decoded_by_its_content_type(server):
    status, headers, body = call(server, "/predictions/echo", b'{"x": [1, 2]}',
                                 {"Content-Type": "application/json"})
    assert status == 200, body
    answer = json.loads(body)
    assert answer["inputs"] == {"body": {"x": [1, 2]}}
    assert headers["Content-Type"] == "application/json"
    assert uuid.UUID(headers["x-request-id"]).version == 4
    # The media type decides, its parameters aside (as Netty gives it to TorchServe's worker).
    _, _, body = call(server, "/predictions/echo", b'{"x": 3}',
                      {"Content-Type": "application/json; charset=UTF-8"})
    assert json.loads(body)["inputs"] == {"body": {"x": 3}}
    # text/* as str; anything else as TorchServe's bytearray
    _, _, body = call(server, "/predictions/echo", "héllo".encode(), {"Content-Type": "text/plain"})
    assert json.loads(body)["inputs"] == {"body": "héllo"}
    _, _, body = call(server, "/predictions/echo", bytes(range(256)),
                      {"Content-Type": "application/octet-stream"})
    assert json.loads(body)["inputs"] == {"body": {"bytes": 256, "type": "bytearray"}}


def test_several_files_of_a_multipart_request_are_inputs_by_field_name(server):
    image = bytes(range(200)) * 3
    body, headers = multipart({"data": ("cat.jpg", image, "image/jpeg"),
                               "meta": (None, b'{"k": 1}', "application/json"),
                               "note": (None, b"plain words", None)})
    status, _, answer = call(server, "/predictions/echo", body, headers)
    assert status == 200, answer
    # A form attribute (no file name) has no content type, as in TorchServe: bytes.
    assert json.loads(answer)["inputs"] == {
        "data": {"bytes": 600, "type": "bytearray"}, "meta": {"bytes": 8, "type": "bytearray"},
        "note": {"bytes": 11, "type": "bytearray"}}
    body, headers = multipart({"data": ("meta.json", b'{"k": 1}', "application/json")})
    _, _, answer = call(server, "/predictions/echo", body, headers)
    assert json.loads(answer)["inputs"] == {"data": {"k": 1}}


def test_a_url_encoded_form_gives_one_input_per_field_the_last_of_a_repeated_name(server):
    status, _, answer = call(server, "/predictions/echo", b"a=first&a=1&b=two",
                             {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200, answer
    assert json.loads(answer)["inputs"] == {"a": {"bytes": 1, "type": "bytearray"},
                                            "b": {"bytes": 3, "type": "bytearray"}}


def test_the_handler_sets_each_request_status_and_headers(server):
    status, headers, body = call(server, "/predictions/echo", b"x",
                                 {"x-status": "201", "x-echo": "yes"})
    assert status == 201, body
    assert headers["x-echoed"] == "yes"
    assert json.loads(body)["explain"] == "False"
    status, _, body = call(server, "/explanations/echo", b"x")
    assert (status, json.loads(body)["explain"]) == (200, "True")


def test_the_handler_runs_in_its_model_folder(server):
    _, _, body = call(server, "/predictions/echo", b"x")
    assert json.loads(body)["cwd_has_handler"] is True


def test_a_prediction_exception_is_answered_with_its_code_and_torchserve_error_json(server):
    status, _, body = call(server, "/predictions/echo", b"x", {"x-fail": "prediction"})
    assert status == 422
    assert json.loads(body) == {"code": 422, "type": "InternalServerException",
                                "message": "the handler refused"}
    status, _, body = call(server, "/predictions/echo", b"x", {"x-fail": "error"})
    assert status == 503
    assert json.loads(body) == {"code": 503, "type": "InternalServerException",
                                "message": "Prediction failed"}
    # The worker still serves.
    status, _, _ = call(server, "/predictions/echo", b"x")
    assert status == 200


def test_an_unknown_model_or_version_is_torchserve_404(server):
    status, _, body = call(server, "/predictions/nothing", b"x")
    assert status == 404
    assert json.loads(body) == {"code": 404, "type": "ModelNotFoundException",
                                "message": "Model not found: nothing"}
    status, _, body = call(server, "/predictions/echo/7", b"x")
    assert status == 404
    assert json.loads(body)["message"] == "Model version: 7 does not exist for model: echo"


def test_batch_size_and_max_batch_delay_batch_concurrent_requests(server):
    answers = []

    def ask():
        answers.append(call(server, "/predictions/batched", b"x"))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _, _ in answers] == [200] * 4
    # Four requests within maxBatchDelay (20 s: a loaded machine still gets them there)
    # reach the handler as one batch of 4; a full batch does not wait for the delay.
    assert sorted(json.loads(body)["batch"] for _, _, body in answers) == [4] * 4


def test_min_workers_makes_that_many_workers_each_with_its_own_context(server):
    # Requests two at a time, so that the second worker has work whichever the
    # scheduler picks first.
    assert workers_seen(server, "two_workers", calls=20, at_once=2) == 2


def test_an_eager_model_with_its_state_dict_answers_its_net(server):
    rows = [0.5, -1.0, 2.0, 0.25]
    status, _, body = call(server, "/predictions/net", json.dumps(rows).encode(),
                           {"Content-Type": "application/json"})
    assert status == 200, body
    expected = net_forward(net_state_dict(7), [rows])[0]
    assert json.loads(body) == pytest.approx(expected, abs=1e-6)


def test_the_token_guards_predictions_but_not_ping(tmp_path):
    store = str(tmp_path / "store")
    echo_archive(store)
    guarded = ServerProcess(store, *TORCHSERVE_FLAGS, "--auth-token", "s3cret", interpreters=1)
    try:
        assert call(guarded, "/ping")[0] == 200
        status, _, body = call(guarded, "/predictions/echo", b"x")
        assert status == 401, body
        assert json.loads(body)["code"] == 401
        status, _, _ = call(guarded, "/predictions/echo", b"x", {"Authorization": "Bearer s3cret"})
        assert status == 200
    finally:
        assert guarded.stop() == 0


def test_a_store_entry_that_cannot_be_opened_stops_the_start_naming_it(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "broken.mar").write_bytes(b"not a zip")
    ran = subprocess.run(
        [os.path.join(BIN_DIR, "chorus-server"), "--model-store", str(store), "--models", "all",
         "--no-supervisor", "--interpreters", "1", "--port", "0", "--http-port", "-1",
         "--metrics-port", "-1", "--torchserve-inference-port", "0", "--host", "127.0.0.1"],
        capture_output=True, text=True, timeout=120)
    assert ran.returncode == 1, ran.stderr
    assert "broken.mar" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr


def test_a_requirements_file_is_refused_naming_what_is_missing_and_accepted_when_met(tmp_path):
    store = str(tmp_path / "store")
    unmet = "no-such-package-for-chorus==1.0\ntorch>=1.0\n"
    met = f"torch>={torch.__version__.split('+')[0]}\n"
    archive(store, "unmet", {"echo_handler.py": ECHO_HANDLER, "requirements.txt": unmet},
            "echo_handler.py", extra_requirements="requirements.txt")
    archive(store, "met", {"echo_handler.py": ECHO_HANDLER, "requirements.txt": met},
            "echo_handler.py", extra_requirements="requirements.txt")
    server = ServerProcess(store, *TORCHSERVE_FLAGS, "--strict-readiness", "false",
                           interpreters=1)
    try:
        assert call(server, "/predictions/met", b"x")[0] == 200
        status, _, body = call(server, "/predictions/unmet", b"x")
        assert status == 503, body
        log = server.log_text()
        assert "requirements.txt asks for what chorus' interpreters lack: " \
               "no-such-package-for-chorus==1.0 (not installed)" in log, log
        assert "torch>=1.0" not in log.split("lack: ")[1].split("\n")[0]
    finally:
        assert server.stop() == 0


def test_the_metrics_api_counts_each_model_requests_as_torchserve_names_them(server):
    def metrics(query=""):
        connection = http.client.HTTPConnection("127.0.0.1", server.torchserve_metrics_port,
                                                timeout=60)
        connection.request("GET", "/metrics" + query)
        return connection.getresponse().read().decode()

    def requests_total(text, model):
        for line in text.splitlines():
            if line.startswith(f'ts_inference_requests_total{{model_name="{model}",'):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(text)

    before = requests_total(metrics(), "two_workers")
    for _ in range(3):
        assert call(server, "/predictions/two_workers", b"x")[0] == 200
    text = metrics()
    assert requests_total(text, "two_workers") == before + 3
    assert "# TYPE ts_inference_latency_microseconds counter" in text
    assert "# TYPE ts_queue_latency_microseconds counter" in text
    only = metrics("?name[]=ts_queue_latency_microseconds")
    assert "ts_queue_latency_microseconds{" in only and "ts_inference_requests_total" not in only


def test_a_model_asking_for_more_workers_than_chorus_runs_is_refused_naming_why(tmp_path):
    store = str(tmp_path / "store")
    echo_archive(store, "greedy", config="minWorkers: 1000\n")
    server = ServerProcess(store, "--models", "greedy.mar", "--torchserve-inference-port", "0",
                           interpreters=1)
    try:
        status, _, body = call(server, "/predictions/greedy", b"x")
        error = json.loads(body)
        assert status == 503 and "1000 workers" in error["message"], error
    finally:
        assert server.stop() == 0
