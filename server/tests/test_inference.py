"""The server on loopback, driven by a grpcio client generated from proto/."""

import os
import re
import subprocess
import threading
import zipfile
import json
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import torch
from torch.package import PackageImporter

from chorus.client import ClientError
from chorus.client.client import to_numpy
from chorus.health import health_pb2, health_pb2_grpc
from chorus.inference import grpc_service_pb2 as pb
from conftest import BIN_DIR, copy_model, rpc_code


def reference(model_path, x):
    """What the packaged model computes, by stock torch.package in this process."""
    with zipfile.ZipFile(model_path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".data/chorus/manifest.json"))
        entry = json.loads(archive.read(name))["entry_point"]
    model = PackageImporter(str(model_path)).load_pickle(entry["package"], entry["resource"])
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def test_health_liveness_readiness_and_metadata(server):
    with server.client() as client:
        assert client.live()
        assert client.ready()
        assert client.ready("mlp")
        assert not client.ready("no_such_model")
        meta = client.server_metadata()
        assert meta.name == "chorus" and "model_repository" in meta.extensions
        model = client.metadata("mlp")
        assert model.name == "mlp" and list(model.versions) == ["1"]
        assert model.platform == "pytorch_torch_package"
        assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
            ("x", "FP32", [-1, 4])]
        assert [(t.name, t.datatype, list(t.shape)) for t in model.outputs] == [
            ("output", "FP32", [-1, 3])]
    channel = grpc.insecure_channel(server.address)
    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert status.status == health_pb2.HealthCheckResponse.SERVING


def test_model_infer_is_numerically_correct(server, repository):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    with server.client() as client:
        outputs = client.infer("mlp", {"x": x})
    expected = reference(repository[0] / "mlp" / "1" / "model.pt", x)
    np.testing.assert_allclose(outputs["output"], expected, rtol=1e-6, atol=1e-6)


def test_typed_contents_work_too(server):
    request = pb.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[2, 4])
    tensor.contents.fp32_contents.extend([float(i) for i in range(8)])
    response = grpc.insecure_channel(server.address)
    from chorus.inference import grpc_service_pb2_grpc as pb_grpc
    answer = pb_grpc.GRPCInferenceServiceStub(response).ModelInfer(request)
    out = to_numpy(answer.outputs[0].datatype, answer.outputs[0].shape,
                   answer.raw_output_contents[0])
    np.testing.assert_array_equal(out, np.arange(8, dtype=np.float32).reshape(2, 4))


def _bad(name="mlp", datatype="FP32", shape=(1, 4), raw=None, typed=None, version="", drop=False):
    request = pb.ModelInferRequest(model_name=name, model_version=version)
    if not drop:
        tensor = request.inputs.add(name="x", datatype=datatype, shape=list(shape))
        if typed is not None:
            tensor.contents.fp32_contents.extend(typed)
    if raw is not None:
        request.raw_input_contents.append(raw)
    return request


BAD_REQUESTS = [
    ("unknown model", _bad(name="nope", raw=bytes(16)), grpc.StatusCode.NOT_FOUND,
     "Request for unknown model: 'nope' is not found"),
    ("unknown version", _bad(version="7", raw=bytes(16)), grpc.StatusCode.NOT_FOUND,
     "Request for unknown model: 'mlp' version 7 is not found"),
    ("wrong dtype", _bad(datatype="INT64", raw=bytes(32)), grpc.StatusCode.INVALID_ARGUMENT,
     "expected datatype FP32, got INT64"),
    ("wrong shape", _bad(shape=(1, 5), raw=bytes(20)), grpc.StatusCode.INVALID_ARGUMENT,
     "does not match the model's [-1, 4]"),
    ("missing input", _bad(drop=True), grpc.StatusCode.INVALID_ARGUMENT, "missing"),
    ("raw size mismatch", _bad(raw=bytes(15)), grpc.StatusCode.INVALID_ARGUMENT,
     "raw contents hold 15 bytes"),
    ("raw and typed", _bad(raw=bytes(16), typed=[1, 2, 3, 4]), grpc.StatusCode.INVALID_ARGUMENT,
     "contents field must not be specified when using raw_input_contents for 'x' for model "
     "'mlp'"),
    ("batch too large", _bad(shape=(65, 4), raw=bytes(65 * 16)), grpc.StatusCode.INVALID_ARGUMENT,
     "exceeds the model's maximum of 64"),
]


@pytest.mark.parametrize("case,request_,code,message", BAD_REQUESTS,
                         ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_get_the_right_code_and_the_next_request_succeeds(server, case, request_, code,
                                                                       message):
    with server.client() as client:
        with pytest.raises(ClientError) as error:
            client.infer_request(request_)
        assert error.value.code == code
        assert message in error.value.message
        good = client.infer("mlp", {"x": np.ones((1, 4), np.float32)})
        assert good["output"].shape == (1, 3)


def test_python_exception_is_internal_with_the_message_and_no_traceback(server):
    with server.client() as client:
        with pytest.raises(ClientError) as error:
            client.infer("raiser", {"x": np.ones((1, 4), np.float32)})
        assert error.value.code == grpc.StatusCode.INTERNAL
        assert "ValueError: refusing a positive input (sum 4.0)" in error.value.message
        assert "Traceback" not in error.value.message
        ok = client.infer("raiser", {"x": -np.ones((1, 4), np.float32)})
        np.testing.assert_array_equal(ok["x" if "x" in ok else "output"], -np.ones((1, 4)))
    assert "Traceback" in server.log_text()  # the traceback went to the log


def test_hanging_model_hits_the_deadline_and_the_interpreter_serves_again(server):
    with server.client() as client:
        with pytest.raises(ClientError) as error:
            client.infer("hanger", {"x": np.ones((1, 4), np.float32)}, timeout=1.0)
        assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        # Both interpreters answer again: the hang was interrupted, not abandoned.
        for _ in range(8):
            out = client.infer("hanger", {"x": np.zeros((1, 4), np.float32)}, timeout=10)
            np.testing.assert_array_equal(out["output"], np.ones((1, 4)))
            assert client.infer("mlp", {"x": np.ones((2, 4), np.float32)},
                                timeout=10)["output"].shape == (2, 3)


def _batch_histogram(metrics, model):
    count = float(re.search(rf'chorus_batch_size_count{{model="{model}",version="1"}} (\S+)',
                            metrics).group(1))
    total = float(re.search(rf'chorus_batch_size_sum{{model="{model}",version="1"}} (\S+)',
                            metrics).group(1))
    return count, total


def test_concurrent_single_requests_are_batched_and_equal_unbatched_runs(server):
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(32)]
    before = _batch_histogram(server.metrics(), "mlp")
    with server.client() as client, ThreadPoolExecutor(32) as pool:
        batched = list(pool.map(lambda x: client.infer("mlp", {"x": x})["output"], inputs))
    count, total = _batch_histogram(server.metrics(), "mlp")
    executions, samples = count - before[0], total - before[1]
    assert samples == 32
    assert executions < 32, "no request was batched"
    assert samples / executions > 1
    with server.client() as client:
        for x, got in zip(inputs, batched):
            alone = client.infer("mlp", {"x": x})["output"]
            np.testing.assert_allclose(got, alone, rtol=1e-5, atol=1e-6)


def test_second_model_loads_and_unloads_while_the_first_serves(server, repository):
    repo, spares = repository
    failures, done = [], threading.Event()

    def hammer():
        with server.client() as client:
            while not done.is_set():
                try:
                    client.infer("mlp", {"x": np.ones((1, 4), np.float32)}, timeout=30)
                except ClientError as e:  # pragma: no cover - reported below
                    failures.append(e)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        with server.client() as client:
            assert rpc_code(lambda: client.infer("scale", {"x": np.ones((1, 4), np.float32)})) == \
                grpc.StatusCode.NOT_FOUND
            copy_model(spares, repo, "scale")
            client.load("scale")
            assert client.ready("scale")
            out = client.infer("scale", {"x": np.full((1, 4), 2.0, np.float32)})
            np.testing.assert_array_equal(out["output"], np.full((1, 4), 6.0))
            states = {m.name: m.state for m in client.models()}
            assert states["scale"] == "READY" and states["mlp"] == "READY"
            client.unload("scale")
            assert not client.ready("scale")
            assert rpc_code(lambda: client.infer("scale", {"x": np.ones((1, 4), np.float32)})) == \
                grpc.StatusCode.NOT_FOUND
            assert rpc_code(lambda: client.load("no_such_model")) == grpc.StatusCode.NOT_FOUND
            for outside in ("../repository", ".hidden", "a/b", ""):  # never a path out
                assert rpc_code(lambda outside=outside: client.load(outside)) == \
                    grpc.StatusCode.INVALID_ARGUMENT
    finally:
        done.set()
        for t in threads:
            t.join()
    assert failures == []


def test_statistics_and_metrics(server):
    with server.client() as client:
        client.infer("identity", {"x": np.ones((1, 4), np.float32)})
        stats = client.statistics("identity").model_stats[0]
        assert stats.inference_stats.success.count >= 1
        assert stats.execution_count >= 1
        # Decoding and encoding are timed apart from the run, counted as runs are.
        infer = stats.inference_stats
        assert infer.compute_input.ns > 0 and infer.compute_output.ns > 0
        assert infer.compute_input.count == infer.compute_output.count == \
            infer.compute_infer.count
    metrics = server.metrics()
    for name in ("nv_inference_request_success", "nv_inference_request_failure",
                 "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_input_duration_us",
                 "nv_inference_compute_output_duration_us",
                 "chorus_batch_size_bucket", "chorus_interpreter_busy_seconds_total",
                 "nv_inference_pending_request_count"):
        assert name in metrics
    busy = [float(v) for v in
            re.findall(r"chorus_interpreter_busy_seconds_total\{[^}]*\} (\S+)", metrics)]
    assert len(busy) == 2 and sum(busy) > 0


def test_command_line_client(server, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    tool = os.path.join(BIN_DIR, "chorus-client")
    out = subprocess.run([tool, "--server", server.address, "infer", "identity", "--input",
                          f"x={tmp_path / 'x.npy'}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["data"] == [[1.0] * 4] * 2
    listing = subprocess.run([tool, "--server", server.address, "list"], capture_output=True,
                             text=True)
    assert "mlp" in listing.stdout and "READY" in listing.stdout
    missing = subprocess.run([tool, "--server", server.address, "metadata", "nope"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
