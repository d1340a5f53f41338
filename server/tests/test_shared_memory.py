"""Triton's system shared memory extension with Triton's own clients: regions registered
over gRPC and HTTP (tritonclient.utils.shared_memory makes them), inputs read from them and
outputs written into them, every bad reference refused by name, and perf_analyzer's
`--shared-memory system` mode against chorus unmodified."""

import os
import subprocess

import numpy as np
import pytest

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
import tritonclient.utils.shared_memory as shm
from test_perf_analyzer import perf_analyzer  # noqa: F401 - a fixture
from tritonclient.utils import InferenceServerException


def key(name):
    """A shared memory key of this test process's own (runs on one host never clash)."""
    return f"/chorus_test_{os.getpid()}_{name}"


@pytest.fixture
def regions():
    """Creates shared memory regions; destroys them (and their keys) afterwards."""
    made = []

    def create(name, key, byte_size):
        handle = shm.create_shared_memory_region(name, key, byte_size)
        made.append(handle)
        return handle

    yield create
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def clients(server):
    return ((triton_grpc, triton_grpc.InferenceServerClient(server.address)),
            (triton_http, triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")))


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_inputs_and_outputs_travel_through_registered_regions(server, regions, transport):
    (module, client) = dict(zip(("grpc", "http"), clients(server)))[transport]
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    expected = client.infer("mlp", [infer_input(module, x)]).as_numpy(mlp_output(client))
    inputs = regions(f"in_{transport}", key(f"in_{transport}"), 64 + x.nbytes)
    outputs = regions(f"out_{transport}", key(f"out_{transport}"), 256)
    shm.set_shared_memory_region(inputs, [x], offset=64)
    client.register_system_shared_memory(f"in_{transport}", key(f"in_{transport}"), 64 + x.nbytes)
    client.register_system_shared_memory(f"out_{transport}", key(f"out_{transport}"), 256)
    tensor = module.InferInput("x", list(x.shape), "FP32")
    tensor.set_shared_memory(f"in_{transport}", x.nbytes, offset=64)
    requested = module.InferRequestedOutput(mlp_output(client))
    requested.set_shared_memory(f"out_{transport}", 256)
    result = client.infer("mlp", [tensor], outputs=[requested])
    output = result.get_output(mlp_output(client))
    shape = list(output.shape) if transport == "grpc" else output["shape"]
    assert shape == [5, 3]
    got = shm.get_contents_as_numpy(outputs, np.float32, shape)
    np.testing.assert_array_equal(got, expected)
    status = client.get_system_shared_memory_status()
    names = ([r.name for r in status.regions.values()] if transport == "grpc"
             else [r["name"] for r in status])
    assert {f"in_{transport}", f"out_{transport}"} <= set(names)
    client.unregister_system_shared_memory(f"in_{transport}")
    client.unregister_system_shared_memory(f"out_{transport}")
    client.close()


def mlp_output(client):
    metadata = client.get_model_metadata("mlp")
    if isinstance(metadata, dict):  # tritonclient.http
        return metadata["outputs"][0]["name"]
    return metadata.outputs[0].name


def infer_input(module, x):
    tensor = module.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


def test_every_bad_region_reference_is_refused_by_name(server, regions):
    (_, grpc_client), (_, http_client) = clients(server)
    regions("small", key("small"), 16)
    grpc_client.register_system_shared_memory("small", key("small"), 16)
    with pytest.raises(InferenceServerException, match='"small" is already registered'):
        grpc_client.register_system_shared_memory("small", key("small"), 16)
    with pytest.raises(InferenceServerException, match="cannot open the shared memory object"):
        http_client.register_system_shared_memory("ghost", key("no_such_key"), 16)
    with pytest.raises(InferenceServerException, match="the object holds 16 bytes"):
        grpc_client.register_system_shared_memory("big", key("small"), 4096)
    for client, module in ((grpc_client, triton_grpc), (http_client, triton_http)):
        tensor = module.InferInput("x", [2, 4], "FP32")
        tensor.set_shared_memory("small", 32)
        with pytest.raises(InferenceServerException, match="32 at offset 0 are out of its bounds"):
            client.infer("mlp", [tensor])
        tensor.set_shared_memory("nowhere", 32)
        with pytest.raises(InferenceServerException,
                           match='no shared memory region "nowhere" is registered'):
            client.infer("mlp", [tensor])
        x = np.ones((2, 4), np.float32)
        output_name = mlp_output(client)
        requested = module.InferRequestedOutput(output_name)
        requested.set_shared_memory("small", 16)
        with pytest.raises(InferenceServerException, match="24 bytes do not fit the 16 bytes"):
            client.infer("mlp", [infer_input(module, x)], outputs=[requested])
    # CUDA shared memory: none here, as a CPU-only Triton (test_triton_surface.py).
    assert len(grpc_client.get_cuda_shared_memory_status().regions) == 0
    grpc_client.unregister_system_shared_memory()  # all
    assert len(grpc_client.get_system_shared_memory_status().regions) == 0
    grpc_client.close()
    http_client.close()


def test_perf_analyzer_with_system_shared_memory(server, perf_analyzer, tmp_path):  # noqa: F811
    done = subprocess.run(
        [perf_analyzer, "-m", "mlp", "-i", "grpc", "-u", server.address, "-b", "2",
         "--shared-memory", "system", "--output-shared-memory-size", "1024", "-p", "500",
         "--concurrency-range", "2", "--max-trials", "6", "--stability-percentage", "50"],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Inferences/Second vs. Client" in done.stdout
    client = triton_grpc.InferenceServerClient(server.address)
    assert len(client.get_system_shared_memory_status().regions) == 0  # it unregistered
    client.close()
