"""TorchServe's models as KServe's TorchServe runtime serves them: service_envelope
(config.properties, or TS_SERVICE_ENVELOPE under enable_envvars_config) puts every
handler in TorchServe's KServe envelope, and the inference API takes KServe's v1 and v2
paths (/v1/models/{m}:predict, /v2/models/{m}/infer), which the runtime's wrapper
forwards to TorchServe; the management API answers v1's readiness."""

import http.client
import json

from conftest import ServerProcess
from test_torchserve_management import free_port
from torchserve_archives import archive

# Sums each instance (v1: a list of numbers) or each input's data (v2: nested lists).
SUMMING_HANDLER = '''
def total(value):
    return sum(total(v) for v in value) if isinstance(value, list) else value


def handle(data, context):
    if data is None:
        return None
    return [total(item["data"] if isinstance(item, dict) else item) for item in data]
'''


def post(port, path, body):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", path, body=json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def get(port, path):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def start(tmp_path, *lines):
    store = tmp_path / "model-store"
    archive(str(store), "summer", {"summer.py": SUMMING_HANDLER}, "summer.py")
    port = free_port()
    config = tmp_path / "config.properties"
    config.write_text("\n".join([f"inference_address=http://127.0.0.1:{port}",
                                 f"management_address=http://127.0.0.1:{port}",
                                 f"model_store={store}", "load_models=summer.mar",
                                 *lines]) + "\n")
    return ServerProcess(str(store), "--ts-config", str(config), interpreters=1), port


def test_kserve_v1_through_the_envelope(tmp_path):
    server, port = start(tmp_path, "service_envelope=kserve")
    try:
        assert get(port, "/v1/models/summer") == (200, {"name": "summer", "ready": True})
        status, answer = post(port, "/v1/models/summer:predict",
                              {"instances": [[1, 2], [3, 4.5]]})
        assert (status, answer) == (200, {"predictions": [3, 7.5]})
        status, answer = post(port, "/v1/models/nothing:predict", {"instances": [1]})
        assert status == 404 and answer["message"] == "Model not found: nothing", answer
    finally:
        assert server.stop() == 0


def test_kserve_v2_through_the_envelope_named_by_the_environment(tmp_path, monkeypatch):
    # KServe's runtime sets TS_SERVICE_ENVELOPE; config.properties enables the variables.
    monkeypatch.setenv("TS_SERVICE_ENVELOPE", "kservev2")
    server, port = start(tmp_path, "enable_envvars_config=true")
    try:
        status, answer = post(port, "/v2/models/summer/infer", {
            "id": "request-1",
            "inputs": [{"name": "in", "shape": [2, 2], "datatype": "FP32",
                        "data": [1, 2, 3, 4]}]})
        assert status == 200, answer
        assert (answer["id"], answer["model_name"], answer["model_version"]) == \
            ("request-1", "summer", "1.0")
        (output,) = answer["outputs"]
        assert (output["name"], output["data"], output["shape"]) == ("in", [10], [1]), output
    finally:
        assert server.stop() == 0


def test_an_unknown_envelope_is_refused_naming_the_key(tmp_path):
    config = tmp_path / "config.properties"
    config.write_text(f"model_store={tmp_path}\nservice_envelope=soap\n")
    import subprocess

    from conftest import BIN_DIR
    done = subprocess.run([f"{BIN_DIR}/chorus-server", "--ts-config", str(config),
                           "--no-supervisor"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "service_envelope" in done.stderr + done.stdout
