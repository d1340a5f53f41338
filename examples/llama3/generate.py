"""Llama 3 as chorus serves an LLM: model.py's Transformer behind chorus.generation's
protocol (a step over a flattened batch that reads and writes the paged KV cache), with
its tokenizer. Applied from outside, as parallelize.py is: model.py stays the training
model, and this reuses its modules and weights as they are.
"""

from typing import List, Sequence

import torch
from torch import nn

import data
from chorus.generation import Engine, ModelShape, SamplingParams


class ByteTokenizer:
    """data.py's byte-level tokenizer (one token per byte). It has no end-of-sequence
    token of its own: generation stops at max_tokens or a stop string."""

    eos_token_ids: Sequence[int] = ()

    def encode(self, text: str) -> List[int]:
        return data.encode(text).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        return data.decode(ids)


def rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """model.apply_rotary_emb for one rotation per row: x [N, heads, head_dim], freqs
    [N, head_dim / 2] (complex)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs[:, None, :]).flatten(2).type_as(x)


class Llama3Generator(nn.Module):
    def __init__(self, transformer: nn.Module, tokenizer=None):
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer or ByteTokenizer()

    def model_shape(self) -> ModelShape:
        args = self.transformer.args
        return ModelShape(n_layers=args.n_layers, n_kv_heads=args.n_kv_heads or args.n_heads,
                          head_dim=args.dim // args.n_heads, vocab_size=args.vocab_size,
                          max_seq_len=args.max_seq_len)

    def forward(self, text: List[str]) -> List[str]:
        """Greedy continuations of `text` (16 tokens each): what a plain call does, and what
        packaging records as the signature; chorus-server drives the engine itself."""
        shape = self.model_shape()
        engine = Engine(self, cache_blocks=len(text) * -(-shape.max_seq_len // 16))
        for i, prompt in enumerate(text):
            engine.add(str(i), prompt, SamplingParams(max_tokens=16, temperature=0))
        answers = [""] * len(text)
        while engine.has_work():
            for out in engine.step():
                answers[int(out.request_id)] += out.text
        return answers

    def forward_step(self, tokens: torch.Tensor, positions: torch.Tensor,
                     attention) -> torch.Tensor:
        model = self.transformer
        h = model.tok_embeddings(tokens)
        freqs = model.freqs_cis[positions]
        for index, layer in enumerate(model.layers.values()):
            block = layer.attention
            x = layer.attention_norm(h)
            q = block.wq(x).view(len(tokens), -1, block.head_dim)
            k = block.wk(x).view(len(tokens), -1, block.head_dim)
            v = block.wv(x).view(len(tokens), -1, block.head_dim)
            out = attention(index, rotate(q, freqs), rotate(k, freqs), v)
            h = h + block.wo(out.reshape(len(tokens), -1))
            h = h + layer.feed_forward(layer.ffn_norm(h))
        return model.output(model.norm(h[attention.last_token_index])).float()
