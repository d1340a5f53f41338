"""Server-side generation with tritonclient, Triton's generate conventions: a text_input
BYTES prompt and sampling parameters in, text_output chunks streamed over
ModelStreamInfer as the engines make them (final flagged, with the finish reason), or
the whole text from ModelInfer. Requests on one stream run together (continuous
batching) and each streams exactly what greedy generation by full recomputation gives;
a bad parameter is an in-stream error and the stream goes on."""

import json
import queue
import re

import numpy as np
import pytest

import tritonclient.grpc as triton_grpc
from conftest import ServerProcess, metric, wait_until
from llm_models import debug_generator, package_llm, recompute_greedy

PROMPTS = ["chorus", "trains and serves Llama 3", "a", "the quick brown fox jumps over",
           "In the beginning", "0123456789", "serve", "continuous batching joins"]


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("generate") / "repository"
    generator = debug_generator()
    package_llm(repo, generator, {"cache_blocks": 64})
    process = ServerProcess(repo, interpreters=2)
    yield process, generator
    assert process.stop() == 0


def text_input(prompt):
    tensor = triton_grpc.InferInput("text_input", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    return tensor


def stream_all(client, prompts, max_tokens, timeout=60):
    """Sends every prompt on one stream (request id = its index); returns, per id, the
    text, the number of responses and the finish reason."""
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for i, prompt in enumerate(prompts):
        client.async_stream_infer("llama3", [text_input(prompt)], request_id=str(i),
                                  parameters={"max_tokens": max_tokens, "temperature": 0.0})
    texts, chunks, reasons = {}, {}, {}
    while len(reasons) < len(prompts):
        result, error = results.get(timeout=timeout)
        assert error is None, error
        response = result.get_response()
        texts[response.id] = texts.get(response.id, "") + result.as_numpy(
            "text_output")[0].decode()
        chunks[response.id] = chunks.get(response.id, 0) + 1
        if response.parameters["triton_final_response"].bool_param:
            reasons[response.id] = response.parameters["finish_reason"].string_param
    client.stop_stream()
    return texts, chunks, reasons


def test_a_stream_of_requests_generates_what_recomputation_does(llm_server):
    server, generator = llm_server
    client = triton_grpc.InferenceServerClient(server.address)
    texts, chunks, reasons = stream_all(client, PROMPTS, 12)
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


def test_structured_outputs_is_a_request_parameter_of_json_text(llm_server):
    server, _ = llm_server
    client = triton_grpc.InferenceServerClient(server.address)
    spec = json.dumps({"regex": "[a-c]{2}=[0-9]{1,3};"})
    for seed in range(4):
        result = client.infer("llama3", [text_input("eq ")], parameters={
            "max_tokens": 30, "seed": seed, "structured_outputs": spec})
        assert re.fullmatch("[a-c]{2}=[0-9]{1,3};",
                            result.as_numpy("text_output")[0].decode())
        assert result.get_response().parameters["finish_reason"].string_param == "stop"


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


def test_two_hundred_requests_against_a_small_cache_wait_their_turn(tmp_path):
    """200 requests at once on engines whose caches hold a few sequences each: they
    queue and all finish, each with what recomputation gives, and the caches end
    empty."""
    repo = tmp_path / "repository"
    generator = debug_generator()
    package_llm(repo, generator, {"cache_blocks": 8, "block_size": 8})
    server = ServerProcess(repo, interpreters=2)
    try:
        client = triton_grpc.InferenceServerClient(server.address)
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(200)]
        texts, _, _ = stream_all(client, prompts, 6, timeout=120)
        expected = {p: recompute_greedy(generator, p, 6) for p in PROMPTS}
        for i, prompt in enumerate(prompts):
            assert texts[str(i)] == expected[prompt], (i, prompt)
        metrics = server.metrics()
        assert metric(metrics, "chorus_generation_kv_cache_blocks") == 16
        assert metric(metrics, "chorus_generation_kv_cache_blocks_used") == 0
        assert metric(metrics, "chorus_generation_waiting_sequences") == 0
    finally:
        assert server.stop() == 0


def test_rest_infer_takes_sampling_parameters(llm_server):
    """KServe v2 REST: the request's "parameters" reach the engine as over gRPC."""
    import json
    import urllib.request
    server, generator = llm_server
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1],
                        "data": [PROMPTS[3]]}],
            "parameters": {"max_tokens": 9, "temperature": 0.0}}
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/llama3/infer",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(request).read())
    assert answer["outputs"][0]["data"] == [recompute_greedy(generator, PROMPTS[3], 9)]


def test_triton_generate_endpoints_answer_whole_and_streamed(llm_server):
    """Triton's HTTP generate extension: /generate answers the whole text, /generate_stream
    one server-sent event per step; parameters top-level or under "parameters"."""
    import json
    import urllib.error
    import urllib.request
    server, generator = llm_server
    url = f"http://127.0.0.1:{server.http_port}/v2/models/llama3"

    def post(path, body):
        request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        return urllib.request.urlopen(request)

    expected = recompute_greedy(generator, PROMPTS[1], 10)
    body = {"text_input": PROMPTS[1], "max_tokens": 10, "parameters": {"temperature": 0}}
    answer = json.loads(post("/generate", body).read())
    assert answer["model_name"] == "llama3" and answer["model_version"] == "1"
    assert answer["text_output"] == expected
    events = [json.loads(line[len("data: "):]) for line in
              post("/generate_stream", body).read().decode().splitlines()
              if line.startswith("data: ")]
    assert len(events) == 10
    assert "".join(event["text_output"] for event in events) == expected
    for bad, status, message in [({"text_input": 3}, 400, "text_input"),
                                 ({"text_input": "x", "max_tokens": -1}, 400,
                                  "max_tokens must be a positive integer")]:
        for path in ("/generate", "/generate_stream"):
            with pytest.raises(urllib.error.HTTPError) as error:
                post(path, bad)
            assert error.value.code == status
            assert message in json.loads(error.value.read())["error"]


def test_a_generative_model_that_kills_the_server_twice_is_quarantined(tmp_path):
    # A SIGKILL leaves no crash report: the supervisor learns from the memory it shares
    # with the serving process that a generation step of this model was running.
    from poisoned_llm import PoisonedGenerator
    repo = tmp_path / "repository"
    package_llm(repo, PoisonedGenerator(debug_generator().transformer), name="poisoned")
    server = ServerProcess(repo, interpreters=1)
    client = triton_grpc.InferenceServerClient(server.address)

    def ready():
        try:
            return client.is_server_ready()
        except triton_grpc.InferenceServerException:
            return False

    def generate(prompt):
        return client.infer("poisoned", [text_input(prompt)], parameters={"max_tokens": 4},
                            client_timeout=60)

    try:
        wait_until(ready)
        assert generate("fine").as_numpy("text_output")[0]
        for _ in range(2):
            with pytest.raises(triton_grpc.InferenceServerException):
                generate("poison\x00")
            wait_until(ready)  # restarted
        with pytest.raises(triton_grpc.InferenceServerException) as refused:
            generate("fine")
        assert "is quarantined" in refused.value.message(), refused.value
        assert "signal SIGKILL" in refused.value.message(), refused.value
        log = server.log_text()
        assert "supervisor: the serving process was running: model poisoned version 1, " \
            "generating for requests " in log, log
        assert "supervisor: model poisoned is quarantined" in log, log
    finally:
        assert server.stop() == 0


