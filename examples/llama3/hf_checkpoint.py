"""Llama 3 checkpoints in Hugging Face's layout, read into model.py's Transformer and
written from it: config.json, model.safetensors (or shards listed in
model.safetensors.index.json), tokenizer.json with tokenizer_config.json, and
generation_config.json for the EOS tokens.

    generator = load_generator("Llama-3.2-1B/")      # Llama3Generator, with its tokenizer
    save_checkpoint(transformer, "exported/")        # a chorus-trained model, same layout

Hugging Face stores each head's query and key rows with the rotary pairs split into
halves (rotate_half); model.py interleaves them (Meta's layout): the rows are permuted
on the way in and back on the way out.
"""

import json
import os
from typing import Dict, Optional

import torch
from safetensors.torch import load_file, save_file

import model as llama
from generate import Llama3Generator
from hf_tokenizer import HfTokenizer


def _read_json(directory: str, name: str) -> Optional[dict]:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def model_args(config: dict, max_seq_len: Optional[int] = None) -> llama.ModelArgs:
    """model.py's arguments for a Hugging Face LlamaConfig (config.json)."""
    if config.get("model_type", "llama") != "llama":
        raise ValueError(f"not a Llama checkpoint (model_type {config.get('model_type')!r})")
    # transformers 5 writes rope_parameters (theta inside); earlier ones rope_theta and
    # rope_scaling.
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    theta = rope.pop("rope_theta", config.get("rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "llama3"):
        raise ValueError(f"rope type {kind!r} is not Llama 3's")
    scaling = rope if kind == "llama3" else None
    head_dim = config.get("head_dim")
    if head_dim and head_dim * config["num_attention_heads"] != config["hidden_size"]:
        raise ValueError(f"head_dim {head_dim} is not hidden_size / num_attention_heads")
    return llama.ModelArgs(
        dim=config["hidden_size"], n_layers=config["num_hidden_layers"],
        n_heads=config["num_attention_heads"],
        n_kv_heads=config.get("num_key_value_heads"), vocab_size=config["vocab_size"],
        ffn_hidden_dim=config["intermediate_size"], norm_eps=config.get("rms_norm_eps", 1e-5),
        rope_theta=theta, rope_scaling=scaling,
        max_seq_len=max_seq_len or config.get("max_position_embeddings", 2048))


def _to_meta(weight: torch.Tensor, heads: int) -> torch.Tensor:
    rows, columns = weight.shape
    return weight.view(heads, 2, rows // heads // 2, columns).transpose(1, 2).reshape(rows,
                                                                                      columns)


def _to_hf(weight: torch.Tensor, heads: int) -> torch.Tensor:
    rows, columns = weight.shape
    return weight.view(heads, rows // heads // 2, 2, columns).transpose(1, 2).reshape(rows,
                                                                                      columns)


# Hugging Face's name of each per-layer weight, by model.py's.
_LAYER_NAMES = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}


def _hf_name(name: str) -> str:
    if name.startswith("layers."):
        _, index, rest = name.split(".", 2)
        return f"model.layers.{index}.{_LAYER_NAMES[rest]}"
    return {"tok_embeddings.weight": "model.embed_tokens.weight",
            "norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}[name]


def _read_weights(directory: str) -> Dict[str, torch.Tensor]:
    index = _read_json(directory, "model.safetensors.index.json")
    files = sorted(set(index["weight_map"].values())) if index else ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(load_file(os.path.join(directory, name)))
    return weights


def load_transformer(directory: str, max_seq_len: Optional[int] = None,
                     dtype: torch.dtype = torch.float32) -> llama.Transformer:
    """The checkpoint in `directory` as a Transformer (weights in `dtype`). ValueError
    for a checkpoint that is not Llama's or whose weights do not match its config."""
    config = _read_json(directory, "config.json")
    if config is None:
        raise ValueError(f"{directory} has no config.json")
    args = model_args(config, max_seq_len)
    with torch.device("meta"):
        transformer = llama.Transformer(args)
    weights = _read_weights(directory)
    if "lm_head.weight" not in weights and config.get("tie_word_embeddings"):
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    kv_heads = args.n_kv_heads or args.n_heads
    state = {}
    for name in transformer.state_dict():
        hf_name = _hf_name(name)
        if hf_name not in weights:
            raise ValueError(f"the checkpoint lacks {hf_name}")
        weight = weights[hf_name].to(dtype)
        if name.endswith("attention.wq.weight"):
            weight = _to_meta(weight, args.n_heads)
        elif name.endswith("attention.wk.weight"):
            weight = _to_meta(weight, kv_heads)
        state[name] = weight
    transformer = transformer.to_empty(device="cpu")
    transformer.load_state_dict(state, strict=True)
    transformer.freqs_cis = llama.precompute_freqs_cis(
        args.dim // args.n_heads, args.max_seq_len * 2, args.rope_theta, args.rope_scaling)
    return transformer.eval()


def load_tokenizer(directory: str) -> HfTokenizer:
    tokenizer_json = os.path.join(directory, "tokenizer.json")
    if not os.path.exists(tokenizer_json):
        raise ValueError(f"{directory} has no tokenizer.json")
    generation = _read_json(directory, "generation_config.json") or {}
    config = _read_json(directory, "config.json") or {}
    eos = generation.get("eos_token_id", config.get("eos_token_id"))
    eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    with open(tokenizer_json, encoding="utf-8") as f:
        return HfTokenizer(f.read(), _read_json(directory, "tokenizer_config.json"), eos_ids)


def load_generator(directory: str, max_seq_len: Optional[int] = None) -> Llama3Generator:
    """The checkpoint as chorus serves it: the Transformer behind chorus.generation's
    protocol, with the checkpoint's tokenizer."""
    return Llama3Generator(load_transformer(directory, max_seq_len), load_tokenizer(directory))


def save_checkpoint(transformer: llama.Transformer, directory: str) -> None:
    """Writes `transformer` in Hugging Face's layout (config.json, model.safetensors):
    what transformers' LlamaForCausalLM.from_pretrained and load_transformer read."""
    args = transformer.args
    kv_heads = args.n_kv_heads or args.n_heads
    os.makedirs(directory, exist_ok=True)
    weights = {}
    for name, weight in transformer.state_dict().items():
        weight = weight.detach().contiguous()
        if name.endswith("attention.wq.weight"):
            weight = _to_hf(weight, args.n_heads)
        elif name.endswith("attention.wk.weight"):
            weight = _to_hf(weight, kv_heads)
        weights[_hf_name(name)] = weight.contiguous()
    save_file(weights, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    layer = next(iter(transformer.layers.values()))
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": args.dim, "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads, "num_key_value_heads": kv_heads,
        "intermediate_size": layer.feed_forward.w1.out_features,
        "vocab_size": args.vocab_size, "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta, "rope_scaling": args.rope_scaling,
        "max_position_embeddings": args.max_seq_len, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "torch_dtype": str(next(transformer.parameters()).dtype).replace("torch.", ""),
    }
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
