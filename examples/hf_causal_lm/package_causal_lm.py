"""Packages a Hugging Face causal LM checkpoint of any architecture whose attention goes
through transformers' attention interface (Llama, Qwen2/3, Mistral, Gemma 3, Phi-3,
GPT-NeoX, GPT-2 and most others) for chorus-server's generation engines: the OpenAI
API and Triton's generate conventions, with the paged KV cache, continuous batching,
prefix caching and structured output.

    python3 package_causal_lm.py CHECKPOINT_DIR REPOSITORY/NAME/1/model.pt [--max-seq-len N]

CHECKPOINT_DIR holds config.json, the weights (safetensors), tokenizer.json (with
tokenizer_config.json for the chat template and special tokens, generation_config.json
for the end-of-sequence ids). The network is transformers' own, imported where the
archive runs (python/chorus/generation/transformers_lm.py plugs the cache in). Writes
REPOSITORY/NAME/config.json with a "generation" section unless one is there. For
Llama checkpoints examples/llama3/package_hf.py is the faster path (fused weights).
"""

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama3"))

from chorus.generation import Engine, SamplingParams  # noqa: E402
from chorus.generation.transformers_lm import TransformersCausalLM  # noqa: E402
from chorus.package import (PackagingError, PackagingRules, create_package,  # noqa: E402
                            installed_modules)
from hf_tokenizer import HfTokenizer  # noqa: E402


def _read_json(checkpoint: str, name: str) -> dict:
    path = os.path.join(checkpoint, name)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_tokenizer(checkpoint: str) -> HfTokenizer:
    path = os.path.join(checkpoint, "tokenizer.json")
    if not os.path.exists(path):
        raise PackagingError(f"{checkpoint} has no tokenizer.json (a fast tokenizer's file)")
    with open(path, encoding="utf-8") as f:
        tokenizer_json = f.read()
    eos = _read_json(checkpoint, "generation_config.json").get("eos_token_id")
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    return HfTokenizer(tokenizer_json, _read_json(checkpoint, "tokenizer_config.json"), eos)


def load_model(checkpoint: str):
    import transformers
    config = _read_json(checkpoint, "config.json")
    if not config:
        raise PackagingError(f"{checkpoint} has no config.json")
    what = f"model_type {config.get('model_type')!r} (architectures {config.get('architectures')})"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    except (ValueError, KeyError, OSError) as error:
        raise PackagingError(f"transformers cannot load {what} as a causal LM: "
                             f"{str(error).splitlines()[0]}") from None
    return model, what


def greedy_by_recomputation(model, prompts, max_tokens):
    """The model's own greedy tokens (its own attention, the whole sequence each time)."""
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = list(prompt)
            for _ in range(max_tokens):
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
            out.append(ids[len(prompt):])
    return out


def check_served(lm: TransformersCausalLM, what: str) -> None:
    """Two sequences through a paged engine at once, prefill and decodes, must give the
    model's own greedy tokens; PackagingError naming what is missing otherwise (an
    architecture whose attention bypasses transformers' interface, or needs inputs the
    paged attention does not apply)."""
    vocab = lm.model_shape().vocab_size
    prompts = [[i % vocab for i in range(1, 9)], [i % vocab for i in range(20, 25)]]
    expected = greedy_by_recomputation(lm.model, prompts, 4)
    try:
        lm.prepare()
        engine = Engine(lm, cache_blocks=8, block_size=4)
        for i, prompt in enumerate(prompts):
            engine.add(str(i), prompt, SamplingParams(max_tokens=4, temperature=0,
                                                      ignore_eos=True))
        got = [[], []]
        while engine.has_work():
            for out in engine.step():
                got[int(out.request_id)] += out.token_ids
    except (ValueError, RuntimeError, TypeError, AttributeError) as error:
        raise PackagingError(f"{what} cannot be served by chorus' paged attention: "
                             f"{str(error).splitlines()[0]}") from None
    if got != expected:
        raise PackagingError(
            f"{what} cannot be served by chorus' paged attention: a paged step's greedy "
            f"tokens {got} are not the model's own {expected} (its attention does not go "
            "through transformers' attention interface alone)")


def package(checkpoint: str, output: str, name: str, max_seq_len=None) -> dict:
    model, what = load_model(checkpoint)
    lm = TransformersCausalLM(model, load_tokenizer(checkpoint), max_seq_len)
    check_served(lm, what)
    manifest = create_package(output, lm, (["Hello"],), name=name, batchable=False,
                              input_names=["text_input"], output_names=["text_output"],
                              rules=PackagingRules(extern=installed_modules()),
                              source=os.path.abspath(checkpoint), progress=False)
    config = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(output))),
                          "config.json")
    if not os.path.exists(config):
        with open(config, "w") as f:
            json.dump({"generation": {}}, f)
    return manifest


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("output")
    parser.add_argument("--name", default=None, help="default: the output's model folder")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="the context to serve (default: the checkpoint's)")
    args = parser.parse_args()
    name = args.name or os.path.basename(os.path.dirname(os.path.dirname(
        os.path.abspath(args.output))))
    try:
        manifest = package(args.checkpoint, args.output, name, args.max_seq_len)
    except PackagingError as error:
        sys.exit(f"package_causal_lm: {error}")
    print(f"wrote {args.output}: {manifest['model']['name']}")


if __name__ == "__main__":
    main()
