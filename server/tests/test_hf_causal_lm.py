"""Hugging Face causal LMs of six architectures served through transformers' own modeling
code with chorus' paged KV cache: tiny random-weight checkpoints made here by transformers
(Llama, Qwen2, Mistral, Gemma 3, Phi-3, GPT-NeoX, GPT-2; nothing downloaded), packaged by
examples/hf_causal_lm/package_causal_lm.py and served; greedy completions through the
`openai` client equal transformers' generate() token for token, one at a time and 8 at
once with mixed lengths. A checkpoint that cannot be served is refused naming why."""

import concurrent.futures
import json
import os
import re
import subprocess
import sys

import openai
import pytest
import torch

from conftest import ServerProcess
import embedding_models

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PACKAGER = os.path.join(ROOT, "examples", "hf_causal_lm", "package_causal_lm.py")
PROMPTS = ["chorus", "a", "the quick brown fox jumps over the lazy dog", "0123456789",
           "In the beginning was the word", "serve many models", "xyz" * 12, "KV cache"]
EOS = "<|endoftext|>"


def configs(vocab_size):
    import transformers
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)
    return {
        "llama": transformers.LlamaConfig(num_key_value_heads=2, **common),
        "qwen2": transformers.Qwen2Config(num_key_value_heads=2, **common),
        "mistral": transformers.MistralConfig(num_key_value_heads=2, sliding_window=128,
                                              **common),
        "gemma3": transformers.Gemma3TextConfig(num_key_value_heads=2, head_dim=16,
                                                sliding_window=64, **common),
        "phi3": transformers.Phi3Config(num_key_value_heads=2, pad_token_id=0, **common),
        "gpt_neox": transformers.GPTNeoXConfig(**common),
        "gpt2": transformers.GPT2Config(vocab_size=vocab_size, n_embd=64, n_layer=2, n_head=4,
                                        n_positions=256),
    }


def make_checkpoint(directory, config, seed):
    import transformers
    directory.mkdir(parents=True)
    tokenizer = embedding_models.write_tokenizer(directory, [EOS])
    eos = tokenizer.token_to_id(EOS)
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": EOS}))
    config.bos_token_id, config.eos_token_id, config.pad_token_id = None, eos, eos
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = eos
    model.save_pretrained(str(directory))
    return directory


def reference(directory, prompts, max_tokens):
    """transformers' greedy generate(), one prompt at a time, decoded as chorus does."""
    import tokenizers
    import transformers
    tokenizer = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    eos = model.generation_config.eos_token_id
    texts = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([tokenizer.encode(prompt).ids])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_tokens, pad_token_id=eos)
            new = [t for t in out[0, ids.shape[1]:].tolist()]
            new = new[:new.index(eos)] if eos in new else new
            texts.append(tokenizer.decode(new, skip_special_tokens=True))
    return texts


@pytest.fixture(scope="module")
def lm_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("hf_causal_lm")
    repo = work / "repository"
    (work / "probe").mkdir()  # the trained tokenizer's size (the same for every checkpoint)
    vocab = embedding_models.write_tokenizer(work / "probe", [EOS]).get_vocab_size()
    expected = {}
    for seed, (name, config) in enumerate(configs(vocab).items()):
        checkpoint = make_checkpoint(work / name, config, seed)
        (repo / name / "1").mkdir(parents=True)
        subprocess.run([sys.executable, PACKAGER, str(checkpoint),
                        str(repo / name / "1" / "model.pt")], check=True, capture_output=True)
        expected[name] = reference(checkpoint, PROMPTS, 16)
    process = ServerProcess(repo, interpreters=1)
    yield process, expected
    assert process.stop() == 0


def client_of(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused",
                         max_retries=0)


def complete(client, name, prompt):
    return client.completions.create(model=name, prompt=prompt, max_tokens=16,
                                     temperature=0).choices[0].text


@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral", "gemma3", "phi3", "gpt_neox",
                                  "gpt2"])
def test_greedy_completions_equal_transformers_generate(lm_server, name):
    server, expected = lm_server
    client = client_of(server)
    assert complete(client, name, PROMPTS[2]) == expected[name][2]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda p: complete(client, name, p), PROMPTS))
    assert answers == expected[name]


def test_structured_output_holds_with_a_checkpoints_own_tokenizer(lm_server):
    # The tokenizer.json vocabulary (BPE, multi-byte tokens, a real EOS), not bytes.
    server, _ = lm_server
    client = client_of(server)
    for name in ("qwen2", "gpt2"):
        answer = client.completions.create(
            model=name, prompt="pick one", max_tokens=16, temperature=0,
            extra_body={"guided_choice": ["yes", "no", "maybe later"]}).choices[0]
        assert (answer.text, answer.finish_reason) in (
            ("yes", "stop"), ("no", "stop"), ("maybe later", "stop"))
        for seed in range(3):
            answer = client.completions.create(
                model=name, prompt="code:", max_tokens=16, seed=seed,
                extra_body={"guided_regex": "[a-f]{2}-[0-9]{3}"}).choices[0]
            assert re.fullmatch("[a-f]{2}-[0-9]{3}", answer.text), answer.text


def test_the_models_are_listed(lm_server):
    server, _ = lm_server
    assert len(client_of(server).models.list().data) == 7


def test_an_architecture_that_cannot_be_served_is_refused_naming_why(tmp_path):
    import transformers
    config = transformers.Gemma2Config(vocab_size=300, hidden_size=64, intermediate_size=128,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=16,
                                       attn_logit_softcapping=50.0)
    checkpoint = make_checkpoint(tmp_path / "gemma2", config, 0)
    result = subprocess.run([sys.executable, PACKAGER, str(checkpoint),
                             str(tmp_path / "out.pt")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "model_type 'gemma2'" in result.stderr
    assert "logit soft-capping (softcap) is not supported" in result.stderr
    # ALiBi in its own attention code: transformers' interface never sees it.
    bloom = make_checkpoint(tmp_path / "bloom", transformers.BloomConfig(
        vocab_size=300, hidden_size=64, n_layer=2, n_head=4), 0)
    result = subprocess.run([sys.executable, PACKAGER, str(bloom), str(tmp_path / "b.pt")],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "model_type 'bloom'" in result.stderr
    assert "cannot be served by chorus' paged attention" in result.stderr
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "no_such_arch"}))
    result = subprocess.run([sys.executable, PACKAGER, str(tmp_path / "odd"),
                             str(tmp_path / "odd.pt")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "transformers cannot load model_type 'no_such_arch'" in result.stderr
    assert "Traceback" not in result.stderr
