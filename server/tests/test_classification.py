"""What Triton's image_client does, against chorus: it reads the input's `format`
(FORMAT_NCHW / FORMAT_NHWC) from the model's config and asks for the top classes of
the output (the classification extension, tritonclient's class_count), labelled from
the output's label file; over gRPC and HTTP."""

import json

import numpy as np
import pytest
import torch

import servable_models

import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import ServerProcess, package
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

LABELS = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """(server, model): TinyClassifier served as "classifier" with a format and labels."""
    torch.manual_seed(0)
    model = servable_models.TinyClassifier().eval()
    repo = tmp_path_factory.mktemp("classification") / "repository"
    folder = repo / "classifier"
    (folder / "1").mkdir(parents=True)
    package(folder / "1" / "model.pt", model, torch.zeros(1, 3, 8, 8), "classifier",
            input_names=["image"], output_names=["logits"])
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (folder / "config.json").write_text(json.dumps({"tensors": {
        "image": {"format": "FORMAT_NCHW"}, "logits": {"label_filename": "labels.txt"}}}))
    # A config naming a tensor the model does not have: refused when it loads.
    wrong = repo / "misnamed"
    (wrong / "1").mkdir(parents=True)
    package(wrong / "1" / "model.pt", model, torch.zeros(1, 3, 8, 8), "misnamed",
            input_names=["image"], output_names=["logits"])
    (wrong / "config.json").write_text(json.dumps({"tensors": {"scores": {
        "label_filename": "labels.txt"}}}))
    server = ServerProcess(repo, interpreters=1)
    yield server, model
    assert server.stop() == 0


def clients(server):
    return ((triton_grpc, triton_grpc.InferenceServerClient(server.address)),
            (triton_http, triton_http.InferenceServerClient(f"127.0.0.1:{server.http_port}")))


def test_the_input_format_and_label_file_are_in_the_model_config(classifier):
    server, _ = classifier
    (_, grpc_client), (_, http_client) = clients(server)
    config = grpc_client.get_model_config("classifier").config
    assert config.input[0].format == model_config_pb2.ModelInput.FORMAT_NCHW
    assert config.output[0].label_filename == "labels.txt"
    assert config.max_batch_size > 0  # image_client adds the batch dimension itself
    config = http_client.get_model_config("classifier")
    assert config["input"][0]["format"] == "FORMAT_NCHW"
    assert config["output"][0]["label_filename"] == "labels.txt"
    assert "classification" in http_client.get_server_metadata()["extensions"]
    grpc_client.close()
    http_client.close()


@pytest.mark.parametrize("class_count", [1, 3, 9])
def test_class_count_answers_the_top_classes_of_each_image(classifier, class_count):
    server, model = classifier
    images = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        logits = model(torch.from_numpy(images)).numpy()
    k = min(class_count, len(LABELS))  # as Triton: no more than the output has
    for module, client in clients(server):
        tensor = module.InferInput("image", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        requested = module.InferRequestedOutput("logits", class_count=class_count)
        answer = client.infer("classifier", [tensor], outputs=[requested]).as_numpy("logits")
        assert answer.shape == (4, k), module
        for row, classes in enumerate(answer):
            ranked = np.argsort(-logits[row])[:k]
            for entry, index in zip(classes, ranked):
                value, position, label = entry.decode().split(":")
                assert int(position) == index and label == LABELS[index]
                assert float(value) == pytest.approx(logits[row, index], abs=1e-5)
        # Asked for without class_count, the output is the logits themselves.
        plain = client.infer("classifier", [tensor]).as_numpy("logits")
        np.testing.assert_allclose(plain, logits, rtol=1e-5, atol=1e-6)
        client.close()


def test_bad_classification_requests_and_configs_are_refused_by_name(classifier):
    server, _ = classifier
    (_, grpc_client), (_, http_client) = clients(server)
    tensor = triton_http.InferInput("image", [1, 3, 8, 8], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 3, 8, 8), np.float32))
    requested = triton_http.InferRequestedOutput("logits")
    requested._parameters["classification"] = -2
    with pytest.raises(InferenceServerException) as refused:
        http_client.infer("classifier", [tensor], outputs=[requested])
    assert 'output "logits": parameter "classification" must be an integer >= 1' in str(
        refused.value)
    index = {m["name"]: m for m in http_client.get_model_repository_index()}
    assert index["misnamed"]["state"] == "UNAVAILABLE"
    assert ('config.json: tensors.scores: the model has no input or output named "scores"'
            in index["misnamed"]["reason"])
    grpc_client.close()
    http_client.close()
