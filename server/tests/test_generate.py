"""Server-side generation with tritonclient, Triton's generate conventions: a text_input
BYTES prompt and sampling parameters in, text_output chunks streamed over
ModelStreamInfer as the engines make them (final flagged, with the finish reason), or
the whole text from ModelInfer. Requests on one stream run together (continuous
batching) and each streams exactly what greedy generation by full recomputation gives;
a bad parameter is an in-stream error and the stream goes on."""

import os
import queue
import sys

import numpy as np
import pytest
import torch

import tritonclient.grpc as triton_grpc
from chorus.package import create_package
from conftest import ServerProcess, metric

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

import generate  # noqa: E402
import model as llama  # noqa: E402

PROMPTS = ["chorus", "trains and serves Llama 3", "a", "the quick brown fox jumps over",
           "In the beginning", "0123456789", "serve", "continuous batching joins"]


def debug_generator():
    transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=128).eval()
    with torch.no_grad():  # attention that matters (python/tests/test_generation.py)
        for layer in transformer.layers.values():
            layer.attention.wo.weight.mul_(8)
            layer.attention.wq.weight.mul_(8 ** 0.5)
            layer.attention.wk.weight.mul_(8 ** 0.5)
    return generate.Llama3Generator(transformer)


def recompute_greedy(generator, prompt, max_tokens):
    tokens = generator.tokenizer.encode(prompt)
    with torch.inference_mode():
        for _ in range(max_tokens):
            tokens.append(int(generator.transformer(torch.tensor([tokens]))[0, -1].argmax()))
    return generator.tokenizer.decode(tokens[len(prompt.encode()):])


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("generate") / "repository"
    (repo / "llama3" / "1").mkdir(parents=True)
    generator = debug_generator()
    create_package(str(repo / "llama3" / "1" / "model.pt"), generator, (["chorus"],),
                   name="llama3", batchable=False, input_names=["text_input"],
                   output_names=["text_output"], progress=False)
    (repo / "llama3" / "config.json").write_text('{"generation": {"cache_blocks": 64}}')
    process = ServerProcess(repo, interpreters=2)
    yield process, generator
    assert process.stop() == 0


def text_input(prompt):
    tensor = triton_grpc.InferInput("text_input", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    return tensor


def test_a_stream_of_requests_generates_what_recomputation_does(llm_server):
    server, generator = llm_server
    client = triton_grpc.InferenceServerClient(server.address)
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for i, prompt in enumerate(PROMPTS):
        client.async_stream_infer("llama3", [text_input(prompt)], request_id=str(i),
                                  parameters={"max_tokens": 12, "temperature": 0.0})
    texts, chunks, reasons = {}, {}, {}
    while len(reasons) < len(PROMPTS):
        result, error = results.get(timeout=60)
        assert error is None, error
        response = result.get_response()
        texts[response.id] = texts.get(response.id, "") + result.as_numpy(
            "text_output")[0].decode()
        chunks[response.id] = chunks.get(response.id, 0) + 1
        if response.parameters["triton_final_response"].bool_param:
            reasons[response.id] = response.parameters["finish_reason"].string_param
    client.stop_stream()
    for i, prompt in enumerate(PROMPTS):
        assert texts[str(i)] == recompute_greedy(generator, prompt, 12), prompt
        assert reasons[str(i)] == "length" and chunks[str(i)] == 12
    # What Prometheus sees: every token, one first-token latency per request and one
    # inter-token latency per later token; an empty cache of 2 engines x 64 blocks.
    metrics = server.metrics()
    assert metric(metrics, "chorus_generation_tokens_total") >= 8 * 12
    assert metric(metrics, "chorus_generation_time_to_first_token_seconds_count") >= 8
    assert metric(metrics, "chorus_generation_inter_token_latency_seconds_count") >= 8 * 11
    assert metric(metrics, "chorus_generation_kv_cache_blocks_used") == 0
    assert metric(metrics, "chorus_generation_kv_cache_blocks") == 128
    assert metric(metrics, "chorus_generation_running_sequences") == 0


def test_model_infer_answers_the_whole_text(llm_server):
    server, generator = llm_server
    client = triton_grpc.InferenceServerClient(server.address)
    result = client.infer("llama3", [text_input(PROMPTS[1])],
                          parameters={"max_tokens": 20, "temperature": 0.0})
    assert result.as_numpy("text_output")[0].decode() == recompute_greedy(
        generator, PROMPTS[1], 20)
    assert result.get_response().parameters["finish_reason"].string_param == "length"
    config = client.get_model_config("llama3").config
    assert config.model_transaction_policy.decoupled


def test_seeded_sampling_is_reproducible_through_the_server(llm_server):
    server, _ = llm_server
    client = triton_grpc.InferenceServerClient(server.address)
    params = {"max_tokens": 16, "temperature": 0.9, "top_p": 0.9, "top_k": 50, "seed": 11}
    first = client.infer("llama3", [text_input("sample")], parameters=params)
    second = client.infer("llama3", [text_input("sample")], parameters=params)
    assert first.as_numpy("text_output")[0] == second.as_numpy("text_output")[0]


def test_bad_parameters_are_errors_in_the_stream_and_it_goes_on(llm_server):
    server, generator = llm_server
    client = triton_grpc.InferenceServerClient(server.address)
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("llama3", [text_input("x")], request_id="bad",
                              parameters={"max_tokens": -3})
    client.async_stream_infer("llama3", [text_input("x" * 200)], request_id="long",
                              parameters={"max_tokens": 4})
    errors = [results.get(timeout=60)[1] for _ in range(2)]
    messages = sorted(str(e) for e in errors)
    assert "max_tokens must be a positive integer" in messages[0] + messages[1]
    assert "the prompt has 200 tokens; the model's context is 128" in messages[0] + messages[1]
    client.async_stream_infer("llama3", [text_input(PROMPTS[0])], request_id="ok",
                              parameters={"max_tokens": 5, "temperature": 0.0})
    text = ""
    while True:
        result, error = results.get(timeout=60)
        assert error is None, error
        text += result.as_numpy("text_output")[0].decode()
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    assert text == recompute_greedy(generator, PROMPTS[0], 5)
