"""OpenAI's API on chorus' HTTP port, driven by the `openai` client unmodified:
completions and chat completions, whole and streamed (server-sent events), with usage
counts; greedy answers equal full recomputation, a seeded stream equals the seeded
whole answer; bad requests get OpenAI's errors; a stream closed mid-way frees its
cache; the server serves on through all of it."""

import concurrent.futures
import json
import re
import signal
import time
import urllib.request

import jsonschema
import openai
import pytest

from chorus.generation.chat import llama3_prompt
from conftest import ServerProcess, metric, package
from llm_models import debug_generator, package_llm, recompute_greedy
import servable_models
import torch

MIXED = ["a", "chorus", "serves many", "the quick brown fox jumps over the lazy dog",
         "0123456789abcdef", "In the beginning was the word", "Llama 3", "x" * 60]


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("openai") / "repository"
    generator = debug_generator(max_seq_len=256)  # room for chat prompts, byte by byte
    package_llm(repo, generator, {"cache_blocks": 128})
    (repo / "mlp" / "1").mkdir(parents=True)  # not generative: not in /v1/models
    package(repo / "mlp" / "1" / "model.pt", servable_models.TwoLayer(), torch.randn(2, 4), "mlp")
    process = ServerProcess(repo, interpreters=2)
    yield process, generator
    assert process.stop() == 0


def client_of(server, **kwargs):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused",
                         max_retries=0, **kwargs)


def wait_for_empty_cache(server, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        metrics = server.metrics()
        if (metric(metrics, "chorus_generation_kv_cache_blocks_used") == 0
                and metric(metrics, "chorus_generation_running_sequences") == 0):
            return
        assert time.monotonic() < deadline, "the KV cache did not empty"
        time.sleep(0.05)


def test_models_lists_the_generative_models(llm_server):
    server, _ = llm_server
    models = client_of(server).models.list()
    assert [m.id for m in models.data] == ["llama3"]
    assert models.data[0].owned_by == "chorus"


def test_a_greedy_completion_equals_recomputation_with_usage(llm_server):
    server, generator = llm_server
    answer = client_of(server).completions.create(model="llama3", prompt=MIXED[3],
                                                  max_tokens=20, temperature=0)
    assert answer.object == "text_completion"
    assert answer.choices[0].text == recompute_greedy(generator, MIXED[3], 20)
    assert answer.choices[0].finish_reason == "length"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens,
            answer.usage.total_tokens) == (len(MIXED[3]), 20, len(MIXED[3]) + 20)


def test_sixteen_concurrent_streams_of_mixed_lengths_equal_recomputation(llm_server):
    server, generator = llm_server
    client = client_of(server)
    prompts = [MIXED[i % len(MIXED)] + str(i) for i in range(16)]

    def stream(i):
        text = ""
        for chunk in client.completions.create(model="llama3", prompt=prompts[i],
                                               max_tokens=8 + i, temperature=0, stream=True):
            text += chunk.choices[0].text
        return text

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(stream, range(16)))
    for i, text in enumerate(texts):
        assert text == recompute_greedy(generator, prompts[i], 8 + i), prompts[i]


def test_a_seeded_chat_streams_what_it_answers_whole(llm_server):
    server, _ = llm_server
    client = client_of(server)
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a colour."}]
    whole = client.chat.completions.create(model="llama3", messages=messages, max_tokens=24,
                                           temperature=0.8, top_p=0.95, seed=1234)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    pieces, roles, usage = [], [], None
    for chunk in client.chat.completions.create(model="llama3", messages=messages,
                                                max_tokens=24, temperature=0.8, top_p=0.95,
                                                seed=1234, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            roles += [choice.delta.role] if choice.delta.role else []
            pieces.append(choice.delta.content or "")
    assert roles == ["assistant"]
    assert "".join(pieces) == whole.choices[0].message.content
    assert len(whole.choices[0].message.content) > 0
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens == len(llama3_prompt(messages))


def test_a_greedy_chat_is_its_prompt_in_llama3s_format(llm_server):
    server, generator = llm_server
    messages = [{"role": "user", "content": "hi"}]
    answer = client_of(server).chat.completions.create(model="llama3", messages=messages,
                                                       max_tokens=10, temperature=0)
    expected = recompute_greedy(generator, llama3_prompt(messages), 10)
    assert answer.choices[0].message.content == expected.split("<|eot_id|>")[0]


def test_bad_requests_get_openai_errors_and_the_server_goes_on(llm_server):
    server, generator = llm_server
    client = client_of(server)
    with pytest.raises(openai.NotFoundError, match="nope"):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="does not generate text"):
        client.completions.create(model="mlp", prompt="x")
    with pytest.raises(openai.BadRequestError, match="max_tokens must be a positive integer"):
        client.completions.create(model="llama3", prompt="x", max_tokens=-1)
    with pytest.raises(openai.BadRequestError, match="the model's context is 256"):
        client.completions.create(model="llama3", prompt="y" * 300, max_tokens=4, stream=True)
    with pytest.raises(openai.BadRequestError, match="unrecognized request argument.*typo"):
        client.completions.create(model="llama3", prompt="x", extra_body={"typo": 1})
    with pytest.raises(openai.BadRequestError, match="'n' must be 1"):
        client.chat.completions.create(model="llama3", n=2,
                                       messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="role must be one of"):
        client.chat.completions.create(model="llama3", messages=[{"role": "robot",
                                                                  "content": "x"}])
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}/v1/completions",
                                     data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request)
    assert error.value.code == 400
    assert "not a JSON object" in json.loads(error.value.read())["error"]["message"]
    answer = client.completions.create(model="llama3", prompt="still", max_tokens=5,
                                       temperature=0)
    assert answer.choices[0].text == recompute_greedy(generator, "still", 5)


def test_a_stream_closed_mid_way_frees_its_cache_at_once(llm_server):
    server, _ = llm_server
    client = client_of(server)
    wait_for_empty_cache(server)
    tokens_before = metric(server.metrics(), "chorus_generation_tokens_total")
    stream = client.completions.create(model="llama3", prompt="long", max_tokens=120,
                                       temperature=0, stream=True)
    received = 0
    for _ in stream:
        received += 1
        if received == 3:
            break
    stream.close()
    wait_for_empty_cache(server, timeout=10)
    # Run to its end, the request would have made 120 tokens.
    made = metric(server.metrics(), "chorus_generation_tokens_total") - tokens_before
    assert 3 <= made < 60
    answer = client.completions.create(model="llama3", prompt="after", max_tokens=3)
    assert answer.usage.completion_tokens == 3


def test_requests_sharing_a_prefix_reuse_its_blocks_counted_under_vllms_names(tmp_path):
    # One interpreter, one engine (the cache is per engine, and which of two engines a
    # request reaches depends on timing): the second request finds there the 4 full
    # blocks (16 tokens each) of the 72 prompt bytes they share.
    generator = debug_generator(max_seq_len=256)
    package_llm(tmp_path / "repository", generator, {"cache_blocks": 32})
    server = ServerProcess(tmp_path / "repository", interpreters=1)
    client = client_of(server)
    wait_for_empty_cache(server)
    before = server.metrics()
    shared = "The Open Inference Protocol and OpenAI's API, both served by one process"
    assert len(shared) == 72
    for tail in ("first", "second"):
        answer = client.completions.create(model="llama3", prompt=shared + tail, max_tokens=8,
                                           temperature=0)
        assert answer.choices[0].text == recompute_greedy(generator, shared + tail, 8)
    wait_for_empty_cache(server)
    after = server.metrics()

    def grew(name):
        return metric(after, name) - metric(before, name)
    assert grew("vllm:prefix_cache_queries_total") == len(shared) * 2 + len("firstsecond")
    assert grew("vllm:prefix_cache_hits_total") == 64
    assert grew("chorus_generation_prefix_cache_hits_total") == 64
    assert grew("vllm:generation_tokens_total") == 16
    assert grew("vllm:time_to_first_token_seconds_count") == 2
    assert grew("vllm:inter_token_latency_seconds_count") == 14
    assert 'vllm:num_requests_running{model_name="llama3"} 0' in after
    assert 'vllm:num_requests_waiting{model_name="llama3"} 0' in after
    assert 'vllm:kv_cache_usage_perc{model_name="llama3"} 0' in after
    assert server.stop() == 0


PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                                  "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}


def test_fifty_seeded_answers_under_a_json_schema_all_validate(llm_server):
    server, _ = llm_server
    client = client_of(server)
    response_format = {"type": "json_schema",
                       "json_schema": {"name": "person", "strict": True, "schema": PERSON}}

    def ask(seed):
        return client.chat.completions.create(
            model="llama3", messages=[{"role": "user", "content": "A person, please."}],
            response_format=response_format, temperature=1.0, seed=seed, max_tokens=150)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, range(50)))
    for answer in answers:
        jsonschema.validate(json.loads(answer.choices[0].message.content), PERSON)
        assert answer.choices[0].finish_reason == "stop"
    assert len({a.choices[0].message.content for a in answers}) > 40
    assert ask(7).choices[0].message.content == answers[7].choices[0].message.content


def test_vllms_guided_fields_hold_completions_too(llm_server):
    server, _ = llm_server
    client = client_of(server)
    answer = client.completions.create(model="llama3", prompt="id: ", max_tokens=20, seed=1,
                                       extra_body={"guided_regex": "[0-9]{3}-[a-z]{2}"})
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", answer.choices[0].text)
    answer = client.completions.create(model="llama3", prompt="pick: ", max_tokens=20,
                                       temperature=0,
                                       extra_body={"structured_outputs": {"choice": ["up",
                                                                                     "down"]}})
    assert answer.choices[0].text in ("up", "down") and answer.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="structured_outputs.json: .*emailx"):
        client.chat.completions.create(
            model="llama3", messages=[{"role": "user", "content": "x"}],
            response_format={"type": "json_schema", "json_schema": {
                "name": "bad", "schema": {"type": "string", "format": "emailx"}}})
    with pytest.raises(openai.BadRequestError, match="response_format.type"):
        client.chat.completions.create(model="llama3", response_format={"type": "yaml"},
                                       messages=[{"role": "user", "content": "x"}])


def test_a_stream_under_way_when_the_server_is_stopped_runs_to_its_end(tmp_path):
    # SIGTERM drains: new requests are refused, the completions under way finish (within
    # --drain-timeout-ms), then the server exits 0.
    repo = tmp_path / "repository"
    package_llm(repo, debug_generator(max_seq_len=1024))
    server = ServerProcess(repo, interpreters=1)
    client = client_of(server)
    stream = client.completions.create(model="llama3", prompt="drain", max_tokens=900,
                                       temperature=0, stream=True)
    chunks = iter(stream)
    first = next(chunks)
    server.process.send_signal(signal.SIGTERM)
    text, after_stop, finish = first.choices[0].text, 0, first.choices[0].finish_reason
    for chunk in chunks:
        text += chunk.choices[0].text
        after_stop += 1
        finish = chunk.choices[0].finish_reason or finish
        if after_stop == 20:
            with pytest.raises(openai.APIStatusError) as refused:
                client.completions.create(model="llama3", prompt="late", max_tokens=2)
            assert refused.value.status_code == 503, refused.value
            assert "not ready" in str(refused.value), refused.value
    assert finish == "length", (finish, text)  # all 900 tokens
    assert after_stop >= 100, after_stop  # most of them made after the stop began
    assert server.process.wait(60) == 0
    assert "generations still running" not in server.log_text()
