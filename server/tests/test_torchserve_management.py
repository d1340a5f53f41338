"""TorchServe's management API on chorus-server: list, describe, register, scale and
unregister the archives of a model store, answered with TorchServe's codes and JSON."""

import http.client
import json
import socket

import pytest
from conftest import ServerProcess, wait_until
from test_torchserve_api import call, workers_seen
from torchserve_archives import echo_archive

FLAGS = ("--torchserve-inference-port", "0", "--torchserve-management-port", "0",
         "--enable-model-api")


def manage(server, method, path, body=None):
    """(status, parsed JSON body) of one management call; `body` goes as JSON."""
    connection = http.client.HTTPConnection("127.0.0.1", server.torchserve_management_port,
                                            timeout=120)
    try:
        if body is None:
            connection.request(method, path)
        else:
            connection.request(method, path, body=json.dumps(body),
                               headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("management") / "store")
    echo_archive(store, "startup")
    echo_archive(store, "later")
    echo_archive(store, "other")
    started = ServerProcess(store, "--models", "startup.mar", *FLAGS)
    yield started
    assert started.stop() == 0


def test_the_models_registered_at_start_are_listed_and_described(server):
    assert manage(server, "GET", "/models") == (200, {"models": [
        {"modelName": "startup", "modelUrl": "startup.mar"}]})
    status, (described,) = manage(server, "GET", "/models/startup")
    assert status == 200
    assert {key: described[key] for key in ("modelName", "modelVersion", "modelUrl", "runtime",
                                            "minWorkers", "batchSize", "loadedAtStartup")} == {
        "modelName": "startup", "modelVersion": "1.0", "modelUrl": "startup.mar",
        "runtime": "python", "minWorkers": 2, "batchSize": 1, "loadedAtStartup": True}
    assert [worker["status"] for worker in described["workers"]] == ["READY", "READY"]


def test_register_scale_and_unregister_a_model_of_the_store(server):
    assert call(server, "/predictions/later", b"x")[0] == 404
    status, answer = manage(server, "POST", "/models?url=later.mar&initial_workers=1"
                                            "&synchronous=true")
    assert (status, answer) == (200, {"status": 'Model "later" Version: 1.0 registered with 1 '
                                                'initial workers'})
    assert call(server, "/predictions/later", b"x")[0] == 200
    assert workers_seen(server, "later") == 1
    # Scaled synchronously to 3 workers: three handler objects answer.
    status, answer = manage(server, "PUT", "/models/later?min_worker=3&synchronous=true")
    assert (status, answer) == (200, {"status": "Workers scaled to 3 for model: later"})
    assert manage(server, "GET", "/models/later")[1][0]["minWorkers"] == 3
    assert workers_seen(server, "later") == 3
    status, answer = manage(server, "DELETE", "/models/later")
    assert (status, answer) == (200, {"status": 'Model "later" unregistered'})
    assert call(server, "/predictions/later", b"x")[0] == 404
    assert [m["modelName"] for m in manage(server, "GET", "/models")[1]["models"]] == ["startup"]


def test_a_registration_with_batching_and_no_workers(server):
    status, answer = manage(server, "POST", "/models?url=other.mar&model_name=renamed"
                                            "&batch_size=4&max_batch_delay=50")
    assert status == 200
    assert answer["status"] == ('Model "renamed" Version: 1.0 registered with 0 initial workers. '
                                'Use scale workers API to add workers for the model.')
    # Registered, not serving, until workers are added (asynchronously: 202).
    assert call(server, "/predictions/renamed", b"x")[0] == 404
    assert manage(server, "PUT", "/models/renamed?min_worker=1") == (
        202, {"status": "Processing worker updates..."})
    wait_until(lambda: call(server, "/predictions/renamed", b"x")[0] == 200,
               why=lambda: "the scaled model never served")
    assert manage(server, "DELETE", "/models/renamed")[0] == 200


def test_a_registration_may_give_its_parameters_as_a_json_body(server):
    status, answer = manage(server, "POST", "/models", {
        "url": "other.mar", "model_name": "from_json", "initial_workers": 2,
        "batch_size": 2, "max_batch_delay": 30, "synchronous": True})
    assert (status, answer) == (200, {"status": 'Model "from_json" Version: 1.0 registered '
                                                'with 2 initial workers'})
    (described,) = manage(server, "GET", "/models/from_json")[1]
    assert (described["minWorkers"], described["batchSize"], described["maxBatchDelay"]) == \
        (2, 2, 30)
    assert manage(server, "DELETE", "/models/from_json")[0] == 200
    status, answer = manage(server, "POST", "/models", ["not", "an", "object"])
    assert status == 400 and "not a JSON object" in answer["message"], answer


def test_management_errors_are_torchserve_json(server):
    status, answer = manage(server, "GET", "/models/nothing")
    assert (status, answer) == (404, {"code": 404, "type": "ModelNotFoundException",
                                      "message": "Model not found: nothing"})
    status, answer = manage(server, "POST", "/models?url=startup.mar")
    assert (status, answer["type"]) == (409, "ConflictStatusException")
    assert answer["message"] == "Model version 1.0 is already registered for model startup"
    status, answer = manage(server, "POST", "/models?url=missing.mar")
    assert status == 404 and "missing.mar" in answer["message"]
    status, answer = manage(server, "POST", "/models")
    assert (status, answer["message"]) == (400, "Parameter url is required.")
    status, answer = manage(server, "PUT", "/models/startup?min_worker=lots")
    assert (status, answer["message"]) == (400, "Invalid min_worker: lots")


def test_without_the_model_api_registering_and_unregistering_are_refused(tmp_path):
    store = str(tmp_path / "store")
    echo_archive(store, "startup")
    echo_archive(store, "later")
    server = ServerProcess(store, "--models", "startup.mar", "--torchserve-inference-port", "0",
                           "--torchserve-management-port", "0", interpreters=1)
    try:
        disabled = (400, {"code": 400, "type": "ModelException", "message": "Model API disabled"})
        assert manage(server, "POST", "/models?url=later.mar&initial_workers=1") == disabled
        assert manage(server, "DELETE", "/models/startup") == disabled
        # Listing, describing and scaling stay, as in TorchServe.
        assert manage(server, "GET", "/models")[0] == 200
        assert manage(server, "PUT", "/models/startup?min_worker=1&synchronous=true")[0] == 200
        assert call(server, "/predictions/startup", b"x")[0] == 200
    finally:
        assert server.stop() == 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_kserves_torchserve_runtime_config_serves_both_apis_on_one_address(tmp_path,
                                                                          monkeypatch):
    """KServe's TorchServe runtime: `torchserve --start --ts-config config.properties`,
    inference and management on one address, the models from load_models."""
    store = tmp_path / "model-store"
    echo_archive(str(store), "mnist")
    port = free_port()
    config = tmp_path / "config.properties"
    config.write_text(f"inference_address=http://127.0.0.1:{port}\n"
                      f"management_address=http://127.0.0.1:{port}\n"
                      "enable_metrics_api=false\n"
                      f"model_store={store}\n"
                      "load_models=mnist.mar\n"
                      "number_of_netty_threads=4\n"
                      "enable_envvars_config=true\n")
    # enable_envvars_config: TorchServe's TS_<KEY> variables set keys over the file.
    monkeypatch.setenv("TS_DEFAULT_WORKERS_PER_MODEL", "2")
    server = ServerProcess(str(store), "--start", "--ts-config", str(config), "--ncs",
                           "--foreground", "--disable-token-auth", interpreters=1)
    try:
        assert server.torchserve_port == port == server.torchserve_management_port
        assert server.torchserve_metrics_port == -1
        assert call(server, "/predictions/mnist", b"x")[0] == 200
        assert manage(server, "GET", "/models") == (200, {"models": [
            {"modelName": "mnist", "modelUrl": "mnist.mar"}]})
        status, (described,) = manage(server, "GET", "/models/mnist")
        assert status == 200 and described["minWorkers"] == 2, described
        assert len(described["workers"]) == 2, described
        assert "keys chorus does not use, ignored: number_of_netty_threads" in server.log_text()
    finally:
        assert server.stop() == 0


def test_a_model_snapshot_serves_its_models_with_their_settings(tmp_path):
    # KServe's TorchServe runtime declares its models in model_snapshot, without
    # load_models; the archive's model-config.yaml would win over these settings.
    store = tmp_path / "model-store"
    echo_archive(str(store), "mnist")
    port = free_port()
    snapshot = json.dumps({"name": "startup.cfg", "modelCount": 1, "models": {"mnist": {"1.0": {
        "defaultVersion": True, "marName": "mnist.mar", "minWorkers": 2, "maxWorkers": 5,
        "batchSize": 4, "maxBatchDelay": 50, "responseTimeout": 120}}}})
    config = tmp_path / "config.properties"
    config.write_text(f"inference_address=http://127.0.0.1:{port}\n"
                      f"management_address=http://127.0.0.1:{port}\n"
                      f"model_store={store}\n"
                      f"model_snapshot={snapshot}\n")
    server = ServerProcess(str(store), "--ts-config", str(config), interpreters=1)
    try:
        status, (described,) = manage(server, "GET", "/models/mnist")
        assert status == 200, described
        assert (described["minWorkers"], described["batchSize"], described["maxBatchDelay"]) == \
            (2, 4, 50), described
        assert len(described["workers"]) == 2
        status, _, body = call(server, "/predictions/mnist", b"x")
        assert status == 200 and json.loads(body)["batch"] == 1, body
    finally:
        assert server.stop() == 0
