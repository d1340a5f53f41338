"""A Llama 3 checkpoint in Hugging Face's layout (config.json, model.safetensors,
tokenizer.json with its chat template, generation_config.json), made here by
transformers with random weights and a tokenizer trained on the example corpus,
packaged by examples/llama3/package_hf.py and served: greedy answers through the
OpenAI API equal transformers' own generate() on the same weights and tokens. And a
chorus-trained model exported to that layout is what transformers reads."""

import json
import os
import sys

import openai
import pytest
import torch

from conftest import ServerProcess

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LLAMA = os.path.join(ROOT, "examples", "llama3")
sys.path.insert(0, LLAMA)

import hf_checkpoint  # noqa: E402
import model as llama  # noqa: E402
import package_hf  # noqa: E402

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]
# Llama 3 Instruct's chat template (its shape, without the tool-calling branches).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def write_tokenizer(directory):
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = open(os.path.join(LLAMA, "corpus.txt"), encoding="utf-8").read()
    tokenizer.train_from_iterator(corpus.splitlines(), trainer)
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
        "chat_template": CHAT_TEMPLATE}))
    eos = [tokenizer.token_to_id("<|end_of_text|>"), tokenizer.token_to_id("<|eot_id|>")]
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    return tokenizer.get_vocab_size()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hf") / "Llama-3-tiny"
    directory.mkdir()
    vocab = write_tokenizer(directory)
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper than the default init, so greedy choices are clear
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0, 0.3)
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory, model


def hf_greedy(model, ids, max_tokens, eos):
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                                                             dtype=torch.long),
                             max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[0])
    return out[0, len(ids):].tolist()


def test_the_loaded_checkpoint_computes_what_transformers_does(checkpoint):
    directory, model = checkpoint
    transformer = hf_checkpoint.load_transformer(str(directory))
    tokens = torch.randint(0, model.config.vocab_size, (2, 40),
                           generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(tokens).logits
        got = transformer(tokens)
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-4), (got - expected).abs().max()


def test_a_chorus_model_exported_is_what_transformers_reads(tmp_path):
    transformer = llama.build("debug", seed=5, vocab_size=256, n_kv_heads=4,
                              max_seq_len=64).eval()
    hf_checkpoint.save_checkpoint(transformer, str(tmp_path))
    model = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path)).eval()
    tokens = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        assert torch.allclose(model(tokens).logits, transformer(tokens), atol=1e-4, rtol=1e-4)
    reloaded = hf_checkpoint.load_transformer(str(tmp_path))
    with torch.inference_mode():
        assert torch.equal(reloaded(tokens), transformer(tokens))


@pytest.fixture(scope="module")
def hf_server(checkpoint, tmp_path_factory):
    directory, model = checkpoint
    repo = tmp_path_factory.mktemp("hf-serve") / "repository"
    (repo / "tiny" / "1").mkdir(parents=True)
    package_hf.package(str(directory), str(repo / "tiny" / "1" / "model.pt"), name="tiny")
    (repo / "tiny" / "config.json").write_text('{"generation": {"cache_blocks": 32}}')
    process = ServerProcess(repo, interpreters=2)
    yield process, hf_checkpoint.load_tokenizer(str(directory)), model
    assert process.stop() == 0


def test_served_greedy_answers_equal_transformers_generate(hf_server):
    server, tokenizer, model = hf_server
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1",
                           api_key="unused", max_retries=0)
    for prompt in ["The model", "chorus serves", "Once"]:
        ids = tokenizer.encode(prompt)
        assert ids[0] == tokenizer._tokenizer.token_to_id("<|begin_of_text|>")
        expected = hf_greedy(model, ids, 24, tokenizer.eos_token_ids)
        answer = client.completions.create(model="tiny", prompt=prompt, max_tokens=24,
                                           temperature=0)
        assert answer.choices[0].text == tokenizer.decode(expected), prompt
        assert answer.usage.prompt_tokens == len(ids)
        stopped = expected[-1] in tokenizer.eos_token_ids
        assert answer.choices[0].finish_reason == ("stop" if stopped else "length")

    messages = [{"role": "user", "content": "Say something."}]
    ids = tokenizer.encode(tokenizer.apply_chat_template(messages))
    expected = hf_greedy(model, ids, 20, tokenizer.eos_token_ids)
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=20,
                                          temperature=0)
    assert chat.choices[0].message.content == tokenizer.decode(expected)
    assert chat.usage.prompt_tokens == len(ids)
