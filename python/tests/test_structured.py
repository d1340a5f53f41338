"""Structured output on the debug Llama 3 (examples/llama3), in this process: 50 seeded
sampled requests under a JSON schema all parse and validate; any JSON object, a regex, a
choice and a Lark grammar hold; a greedy choice is the one the model's own logits prefer;
unconstrained neighbours in the same batch generate exactly what they do alone; bad
schemas, regexes and specs are refused naming what is wrong."""

import json
import os
import re
import sys

import jsonschema
import pytest
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

import generate  # noqa: E402
import model as llama  # noqa: E402
from chorus.generation import Engine, SamplingParams  # noqa: E402

PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                                  "maxItems": 3},
                         "admin": {"type": "boolean"}},
          "required": ["name", "age", "tags", "admin"], "additionalProperties": False}


@pytest.fixture(scope="module")
def generator():
    transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=256).eval()
    return generate.Llama3Generator(transformer)


def run_all(engine, requests):
    """Adds every (id, prompt, params) at once and steps to the end: {id: (text, reason)}."""
    for request_id, prompt, params in requests:
        engine.add(request_id, prompt, params)
    texts, reasons = {}, {}
    while engine.has_work():
        for out in engine.step():
            texts[out.request_id] = texts.get(out.request_id, "") + out.text
            if out.finish_reason:
                reasons[out.request_id] = out.finish_reason
    return {i: (texts.get(i, ""), reasons[i]) for i in reasons}


def sampled(seed, spec, max_tokens=200):
    return SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed,
                          structured_outputs=spec)


def test_fifty_seeded_requests_under_a_schema_all_validate(generator):
    engine = Engine(generator, cache_blocks=512)
    results = run_all(engine, [(str(i), "A person as JSON: ", sampled(i, {"json": PERSON}))
                               for i in range(50)])
    answers = [json.loads(results[str(i)][0]) for i in range(50)]
    for answer in answers:
        jsonschema.validate(answer, PERSON)
    assert {reason for _, reason in results.values()} == {"stop"}
    assert len({json.dumps(a) for a in answers}) > 40  # seeds sample different answers
    # Compact: what json.dumps writes.
    assert all(results[str(i)][0] == json.dumps(answers[i], ensure_ascii=False)
               for i in range(50))
    assert engine.cache.used_blocks == 0


def test_json_objects_regexes_choices_and_grammars_hold(generator):
    engine = Engine(generator, cache_blocks=512)
    choices = ["yes", "no", "maybe later"]
    requests = []
    for i in range(8):
        # Any object: a random model's keys run long, so only its start is checked.
        requests += [(f"object{i}", "{", sampled(i, {"json_object": True}, max_tokens=2)),
                     (f"regex{i}", "id: ", sampled(i, {"regex": r"[0-9]{3}-[a-z]{2,4}"})),
                     (f"choice{i}", "answer: ", sampled(i, {"choice": choices})),
                     (f"grammar{i}", "sum: ",
                      sampled(i, {"grammar": 'start: num "+" num\nnum: /[1-9][0-9]{0,2}/'}))]
    results = run_all(engine, requests)
    for i in range(8):
        text, reason = results[f"object{i}"]
        assert (text, reason) in (("{}", "stop"), ('{"', "length")), text  # compact JSON
        assert re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", results[f"regex{i}"][0])
        assert results[f"choice{i}"] == (results[f"choice{i}"][0], "stop")
        assert results[f"choice{i}"][0] in choices
        assert re.fullmatch(r"[1-9][0-9]{0,2}\+[1-9][0-9]{0,2}", results[f"grammar{i}"][0])


def next_logits(generator, prompt):
    with torch.inference_mode():
        return generator.transformer(torch.tensor([generator.tokenizer.encode(prompt)]))[0, -1]


def test_a_greedy_choice_is_the_one_the_models_logits_prefer(generator):
    # Choices that differ in their first byte: the greedy pick is the best first byte.
    engine = Engine(generator, cache_blocks=64)
    for prompt in ("verdict: ", "The answer is ", "x"):
        logits = next_logits(generator, prompt)
        choices = ["alpha", "beta", "gamma", "delta"]
        expected = max(choices, key=lambda c: float(logits[ord(c[0])]))
        params = SamplingParams(max_tokens=20, temperature=0,
                                structured_outputs={"choice": choices})
        assert run_all(engine, [("c", prompt, params)]) == {"c": (expected, "stop")}


def test_unconstrained_neighbours_generate_what_they_do_alone(generator):
    free = [f"free{i}" for i in range(6)]
    prompts = ["chorus", "a", "serves many models", "0123456789", "the quick brown", "KV"]
    greedy = SamplingParams(max_tokens=24, temperature=0)
    alone = run_all(Engine(generator, cache_blocks=128),
                    [(i, p, greedy) for i, p in zip(free, prompts)])
    mixed = run_all(Engine(generator, cache_blocks=256),
                    [(i, p, greedy) for i, p in zip(free, prompts)]
                    + [(f"json{k}", "{", sampled(k, {"json": PERSON})) for k in range(6)])
    assert {i: mixed[i] for i in free} == alone


@pytest.mark.parametrize("spec, message", [
    ({"json": {"type": "string", "format": "emailx"}}, "structured_outputs.json: .*emailx"),
    ({"regex": "[a-z"}, "(?s)structured_outputs.regex: .*unclosed character class"),
    ({"grammar": "start: nothing_defined"}, "structured_outputs.grammar: .*nothing_defined"),
    ({"regex": "a", "choice": ["a"]}, "exactly one of the keys json, json_object"),
    ({"choice": []}, "structured_outputs.choice must be a non-empty list of strings"),
    ({"json_object": False}, "structured_outputs.json_object must be true"),
    ("{not json", "structured_outputs must be a JSON object"),
])
def test_bad_specs_are_refused_naming_what_is_wrong(generator, spec, message):
    engine = Engine(generator, cache_blocks=16)
    with pytest.raises(ValueError, match=message):
        engine.add("bad", "x", SamplingParams.from_dict({"structured_outputs": spec}))
    assert not engine.has_work()


def test_a_tokenizer_without_its_vocabulary_cannot_be_constrained(generator):
    class Opaque:
        eos_token_ids = ()
        encode = staticmethod(generator.tokenizer.encode)
        decode = staticmethod(generator.tokenizer.decode)

    class Model(generate.Llama3Generator):
        pass

    model = Model(generator.transformer)
    model.tokenizer = Opaque()
    engine = Engine(model, cache_blocks=16)
    with pytest.raises(ValueError, match="token_bytes\\(\\) or tokenizer_json"):
        engine.add("x", "x", SamplingParams(structured_outputs={"json_object": True}))
    engine.add("y", "x", SamplingParams(max_tokens=2, temperature=0))  # others still run
    assert len(run_all(engine, [])) == 1


def test_a_failing_matcher_fails_its_request_alone(generator):
    engine = Engine(generator, cache_blocks=64)
    engine.add("json", "{", sampled(0, {"json": PERSON}))
    engine.add("free", "chorus", SamplingParams(max_tokens=8, temperature=0))
    engine.step()  # both prefilled, one token each
    # A token the grammar refuses (as a resource limit would): its matcher errs.
    engine._ids["json"].constraint.consume(ord("z"))
    tokens = {}
    while engine.has_work():
        for out in engine.step():
            tokens[out.request_id] = tokens.get(out.request_id, 0) + len(out.token_ids)
    assert [request_id for request_id, _ in engine.failed] == ["json"]
    assert "structured output failed" in engine.failed[0][1]
    assert tokens == {"free": 7}  # the rest of its 8
    assert engine.cache.used_blocks == 0
