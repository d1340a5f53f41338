"""Device placement on a host without a GPU: a model configured for a GPU fails to load with
a clear reason and the others serve; a device list spreads replicas and batching is unchanged."""

import concurrent.futures

import numpy as np
import pytest
import torch

import servable_models
from conftest import ServerProcess, package

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="for a host without a GPU")


@pytest.fixture(scope="module")
def device_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("devices") / "repository"
    torch.manual_seed(0)
    model = servable_models.TwoLayer()

    def add(name, config=None, **kwargs):
        (repo / name / "1").mkdir(parents=True)
        package(repo / name / "1" / "model.pt", model, torch.randn(2, 4), name,
                max_batch_size=16, **kwargs)
        if config:
            (repo / name / "config.json").write_text(config)

    add("on_cpu")
    add("spread", '{"devices": ["cpu", "cpu"], "max_queue_delay_us": 20000}')
    add("on_gpu", '{"device": "cuda"}')
    add("on_gpu_1", '{"devices": ["cpu", "cuda:1"]}')
    add("packaged_for_gpu", device="cuda")
    add("packaged_for_gpu_served_on_cpu", '{"device": "cpu"}', device="cuda")
    add("not_a_device", '{"device": "gpu"}')
    add("both", '{"device": "cpu", "devices": ["cpu"]}')
    server = ServerProcess(repo, interpreters=2)
    yield server, model
    assert server.stop() == 0


def test_a_gpu_the_host_lacks_fails_the_load_and_the_others_serve(device_server):
    server, model = device_server
    with server.client() as client:
        index = {m.name: m for m in client.models()}
    reasons = {name: index[name].reason for name in
               ("on_gpu", "on_gpu_1", "packaged_for_gpu", "not_a_device", "both")}
    assert all(index[name].state == "UNAVAILABLE" for name in reasons), reasons
    for name in ("on_gpu", "packaged_for_gpu"):
        assert reasons[name].startswith("FAILED_PRECONDITION"), reasons[name]
        assert "device cuda:0: this host has no GPU" in reasons[name]
    assert "device cuda:1: this host has no GPU" in reasons["on_gpu_1"]
    assert reasons["not_a_device"].startswith("INVALID_ARGUMENT")
    assert '"gpu" is not a device' in reasons["not_a_device"]
    assert "devices: given with device" in reasons["both"]

    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    with server.client() as client:
        for name in ("on_cpu", "spread", "packaged_for_gpu_served_on_cpu"):
            assert index[name].state == "READY", index[name].reason
            np.testing.assert_allclose(client.infer(name, {"x": x})["output"], expected,
                                       rtol=1e-6, atol=1e-6)


def test_replicas_spread_over_a_device_list_batch_as_before(device_server):
    server, model = device_server
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(32)]
    before = batch_series(server)

    def call(x):
        with server.client() as client:
            return client.infer("spread", {"x": x})["output"]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        outputs = list(pool.map(call, inputs))
    with torch.no_grad():
        for x, y in zip(inputs, outputs):
            np.testing.assert_allclose(y, model(torch.from_numpy(x)).numpy(), rtol=1e-6,
                                       atol=1e-6)
    after = batch_series(server)
    # Every request went through the batcher (how many shared a batch depends on timing,
    # which this test does not assert).
    assert after["sum"] - before["sum"] == len(inputs)
    assert 1 <= after["count"] - before["count"] <= len(inputs)


def batch_series(server):
    """The spread model's chorus_batch_size _sum and _count (0 before its first batch)."""
    values = {"sum": 0.0, "count": 0.0}
    for line in server.metrics().splitlines():
        for key in values:
            if line.startswith(f'chorus_batch_size_{key}{{model="spread"'):
                values[key] = float(line.split()[-1])
    return values
