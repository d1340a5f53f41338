"""Readiness that tells the truth: strict by default (Triton's), over gRPC and HTTP."""

import json
import urllib.error
import urllib.request

import pytest
import torch

import servable_models
from chorus.client import ClientError
from conftest import ServerProcess, package


@pytest.fixture
def half_broken_repository(tmp_path):
    repo = tmp_path / "repository"
    (repo / "good" / "1").mkdir(parents=True)
    package(repo / "good" / "1" / "model.pt", servable_models.Scale(2.0), torch.zeros(1, 4),
            "good", batchable=False)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.pt").write_bytes(b"not a zip archive")
    return repo


def http_health(server, what):
    """(status, JSON body) of GET /v2/health/<what> on the metrics port."""
    url = f"http://127.0.0.1:{server.metrics_port}/v2/health/{what}"
    try:
        with urllib.request.urlopen(url) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_model_that_failed_to_load_makes_the_server_not_ready_by_default(
        half_broken_repository):
    server = ServerProcess(half_broken_repository, "--no-supervisor", interpreters=1)
    try:
        with server.client() as client:
            assert client.live()
            assert not client.ready()
            assert client.ready("good") and not client.ready("broken")
            # A failed load through the RPC is logged like one at start-up.
            with pytest.raises(ClientError) as refused:
                client.load("broken")
            # Clients learn where in the repository, not where on the server's disks.
            root = str(half_broken_repository)
            assert "broken/1/model.pt" in str(refused.value)
            assert root not in str(refused.value), refused.value
            with pytest.raises(ClientError) as unavailable:
                client.infer("broken", {"x": torch.zeros(1, 4).numpy()})
            assert "Request for unknown model: 'broken' has no available versions: it failed " \
                "to load: " in str(unavailable.value)
            assert root not in str(unavailable.value), unavailable.value
        assert http_health(server, "live") == (200, {"live": True})
        assert http_health(server, "ready") == (503, {"ready": False})
        log = server.log_text()
        assert log.count("model broken not loaded: ") == 2, log
        assert log.count(root + "/broken/1/model.pt") >= 1, log  # the log keeps the path
    finally:
        assert server.stop() == 0


def test_without_strict_readiness_a_serving_server_is_ready(half_broken_repository):
    server = ServerProcess(half_broken_repository, "--no-supervisor", "--strict-readiness",
                           "false", interpreters=1)
    try:
        with server.client() as client:
            assert client.ready()
        assert http_health(server, "ready") == (200, {"ready": True})
    finally:
        assert server.stop() == 0


def test_a_repaired_model_loaded_through_the_rpc_makes_the_server_ready(half_broken_repository):
    server = ServerProcess(half_broken_repository, "--no-supervisor", interpreters=1)
    try:
        with server.client() as client:
            assert not client.ready()
            package(half_broken_repository / "broken" / "1" / "model.pt",
                    servable_models.Scale(3.0), torch.zeros(1, 4), "broken", batchable=False)
            client.load("broken")
            assert client.ready()
        assert http_health(server, "ready") == (200, {"ready": True})
    finally:
        assert server.stop() == 0
