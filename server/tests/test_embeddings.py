"""OpenAI's /v1/embeddings over chorus models, driven by the `openai` client unmodified:
tiny random-weight Hugging Face checkpoints made here by transformers (a BERT encoder in
sentence-transformers' layout with mean pooling and normalization, the same with CLS
pooling, a Qwen2 decoder with last-token pooling), packaged by
examples/embeddings/package_embedding.py and served; every vector equals transformers'
own on the same weights and tokens within 1e-5, one text at a time, lists of texts, and
concurrent requests batched together by the scheduler; float and base64 encodings;
token usage; bad requests get OpenAI's errors naming the field."""

import base64
import concurrent.futures
import os
import subprocess
import sys

import numpy as np
import openai
import pytest

from conftest import ServerProcess, metric, package
import embedding_models
import servable_models
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "embeddings"))

import package_embedding  # noqa: E402

PACKAGER = os.path.join(ROOT, "examples", "embeddings", "package_embedding.py")

TEXTS = ["chorus serves many models", "a", "the quick brown fox jumps over the lazy dog",
         "In the beginning was the word", "0123456789", "Llama 3 and BERT, side by side",
         "x" * 50, "embeddings"]
MODELS = {"bert": ("mean", True), "bert_cls": ("cls", False), "qwen2": ("last", True)}


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("embeddings")
    repo = work / "repository"
    checkpoints = {
        "bert": embedding_models.bert_checkpoint(work / "bert", "mean", True, seed=1),
        "bert_cls": embedding_models.bert_checkpoint(work / "bert_cls", "cls", False, seed=2),
        "qwen2": embedding_models.qwen2_checkpoint(work / "qwen2", seed=3)}
    for name, checkpoint in checkpoints.items():
        (repo / name / "1").mkdir(parents=True)
        # The one command a user runs.
        subprocess.run([sys.executable, PACKAGER, str(checkpoint),
                        str(repo / name / "1" / "model.pt"), "--max-batch-size", "16"],
                       check=True, capture_output=True)
        (repo / name / "config.json").write_text('{"max_queue_delay_us": 20000}')
    (repo / "mlp" / "1").mkdir(parents=True)  # not an embedding model
    package(repo / "mlp" / "1" / "model.pt", servable_models.TwoLayer(), torch.randn(2, 4), "mlp")
    process = ServerProcess(repo, interpreters=2)
    references = {name: embedding_models.reference_embeddings(checkpoints[name], TEXTS, *how)
                  for name, how in MODELS.items()}
    yield process, references
    assert process.stop() == 0


def client_of(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused",
                         max_retries=0)


def test_the_packager_reads_pooling_from_the_sentence_transformers_config(tmp_path):
    bert = embedding_models.bert_checkpoint(tmp_path / "cls", "cls", False)
    assert package_embedding.sentence_transformers_settings(str(bert)) == ("cls", False)
    qwen = embedding_models.qwen2_checkpoint(tmp_path / "qwen")
    assert package_embedding.sentence_transformers_settings(str(qwen)) == (None, None)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vectors_equal_transformers_one_text_and_a_list(embedding_server, name):
    server, references = embedding_server
    client = client_of(server)
    one = client.embeddings.create(model=name, input=TEXTS[2], encoding_format="float")
    assert len(one.data) == 1 and one.model == name
    np.testing.assert_allclose(one.data[0].embedding, references[name][2].numpy(), atol=1e-5)
    assert one.usage.prompt_tokens == one.usage.total_tokens > 0
    many = client.embeddings.create(model=name, input=TEXTS)  # the client asks for base64
    assert [d.index for d in many.data] == list(range(len(TEXTS)))
    vectors = np.array([d.embedding for d in many.data])
    np.testing.assert_allclose(vectors, references[name].numpy(), atol=1e-5)
    if MODELS[name][1]:
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_more_inputs_than_the_models_batch_go_as_several_calls(embedding_server):
    server, references = embedding_server
    answer = client_of(server).embeddings.create(model="bert", input=TEXTS * 5,
                                                 encoding_format="float")  # 40 > 16
    np.testing.assert_allclose(np.array([d.embedding for d in answer.data]),
                               np.tile(references["bert"].numpy(), (5, 1)), atol=1e-5)
    assert [d.index for d in answer.data] == list(range(40))


def test_an_input_is_cut_where_sentence_transformers_cuts_it(tmp_path):
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 77}')
    assert package_embedding.longest_input(str(tmp_path), {"max_position_embeddings": 512}) == 77
    (tmp_path / "sentence_bert_config.json").unlink()
    roberta = {"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1}
    assert package_embedding.longest_input(str(tmp_path), roberta) == 512


def test_concurrent_requests_are_batched_and_each_gets_its_own(embedding_server):
    server, references = embedding_server
    client = client_of(server)

    def embed(i):
        return client.embeddings.create(model="bert", input=TEXTS[i % len(TEXTS)],
                                        encoding_format="float").data[0].embedding

    batches_before = metric(server.metrics(), 'nv_inference_exec_count{model="bert",version="1"}')
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        vectors = list(pool.map(embed, range(32)))
    for i, vector in enumerate(vectors):
        np.testing.assert_allclose(vector, references["bert"][i % len(TEXTS)].numpy(), atol=1e-5)
    batches = metric(server.metrics(), 'nv_inference_exec_count{model="bert",version="1"}')
    assert batches - (batches_before or 0) < 32  # some requests ran together


def test_base64_is_little_endian_float32(embedding_server):
    import json
    import urllib.request
    server, references = embedding_server
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v1/embeddings", method="POST",
        data=json.dumps({"model": "qwen2", "input": [TEXTS[0]],
                         "encoding_format": "base64"}).encode())
    with urllib.request.urlopen(request) as response:
        answer = json.loads(response.read())
    vector = np.frombuffer(base64.b64decode(answer["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, references["qwen2"][0].numpy(), atol=1e-5)
    assert answer["object"] == "list" and answer["data"][0]["object"] == "embedding"


def test_models_lists_embedding_models(embedding_server):
    server, _ = embedding_server
    assert sorted(m.id for m in client_of(server).models.list().data) == sorted(MODELS)


def test_bad_requests_get_openai_errors_naming_the_field(embedding_server):
    server, _ = embedding_server
    client = client_of(server)
    with pytest.raises(openai.NotFoundError, match="nope"):
        client.embeddings.create(model="nope", input="x")
    with pytest.raises(openai.BadRequestError, match="'mlp' does not serve embeddings"):
        client.embeddings.create(model="mlp", input="x")
    with pytest.raises(openai.BadRequestError, match="token ids is not supported"):
        client.embeddings.create(model="bert", input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="'dimensions' is not supported"):
        client.embeddings.create(model="bert", input="x", dimensions=8)
    with pytest.raises(openai.BadRequestError, match="'input' must be a string or a non-empty"):
        client.embeddings.create(model="bert", input=[])
    assert len(client.embeddings.create(model="bert", input="still").data) == 1
