"""Llama 3 as chorus serves an LLM: model.py's Transformer behind chorus.generation's
protocol (a step over a flattened batch that reads and writes the paged KV cache), with
its tokenizer. Applied from outside, as parallelize.py is: model.py stays the training
model, and this reuses its modules and weights as they are.
"""

from typing import List, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import data
from chorus.generation import ModelShape
from chorus.generation.engine import greedy_continuations


class ByteTokenizer:
    """data.py's byte-level tokenizer (one token per byte). It has no end-of-sequence
    token of its own: generation stops at max_tokens or a stop string."""

    eos_token_ids: Sequence[int] = ()

    def encode(self, text: str) -> List[int]:
        return data.encode(text).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        return data.decode(ids)

    def token_bytes(self) -> List[bytes]:
        """Each token's bytes (structured output reads the vocabulary)."""
        return [bytes([i]) for i in range(data.VOCAB_SIZE)]


def rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """model.apply_rotary_emb for one rotation per row: x [N, heads, head_dim], freqs
    [N, head_dim / 2] (complex)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs[:, None, :]).flatten(2).type_as(x)


def fuse_linears(linears: Sequence[nn.Linear]) -> torch.Tensor:
    """One weight for Linear layers that read the same input (one matmul where there were
    several, as vLLM's fused QKV and gate-up projections). The layers' weights become
    views of it: no second copy, and the model's own forward is unchanged."""
    fused = torch.cat([linear.weight.detach() for linear in linears])
    start = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight = nn.Parameter(fused[start:start + rows], requires_grad=False)
        start += rows
    return fused


class Llama3Generator(nn.Module):
    def __init__(self, transformer: nn.Module, tokenizer=None):
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer or ByteTokenizer()
        # Per layer: q, k and v in one projection, the feed-forward's gate and up in one.
        self.qkv, self.gate_up = [], []
        for layer in transformer.layers.values():
            block, ffn = layer.attention, layer.feed_forward
            self.qkv.append(fuse_linears([block.wq, block.wk, block.wv]))
            self.gate_up.append(fuse_linears([ffn.w1, ffn.w3]))

    def model_shape(self) -> ModelShape:
        args = self.transformer.args
        return ModelShape(n_layers=args.n_layers, n_kv_heads=args.n_kv_heads or args.n_heads,
                          head_dim=args.dim // args.n_heads, vocab_size=args.vocab_size,
                          max_seq_len=args.max_seq_len)

    def forward(self, text: List[str]) -> List[str]:
        """Greedy continuations of `text` (16 tokens each): what a plain call does, and what
        packaging records as the signature; chorus-server drives the engine itself."""
        return greedy_continuations(self, text)

    def forward_step(self, tokens: torch.Tensor, positions: torch.Tensor,
                     attention) -> torch.Tensor:
        model = self.transformer
        h = model.tok_embeddings(tokens)
        freqs = model.freqs_cis[positions]
        for index, layer in enumerate(model.layers.values()):
            block, ffn = layer.attention, layer.feed_forward
            q_rows, kv_rows = block.wq.out_features, block.wk.out_features
            qkv = F.linear(layer.attention_norm(h), self.qkv[index])
            q, k, v = (part.view(len(tokens), -1, block.head_dim)
                       for part in qkv.split([q_rows, kv_rows, kv_rows], dim=-1))
            out = attention(index, rotate(q, freqs), rotate(k, freqs), v)
            h = h + block.wo(out.reshape(len(tokens), -1))
            gate, up = F.linear(layer.ffn_norm(h), self.gate_up[index]).chunk(2, dim=-1)
            h = h + ffn.w2(F.silu(gate) * up)
        return model.output(model.norm(h[attention.last_token_index])).float()
