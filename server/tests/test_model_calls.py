"""In-process model calls (chorus.serving, Triton's business logic scripting without IPC):
a Python model calls two others and answers what calling them in turn answers; calls run
concurrently with infer_async and stream from a decoupled model with infer_stream; a cycle
of calls is refused naming it; a timeout inside the inner call is honoured; a wrong call
is a clear error naming the input; the inner calls count in their models' statistics."""

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from chorus import serving
from chorus.package import create_package


def stand_in(model):
    return lambda **inputs: {"output": model(*inputs.values())}


STAND_INS = {"scale": stand_in(servable_models.Scale(2.0)),
             "twolayer": stand_in(servable_models.TwoLayer()),
             "sleeper": stand_in(lambda x: x * 2), "pong": stand_in(lambda x: x),
             "countdown": lambda x, n: {"output": x}, "napper": stand_in(lambda x: x)}


@pytest.fixture(scope="module", params=[2, 1], ids=["2_interpreters", "1_interpreter"])
def server(tmp_path_factory, request):
    """With one interpreter, a call runs in the caller's own interpreter."""
    from conftest import ServerProcess
    repo = tmp_path_factory.mktemp("model_calls") / "repository"
    x = torch.zeros(1, 4)
    models = {"scale": (servable_models.Scale(2.0), (x,)),
              "twolayer": (servable_models.TwoLayer(), (x,)),
              "sleeper": (servable_models.Dawdler(), (x,)),
              "countdown": (servable_models.Countdown(), (x, torch.tensor([2]))),
              "calls_two": (servable_models.CallsTwo(), (x,)),
              "calls_two_at_once": (servable_models.CallsTwoAtOnce(), (x,)),
              "ping": (servable_models.CallsNamed("pong"), (x,)),
              "pong": (servable_models.CallsNamed("ping"), (x,)),
              "impatient": (servable_models.Impatient(), (x,)),
              "collects_stream": (servable_models.CollectsStream(), (x,)),
              "asks_wrongly": (servable_models.AsksWrongly(), (x,)),
              "napper": (servable_models.Sleeper(1.5), (x,)),
              "naps_twice": (servable_models.NapsTwiceAtOnce(), (x,))}
    with serving.stand_ins({**STAND_INS, "ping": stand_in(lambda x: x),
                            "scale": lambda **inputs: {"output": inputs.get("x", x)}}):
        for name, (model, example) in models.items():
            (repo / name / "1").mkdir(parents=True)
            names = ["output", "logits"] if name == "calls_two_at_once" else ["output"]
            create_package(str(repo / name / "1" / "model.pt"), model, example, name=name,
                           progress=False, batchable=False, output_names=names,
                           dynamic_axes={"x": [0], "output": [0]})
    (repo / "countdown" / "config.json").write_text('{"decoupled": true}')
    process = ServerProcess(repo, interpreters=request.param)
    yield process
    assert process.stop() == 0


def infer_input(x, module=triton_grpc):
    tensor = module.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


def infer(client, model, x, module=triton_grpc):
    return client.infer(model, [infer_input(x, module)])


def test_a_model_calling_two_others_equals_calling_them_in_turn(server):
    grpc_client = triton_grpc.InferenceServerClient(server.address)
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    scaled = infer(grpc_client, "scale", x).as_numpy("output")
    in_turn = infer(grpc_client, "twolayer", scaled).as_numpy("output")
    for module, client in ((triton_grpc, grpc_client), (triton_http, http_client)):
        np.testing.assert_array_equal(
            infer(client, "calls_two", x, module).as_numpy("output"), in_turn)
    with torch.no_grad():
        expected = servable_models.TwoLayer()(torch.from_numpy(x) * 2).numpy()
    np.testing.assert_allclose(in_turn, expected, rtol=1e-6, atol=1e-6)
    (stats,) = grpc_client.get_inference_statistics("twolayer").model_stats
    assert stats.inference_stats.success.count == 3  # 1 direct + 2 in-process calls
    at_once = infer(grpc_client, "calls_two_at_once", x)
    np.testing.assert_array_equal(at_once.as_numpy("output"), scaled)
    np.testing.assert_array_equal(at_once.as_numpy("logits"),
                                  infer(grpc_client, "twolayer", x).as_numpy("output"))
    grpc_client.close()
    http_client.close()


def test_async_calls_gathered_run_at_once(server):
    client = triton_grpc.InferenceServerClient(server.address)
    workers = client.get_model_config("napper").config.instance_group[0].count
    took = float(infer(client, "naps_twice", np.ones((1, 4), np.float32)).as_numpy("output")[0, 0])
    if workers >= 2:
        assert 1.5 <= took < 2.7  # both naps at once, not one after the other (3 s)
    else:
        assert took >= 3.0  # one worker: one after the other
    client.close()


def test_a_stream_from_a_decoupled_model_arrives_response_by_response(server):
    client = triton_grpc.InferenceServerClient(server.address)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    stacked = infer(client, "collects_stream", x).as_numpy("output")
    np.testing.assert_array_equal(stacked, np.stack([x, x + 1, x + 2]))
    client.close()


def test_a_cycle_of_calls_is_refused_naming_it(server):
    client = triton_grpc.InferenceServerClient(server.address)
    with pytest.raises(triton_grpc.InferenceServerException) as error:
        infer(client, "ping", np.ones((1, 4), np.float32))
    assert "model call cycle: ping -> pong -> ping" in error.value.message()
    client.close()


def test_a_timeout_inside_the_inner_call_is_honoured(server):
    client = triton_grpc.InferenceServerClient(server.address)
    waited, late = infer(client, "impatient", np.ones((1, 4), np.float32)).as_numpy("output")[0]
    assert late == 1.0  # DEADLINE_EXCEEDED reached the calling model
    assert 0.15 < waited < 2.5  # not the sleeper's 3 s
    # Two at once: each call's deadline ends it, whether it runs or waits for the sleeper.
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}",
                                                    concurrency=2)
    x = infer_input(np.ones((1, 4), np.float32), triton_http)
    calls = [http_client.async_infer("impatient", [x]) for _ in range(2)]
    for call in calls:
        waited, late = call.get_result().as_numpy("output")[0]
        assert late == 1.0 and 0.15 < waited < 2.5
    http_client.close()
    client.close()


def test_a_wrong_call_names_the_input(server):
    client = triton_grpc.InferenceServerClient(server.address)
    with pytest.raises(triton_grpc.InferenceServerException) as error:
        infer(client, "asks_wrongly", np.ones((1, 4), np.float32))
    assert 'model "scale": input "y": the model has no such input' in error.value.message()
    client.close()


def test_outside_a_server_only_stand_ins_answer():
    x = torch.ones(2, 4)
    with pytest.raises(serving.ModelCallError) as error:
        servable_models.CallsTwo()(x)
    assert error.value.code == "UNAVAILABLE"
    with serving.stand_ins(STAND_INS):
        np.testing.assert_array_equal(servable_models.CallsTwo()(x).detach().numpy(),
                                      servable_models.TwoLayer()(x * 2).detach().numpy())
