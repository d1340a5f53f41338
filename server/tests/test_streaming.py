"""ModelStreamInfer with Triton's gRPC client (tritonclient): decoupled models (a Python
generator: zero or more responses per request) stream their responses in order with
Triton's final-response flag, errors arrive in-stream and the stream goes on, a client
that goes away stops its generators, and ordinary models answer once, flagged final."""

import queue
import time

import numpy as np
import pytest
import torch

import servable_models
import tritonclient.grpc as triton_grpc
from chorus.package import create_package
from conftest import ServerProcess
from tritonclient.utils import InferenceServerException

DECOUPLED = '{"decoupled": true}'


@pytest.fixture(scope="module")
def stream_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("streaming") / "repository"
    models = {
        "countdown": (servable_models.Countdown(), (torch.zeros(1, 4), torch.tensor([2]))),
        "fails_midway": (servable_models.FailsMidway(), (torch.zeros(1, 4),)),
        "endless": (servable_models.Endless(), (torch.zeros(1, 4),)),
        "mlp": (servable_models.TwoLayer(), (torch.zeros(1, 4),)),
    }
    for name, (model, example) in models.items():
        (repo / name / "1").mkdir(parents=True)
        create_package(str(repo / name / "1" / "model.pt"), model, example, name=name,
                       progress=False, batchable=False)
        if name != "mlp":
            (repo / name / "config.json").write_text(DECOUPLED)
    process = ServerProcess(repo, interpreters=2)
    yield process
    assert process.stop() == 0


class Stream:
    """A tritonclient stream whose callback's results are read in order."""

    def __init__(self, server):
        self.client = triton_grpc.InferenceServerClient(server.address)
        self.results = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, model, request_id, **inputs):
        tensors = []
        for name, value in inputs.items():
            tensor = triton_grpc.InferInput(name, list(value.shape),
                                            "FP32" if value.dtype == np.float32 else "INT64")
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        self.client.async_stream_infer(model, tensors, request_id=request_id,
                                       enable_empty_final_response=True)

    def next(self, timeout=30):
        return self.results.get(timeout=timeout)

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def final(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def test_a_generator_streams_its_responses_in_order_then_a_final_flag(stream_server):
    stream = Stream(stream_server)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    stream.send("countdown", "a", x=x, n=np.array([3], np.int64))
    got = []
    while True:
        result, error = stream.next()
        assert error is None, error
        assert result.get_response().id == "a"
        if final(result):
            assert not result.get_response().outputs  # the empty final response
            break
        (output,) = [o.name for o in result.get_response().outputs]
        got.append(result.as_numpy(output))
    assert [g.tolist() for g in got] == [(x + i).tolist() for i in range(3)]
    # Zero responses is a valid answer: only the final flag comes.
    stream.send("countdown", "none", x=x, n=np.array([0], np.int64))
    result, error = stream.next()
    assert error is None and final(result) and result.get_response().id == "none"
    stream.close()


def test_errors_arrive_in_stream_and_the_stream_goes_on(stream_server):
    stream = Stream(stream_server)
    x = np.ones((1, 4), np.float32)
    stream.send("fails_midway", "f", x=x)
    values = [stream.next() for _ in range(3)]
    assert [r.as_numpy(r.get_response().outputs[0].name).tolist() for r, _ in values[:2]] == \
        [x.tolist(), (2 * x).tolist()]
    _, error = values[2]
    assert isinstance(error, InferenceServerException)
    assert "stopped after two responses" in error.message() and "Traceback" not in error.message()
    stream.send("no_such_model", "u", x=x)
    _, error = stream.next()
    assert "no_such_model" in error.message()
    stream.send("countdown", "after", x=x, n=np.array([1], np.int64))
    result, error = stream.next()
    assert error is None and result.get_response().id == "after" and not final(result)
    assert final(stream.next()[0])
    stream.close()


def test_an_ordinary_model_answers_once_flagged_final(stream_server):
    stream = Stream(stream_server)
    x = np.random.default_rng(5).standard_normal((1, 4)).astype(np.float32)
    stream.send("mlp", "m", x=x)
    result, error = stream.next()
    assert error is None and final(result)
    with torch.no_grad():
        expected = servable_models.TwoLayer()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(result.as_numpy(result.get_response().outputs[0].name), expected,
                               rtol=0, atol=1e-6)
    stream.close()


def test_a_client_that_goes_away_stops_its_generators(stream_server):
    # Both interpreters busy with endless generators; closing the streams must free them.
    streams = [Stream(stream_server) for _ in range(2)]
    for i, stream in enumerate(streams):
        stream.send("endless", f"e{i}", x=np.zeros((1, 4), np.float32))
    for stream in streams:
        first, error = stream.next()
        assert error is None and not final(first)
    for stream in streams:
        stream.close(cancel=True)
    started = time.monotonic()
    stream = Stream(stream_server)
    stream.send("countdown", "c", x=np.zeros((1, 4), np.float32), n=np.array([1], np.int64))
    result, error = stream.next(timeout=20)
    assert error is None and result.get_response().id == "c"
    assert time.monotonic() - started < 20
    stream.close()


def test_decoupled_models_announce_it_and_refuse_unary_calls(stream_server):
    client = triton_grpc.InferenceServerClient(stream_server.address)
    config = client.get_model_config("countdown", as_json=True)["config"]
    assert config["model_transaction_policy"] == {"decoupled": True}
    x = triton_grpc.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("fails_midway", [x])
    assert "ModelStreamInfer" in refused.value.message()
    client.close()
