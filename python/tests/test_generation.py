"""chorus.generation on the debug Llama 3 (examples/llama3), in this process: greedy
generation through the paged cache and continuous batching equals greedy generation by
full recomputation, token for token, alone and with 16 requests of mixed lengths at once;
chunked prefill, preemption under a small cache, prefix caching, sampling, stop strings,
aborts, and clear errors for bad requests; the cache is empty again when all are done."""

import os
import sys

import pytest
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

import generate  # noqa: E402
import model as llama  # noqa: E402
from chorus.generation import Engine, SamplingParams  # noqa: E402
from chorus.generation.kv_cache import CacheFull, PagedKVCache  # noqa: E402
from chorus.generation.protocol import ModelShape  # noqa: E402

GREEDY = SamplingParams(max_tokens=24, temperature=0)
PROMPTS = ["chorus", "trains and serves Llama 3", "a", "the quick brown fox jumps over the lazy",
           "x" * 70, "In the beginning", "0123456789", "serve", "one two three four",
           "paged attention", "b" * 33, "continuous batching joins at the next step", "KV",
           "zz top", "hello, world", "tokens stream as they are made"]


@pytest.fixture(scope="module")
def generator():
    transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=128).eval()
    # At initialization the residual stream is mostly the current token's embedding, so
    # greedy tokens barely depend on the context: a broken cache would go unseen. Stronger
    # attention makes every token depend on all before it.
    with torch.no_grad():
        for layer in transformer.layers.values():
            layer.attention.wo.weight.mul_(8)
            layer.attention.wq.weight.mul_(8 ** 0.5)
            layer.attention.wk.weight.mul_(8 ** 0.5)
    return generate.Llama3Generator(transformer)


def test_the_context_matters(generator):
    # Same last token, different contexts: different continuations (else the tests below
    # could not tell a broken cache from a working one).
    assert (recompute_greedy(generator, "hello world X", 8)
            != recompute_greedy(generator, "zzzzzzzzzzzzX", 8))


def recompute_greedy(generator, prompt: str, max_tokens: int):
    """The reference: the whole sequence through Transformer.forward for every token."""
    tokens = generator.tokenizer.encode(prompt)
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = generator.transformer(torch.tensor([tokens]))
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(generator.tokenizer.encode(prompt)):]


def run_all(engine, requests):
    """Adds (id, prompt, params) and steps to the end; returns id -> (tokens, text, reason)."""
    for request_id, prompt, params in requests:
        engine.add(request_id, prompt, params)
    results = {request_id: ([], "", None) for request_id, _, _ in requests}
    steps = 0
    while engine.has_work():
        steps += 1
        assert steps < 10_000
        for out in engine.step():
            tokens, text, _ = results[out.request_id]
            results[out.request_id] = (tokens + out.token_ids, text + out.text, out.finish_reason)
    return results


def test_greedy_alone_equals_full_recomputation(generator):
    engine = Engine(generator, cache_blocks=64)
    ((tokens, text, reason),) = run_all(engine, [("r", PROMPTS[1], GREEDY)]).values()
    assert tokens == recompute_greedy(generator, PROMPTS[1], 24)
    assert text == generator.tokenizer.decode(tokens)
    assert reason == "length"
    assert engine.cache.used_blocks == 0


def test_sixteen_concurrent_mixed_lengths_equal_full_recomputation(generator):
    # Small steps: long prompts are prefilled in chunks beside the running decodes.
    engine = Engine(generator, cache_blocks=128, max_step_tokens=48, prefill_chunk=16)
    requests = [(f"r{i}", prompt, SamplingParams(max_tokens=8 + i, temperature=0))
                for i, prompt in enumerate(PROMPTS)]
    results = run_all(engine, requests)
    for i, prompt in enumerate(PROMPTS):
        assert results[f"r{i}"][0] == recompute_greedy(generator, prompt, 8 + i), prompt
    assert engine.cache.used_blocks == 0 and not engine.has_work()


def test_a_small_cache_preempts_and_still_matches(generator):
    # 10 blocks of 16 tokens cannot hold 16 sequences: requests wait, the newest are
    # preempted and recomputed, and every answer is still the reference's.
    engine = Engine(generator, cache_blocks=10, block_size=16)
    requests = [(f"r{i}", prompt, SamplingParams(max_tokens=12, temperature=0))
                for i, prompt in enumerate(PROMPTS)]
    results = run_all(engine, requests)
    for i, prompt in enumerate(PROMPTS):
        assert results[f"r{i}"][0] == recompute_greedy(generator, prompt, 12), prompt
    assert engine.cache.used_blocks == 0


SHARED = "In the beginning the paged cache held the keys of a long system prompt; "  # 75


def test_a_shared_prefix_is_computed_once_and_answers_stay_exact(generator):
    suffixes = ["first question", "a second, longer question", "3rd"]
    answers = {}
    for prefix_caching in (True, False):
        engine = Engine(generator, cache_blocks=64, prefix_caching=prefix_caching)
        for i, suffix in enumerate(suffixes):  # one after another: each finds the last's
            ((tokens, _, _),) = run_all(engine, [(f"r{i}", SHARED + suffix, GREEDY)]).values()
            answers.setdefault(suffix, []).append(tokens)
        prompt_tokens = sum(len(SHARED + suffix) for suffix in suffixes)
        assert engine.stats()["prefix_cache_queries"] == (prompt_tokens if prefix_caching else 0)
        # The shared 75 tokens are 4 whole blocks of 16: the 2nd and 3rd requests skip them.
        assert engine.stats()["prefix_cache_hits"] == (2 * 64 if prefix_caching else 0)
        assert engine.cache.used_blocks == 0
    for suffix, (cached, uncached) in answers.items():
        assert cached == uncached == recompute_greedy(generator, SHARED + suffix, 24), suffix


def test_a_repeated_prompt_reuses_all_but_its_last_token(generator):
    engine = Engine(generator, cache_blocks=64)
    prompt = "0123456789abcdef" * 2  # two whole blocks
    first = run_all(engine, [("a", prompt, GREEDY)])["a"][0]
    again = run_all(engine, [("b", prompt, GREEDY)])["b"][0]
    assert first == again == recompute_greedy(generator, prompt, 24)
    # The last token's logits must be computed, so its block is not taken from the cache.
    assert engine.stats()["prefix_cache_hits"] == 16


def test_concurrent_sharers_hold_a_prefix_by_reference(generator):
    engine = Engine(generator, cache_blocks=16, max_step_tokens=64)
    run_all(engine, [("warm", SHARED + "warm", GREEDY)])  # leaves the prefix's blocks cached
    assert engine.cache.used_blocks == 0 and engine.cache.free_blocks == 16
    requests = [(f"r{i}", SHARED + suffix, SamplingParams(max_tokens=8, temperature=0))
                for i, suffix in enumerate(["one", "two", "three", "four"])]
    for request_id, prompt, params in requests:
        engine.add(request_id, prompt, params)
    results = {}
    for out in engine.step():  # all four admitted, sharing the 4 prefix blocks (16 blocks
        results.setdefault(out.request_id, []).extend(out.token_ids)  # hold no 4 copies of 5)
    tables = [engine._ids[request_id].block_table for request_id, _, _ in requests]
    assert all(table[:4] == tables[0][:4] for table in tables)
    assert engine.cache.used_blocks == 4 + 4  # the shared prefix and one tail block each
    while engine.has_work():
        for out in engine.step():
            results.setdefault(out.request_id, []).extend(out.token_ids)
    for request_id, prompt, _ in requests:
        assert results[request_id] == recompute_greedy(generator, prompt, 8), prompt
    assert engine.cache.used_blocks == 0


def test_unreferenced_blocks_are_evicted_least_recently_used_first_tail_first():
    cache = PagedKVCache(ModelShape(n_layers=1, n_kv_heads=1, head_dim=2, vocab_size=8,
                                    max_seq_len=16), num_blocks=3, block_size=2)
    tokens, table, digests = [1, 2, 3, 4, 5], [], []
    cache.grow(table, len(tokens))
    cache.keep_full_blocks(table, tokens, len(tokens), digests)  # names blocks 0 and 1
    cache.release(table)  # block 2 is free; 1, then 0, keep their contents
    assert cache.used_blocks == 0 and cache.free_blocks == 3
    other = []
    cache.grow(other, 4)  # the free block, then the least recently released: block 1
    assert sorted(other) == [1, 2]
    blocks, _ = cache.acquire_prefix(tokens)
    assert blocks == [0]  # the head survived, referenced again
    assert cache.used_blocks == 3 and cache.free_blocks == 0
    with pytest.raises(CacheFull):
        cache.grow(other, 6)
    cache.release(blocks)
    cache.release(other)
    assert cache.acquire_prefix([9, 9, 9])[0] == [] and cache.free_blocks == 3


def test_seeded_sampling_is_reproducible_and_batch_independent(generator):
    params = SamplingParams(max_tokens=20, temperature=0.8, top_k=40, top_p=0.9, seed=7)
    alone = run_all(Engine(generator), [("s", "sample me", params)])["s"][0]
    crowd = [(f"o{i}", p, SamplingParams(max_tokens=10, temperature=1.0, seed=i))
             for i, p in enumerate(PROMPTS[:6])]
    together = run_all(Engine(generator), crowd + [("s", "sample me", params)])["s"][0]
    assert alone == together
    assert alone != run_all(Engine(generator), [
        ("s", "sample me", SamplingParams(max_tokens=20, temperature=0.8, top_k=40, top_p=0.9,
                                          seed=8))])["s"][0]


def test_top_k_one_is_greedy(generator):
    sampled = run_all(Engine(generator), [
        ("k", PROMPTS[3], SamplingParams(max_tokens=16, temperature=1.3, top_k=1, seed=1))])
    assert sampled["k"][0] == recompute_greedy(generator, PROMPTS[3], 16)


def test_stop_strings_end_the_text_before_them(generator):
    full = generator.tokenizer.decode(recompute_greedy(generator, PROMPTS[0], 24))
    stop = full[5:8]
    assert full.find(stop) == 5
    results = run_all(Engine(generator), [
        ("s", PROMPTS[0], SamplingParams(max_tokens=24, temperature=0, stop=[stop]))])
    tokens, text, reason = results["s"]
    assert (text, reason) == (full[:5], "stop")
    assert len(tokens) < 24


def test_abort_frees_the_cache_at_once(generator):
    engine = Engine(generator, cache_blocks=32)
    engine.add("a", PROMPTS[4], GREEDY)
    engine.add("b", PROMPTS[1], GREEDY)
    engine.step()
    assert engine.cache.used_blocks > 0
    assert engine.abort("a") and engine.abort("b") and not engine.abort("b")
    assert engine.cache.used_blocks == 0 and not engine.has_work()


@pytest.mark.parametrize("prompt,params,message", [
    ("x" * 128, GREEDY, "the prompt has 128 tokens; the model's context is 128"),
    ("", GREEDY, "the prompt is empty"),
    ("x" * 100, GREEDY, "the KV cache holds 64"),
])
def test_bad_requests_are_refused_with_what_is_wrong(generator, prompt, params, message):
    engine = Engine(generator, cache_blocks=4)
    with pytest.raises(ValueError, match=message):
        engine.add("bad", prompt, params)
    assert not engine.has_work()


@pytest.mark.parametrize("values,message", [
    ({"max_tokens": -1}, "max_tokens must be a positive integer"),
    ({"temperature": -0.5}, "temperature must be >= 0"),
    ({"top_p": 0}, r"top_p must be in \(0, 1\]"),
    ({"beam_width": 4}, "unknown sampling parameter 'beam_width'"),
    ({"stop": [""]}, "stop must be a string or a list of non-empty strings"),
])
def test_sampling_parameters_are_checked(values, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams.from_dict(values)
    assert SamplingParams.from_dict({"stop": "END"}).stop == ["END"]


def test_the_cache_and_a_steps_indices_live_on_the_models_device():
    # Meta tensors stand in for a GPU here: shapes and devices flow, no numbers. The same
    # code on cuda:0 is run by tests/gpu/run.sh.
    transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=128).to("meta")
    engine = Engine(generate.Llama3Generator(transformer), cache_blocks=8, block_size=4)
    assert engine.device.type == "meta"
    assert engine.cache.k.is_meta and engine.cache.v.is_meta
    from chorus.generation.kv_cache import BatchAttention, SequenceSlice
    table_a, table_b = [], []
    engine.cache.grow(table_a, 5)
    engine.cache.grow(table_b, 3)
    # A prompt of 5 tokens and a decode token of a sequence with 2 cached.
    attention = BatchAttention(engine.cache, [SequenceSlice(table_a, 0, 5),
                                              SequenceSlice(table_b, 2, 3)])
    assert attention.write_slots.is_meta
    shape = engine.shape
    heads = 2 * shape.n_kv_heads
    q = torch.empty(6, heads, shape.head_dim, device="meta")
    k = torch.empty(6, shape.n_kv_heads, shape.head_dim, device="meta")
    out = attention(0, q, k, torch.empty_like(k))
    assert out.is_meta and out.shape == q.shape
