"""The debug Llama 3 the generation tests serve, and the reference they hold it to:
greedy generation by full recomputation (no cache, no batching) in plain Python."""

import json
import os
import sys

import torch

from chorus.package import create_package

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "examples", "llama3"))

import generate  # noqa: E402
import model as llama  # noqa: E402


def debug_generator(max_seq_len=128):
    transformer = llama.build("debug", seed=3, vocab_size=256, max_seq_len=max_seq_len).eval()
    with torch.no_grad():  # attention that matters (python/tests/test_generation.py)
        for layer in transformer.layers.values():
            layer.attention.wo.weight.mul_(8)
            layer.attention.wq.weight.mul_(8 ** 0.5)
            layer.attention.wk.weight.mul_(8 ** 0.5)
    return generate.Llama3Generator(transformer)


def recompute_greedy(generator, prompt, max_tokens):
    tokens = generator.tokenizer.encode(prompt)
    start = len(tokens)
    with torch.inference_mode():
        for _ in range(max_tokens):
            tokens.append(int(generator.transformer(torch.tensor([tokens]))[0, -1].argmax()))
    return generator.tokenizer.decode(tokens[start:])


def package_llm(repository, generator, generation=None, name="llama3"):
    """Writes `generator` into `repository` as model `name`, served with the
    generation settings `generation` (config.json's "generation")."""
    version = repository / name / "1"
    version.mkdir(parents=True)
    create_package(str(version / "model.pt"), generator, (["chorus"],), name=name,
                   batchable=False, input_names=["text_input"], output_names=["text_output"],
                   progress=False)
    (repository / name / "config.json").write_text(
        json.dumps({"generation": generation or {}}))
