"""Triton's ensembles with Triton's clients: a request runs through three models in one
call (tensors passed in process), equal to calling them in turn; the ensemble shows in the
model config as Triton's `ensemble_scheduling`; its steps count in their models'
statistics; a failing step fails the request naming it; an ensemble that maps a tensor
nobody makes, or is otherwise wrong, does not load and says why."""

import json

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import ServerProcess, package


def step(model, inputs, outputs):
    return {"model_name": model, "model_version": -1, "input_map": inputs, "output_map": outputs}


def ensemble_config(steps, outputs=(("PROBS", "FP32", [3]),)):
    return {"platform": "ensemble", "max_batch_size": 8,
            "inputs": [{"name": "INPUT", "datatype": "FP32", "dims": [4]}],
            "outputs": [{"name": n, "datatype": t, "dims": d} for n, t, d in outputs],
            "ensemble_scheduling": {"step": steps}}


GOOD_STEPS = [step("scale", {"x": "INPUT"}, {"output": "SCALED"}),
              step("twolayer", {"x": "SCALED"}, {"output": "logits"}),
              step("softmax", {"x": "logits"}, {"output": "PROBS"})]

BROKEN = {
    "missing_tensor": [GOOD_STEPS[0], step("twolayer", {"x": "nowhere"}, {"output": "logits"}),
                       GOOD_STEPS[2]],
    "missing_model": [step("absent", {"x": "INPUT"}, {"output": "PROBS"})],
    "unmapped_output": [step("scale", {"x": "INPUT"}, {"y": "PROBS"})],
    "wrong_dtype": [step("as_int", {"x": "INPUT"}, {"output": "rounded"}),
                    step("twolayer", {"x": "rounded"}, {"output": "PROBS"})],
    "cycle": [step("scale", {"x": "back"}, {"output": "forth"}),
              step("softmax", {"x": "forth"}, {"output": "back"}),
              step("twolayer", {"x": "INPUT"}, {"output": "PROBS"})],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ensembles") / "repository"
    models = {"scale": (servable_models.Scale(2.0), torch.zeros(1, 4)),
              "twolayer": (servable_models.TwoLayer(), torch.zeros(1, 4)),
              "softmax": (servable_models.Softmax(), torch.zeros(1, 3)),
              "raiser": (servable_models.Raiser(), torch.zeros(1, 4)),
              "as_int": (servable_models.AsInt(), torch.zeros(1, 4))}
    for name, (model, example) in models.items():
        (repo / name / "1").mkdir(parents=True)
        package(repo / name / "1" / "model.pt", model, example, name, output_names=["output"])
    configs = {"pipeline": ensemble_config(GOOD_STEPS, [("PROBS", "FP32", [3]),
                                                        ("SCALED", "FP32", [4])]),
               "failing": ensemble_config([step("raiser", {"x": "INPUT"}, {"output": "raised"}),
                                           step("twolayer", {"x": "raised"}, {"output": "l"}),
                                           step("softmax", {"x": "l"}, {"output": "PROBS"})])}
    configs.update({name: ensemble_config(steps) for name, steps in BROKEN.items()})
    for name, config in configs.items():
        (repo / name).mkdir()
        (repo / name / "config.json").write_text(json.dumps(config))
    process = ServerProcess(repo, "--strict-readiness", "false", interpreters=2)
    yield process
    assert process.stop() == 0


def in_turn(x):
    with torch.no_grad():
        scaled = servable_models.Scale(2.0)(torch.from_numpy(x))
        return servable_models.Softmax()(servable_models.TwoLayer()(scaled)).numpy(), scaled


def infer(module, client, model, x):
    tensor = module.InferInput("INPUT", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor])


def test_an_ensemble_equals_its_models_called_in_turn(server):
    grpc_client = triton_grpc.InferenceServerClient(server.address)
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    x = np.random.default_rng(7).standard_normal((5, 4)).astype(np.float32)
    expected, scaled = in_turn(x)
    for module, client in ((triton_grpc, grpc_client), (triton_http, http_client)):
        result = infer(module, client, "pipeline", x)
        np.testing.assert_array_equal(result.as_numpy("PROBS"), expected)
        np.testing.assert_array_equal(result.as_numpy("SCALED"), scaled.numpy())
        # The same, step by step through the client.
        by_hand = x
        for model in ("scale", "twolayer", "softmax"):
            tensor = module.InferInput("x", list(by_hand.shape), "FP32")
            tensor.set_data_from_numpy(by_hand)
            by_hand = client.infer(model, [tensor]).as_numpy("output")
        np.testing.assert_array_equal(result.as_numpy("PROBS"), by_hand)
    for name in ("scale", "twolayer", "softmax"):
        (stats,) = grpc_client.get_inference_statistics(name).model_stats
        assert stats.inference_stats.success.count == 4  # 2 ensemble runs + 2 by hand
    (stats,) = grpc_client.get_inference_statistics("pipeline").model_stats
    assert stats.inference_stats.success.count == 2 and stats.execution_count == 2
    assert stats.inference_count == 10
    grpc_client.close()
    http_client.close()


def test_the_ensemble_shows_as_triton_describes_it(server):
    grpc_client = triton_grpc.InferenceServerClient(server.address)
    http_client = triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    assert grpc_client.get_model_metadata("pipeline").platform == "ensemble"
    config = grpc_client.get_model_config("pipeline").config
    assert config.platform == "ensemble" and config.max_batch_size == 8
    steps = config.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["scale", "twolayer", "softmax"]
    assert dict(steps[1].input_map) == {"x": "SCALED"}
    assert dict(steps[1].output_map) == {"output": "logits"}
    assert steps[0].model_version == -1
    rest = http_client.get_model_config("pipeline")
    assert rest["ensemble_scheduling"]["step"][2]["output_map"] == {"output": "PROBS"}
    grpc_client.close()
    http_client.close()


def test_a_failing_step_fails_the_request_naming_it(server):
    client = triton_grpc.InferenceServerClient(server.address)
    with pytest.raises(triton_grpc.InferenceServerException) as error:
        infer(triton_grpc, client, "failing", np.ones((1, 4), np.float32))
    assert 'ensemble "failing" step 0 (model "raiser")' in error.value.message()
    assert "refusing a positive input" in error.value.message()
    # A negative input passes the raiser: the ensemble serves on.
    x = -np.ones((2, 4), np.float32)
    expected = servable_models.Softmax()(servable_models.TwoLayer()(torch.from_numpy(x)))
    np.testing.assert_allclose(infer(triton_grpc, client, "failing", x).as_numpy("PROBS"),
                               expected.detach().numpy(), rtol=1e-6, atol=1e-7)
    client.close()


@pytest.mark.parametrize("name, reason", [
    ("missing_tensor", 'step[1].input_map.x: tensor "nowhere" is neither an input of the '
                       "ensemble nor an output of a step"),
    ("missing_model", 'step[0]: model "absent" does not serve'),
    ("unmapped_output", 'step[0].output_map: model "scale" has no output "y" (its outputs: '
                        "output)"),
    ("wrong_dtype", 'step[1].input_map.x: tensor "rounded" is int64, input "x" of model '
                    '"twolayer" takes float32'),
    ("cycle", "step[0]: waits on its own outputs (the steps form a cycle)"),
])
def test_a_wrong_ensemble_does_not_load_and_says_why(server, name, reason):
    client = triton_grpc.InferenceServerClient(server.address)
    (entry,) = [m for m in client.get_model_repository_index().models if m.name == name]
    assert entry.state == "UNAVAILABLE"
    assert reason in entry.reason
    client.close()
