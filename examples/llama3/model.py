"""Llama 3, as torchtitan writes it: single-device, no parallelism in here.

RMSNorm computed in fp32, interleaved (Meta-style) rotary embeddings with
theta 500000, grouped-query attention (repeat_kv), SwiGLU feed-forward sized
with multiple_of / ffn_dim_multiplier, causal attention, depth-scaled init.
Parallelism is applied from outside (parallelize.py). Views use -1 for the
head count, so a tensor-parallel rank with fewer local heads runs unchanged.
"""

import math
from dataclasses import dataclass, replace
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: Optional[int] = None
    vocab_size: int = 128256
    multiple_of: int = 256  # SwiGLU hidden size is a multiple of this
    ffn_dim_multiplier: Optional[float] = None
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    # Llama 3.1's long-context rope scaling ({factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings}), as a checkpoint's config.json gives it.
    rope_scaling: Optional[dict] = None
    ffn_hidden_dim: Optional[int] = None  # a checkpoint's size; else from multiple_of
    max_seq_len: int = 2048
    depth_init: bool = True  # init std of output projections shrinks with depth


CONFIGS = {
    "debug": ModelArgs(dim=256, n_layers=6, n_heads=16, vocab_size=2048, multiple_of=256),
    # Llama 3.2 1B's shape: 1.50B parameters here (its output layer is untied; 1.24B tied).
    "1B": ModelArgs(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.5,
                    multiple_of=256, vocab_size=128256),
    "8B": ModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.3,
                    multiple_of=1024, vocab_size=128256),
}


def config(name: str, **overrides) -> ModelArgs:
    """A named config, with fields overridden (e.g. n_kv_heads=4 for GQA)."""
    return replace(CONFIGS[name], **overrides)


def trunc_normal_(tensor, std, generator, a=-2.0, b=2.0):
    """Truncated normal init drawn from `generator` (inverse-CDF sampling).

    An explicit generator keeps init deterministic while several interpreters
    share libtorch's default one.
    """
    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    low, high = cdf(a / std), cdf(b / std)
    with torch.no_grad():
        tensor.uniform_(2 * low - 1, 2 * high - 1, generator=generator)
        tensor.erfinv_().mul_(std * math.sqrt(2.0)).clamp_(min=a, max=b)
    return tensor


def scale_frequencies(freqs: torch.Tensor, scaling: dict) -> torch.Tensor:
    """Llama 3.1's rope scaling: long wavelengths slowed by `factor`, short ones kept,
    a smooth blend between."""
    factor, old_context = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelen = 2 * math.pi / freqs
    smooth = (old_context / wavelen - low) / (high - low)
    blended = (1 - smooth) * freqs / factor + smooth * freqs
    scaled = torch.where(wavelen > old_context / low, freqs / factor, blended)
    return torch.where(wavelen < old_context / high, freqs, scaled)


def precompute_freqs_cis(dim: int, end: int, theta: float,
                         scaling: Optional[dict] = None) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    if scaling:
        freqs = scale_frequencies(freqs, scaling)
    t = torch.arange(end, dtype=torch.float32)
    return torch.polar(torch.ones(end, dim // 2), torch.outer(t, freqs))


def apply_rotary_emb(xq, xk, freqs_cis):
    # Interleaved pairs (x0, x1), (x2, x3), ... rotate as complex numbers.
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * freqs).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(bs, seqlen, n_kv_heads, head_dim) -> (bs, seqlen, n_kv_heads * n_rep, head_dim)."""
    if n_rep == 1:
        return x
    bs, seqlen, n_kv_heads, head_dim = x.shape
    return x[:, :, :, None, :].expand(bs, seqlen, n_kv_heads, n_rep, head_dim).reshape(
        bs, seqlen, n_kv_heads * n_rep, head_dim)


def causal_attention(q, k, v):
    """softmax(q k^T / sqrt(d) + causal mask) v over (bs, heads, seqlen, head_dim)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    seqlen = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.full((seqlen, seqlen), float("-inf"), device=q.device).triu(1)
    return torch.matmul(F.softmax(scores.float() + mask, dim=-1).type_as(q), v)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight

    def reset_parameters(self):
        nn.init.ones_(self.weight)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads or args.n_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def init_weights(self, init_std: float, generator):
        for linear in (self.wq, self.wk, self.wv):
            trunc_normal_(linear.weight, 0.02, generator)
        trunc_normal_(self.wo.weight, init_std, generator)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        output = causal_attention(xq.transpose(1, 2), keys.transpose(1, 2),
                                  values.transpose(1, 2))
        return self.wo(output.transpose(1, 2).contiguous().view(bs, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int,
                 ffn_dim_multiplier: Optional[float], exact_hidden_dim: Optional[int] = None):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        if ffn_dim_multiplier is not None:
            hidden_dim = int(ffn_dim_multiplier * hidden_dim)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        hidden_dim = exact_hidden_dim or hidden_dim
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def init_weights(self, init_std: float, generator):
        trunc_normal_(self.w1.weight, 0.02, generator)
        for linear in (self.w2, self.w3):
            trunc_normal_(linear.weight, init_std, generator)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of,
                                        args.ffn_dim_multiplier, args.ffn_hidden_dim)
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)
        depth = layer_id + 1 if args.depth_init else args.n_layers
        self.weight_init_std = 0.02 / (2 * depth) ** 0.5

    def init_weights(self, generator):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std, generator)
        self.feed_forward.init_weights(self.weight_init_std, generator)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.register_buffer("freqs_cis", precompute_freqs_cis(
            args.dim // args.n_heads, args.max_seq_len * 2, args.rope_theta, args.rope_scaling),
            persistent=False)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, args)
                                     for i in range(args.n_layers)})
        self.norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def init_weights(self, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.tok_embeddings.weight.normal_(0.0, 1.0, generator=generator)
            for layer in self.layers.values():
                layer.init_weights(generator)
            self.norm.reset_parameters()
            final_std = self.args.dim ** -0.5
            trunc_normal_(self.output.weight, final_std, generator, a=-3 * final_std,
                          b=3 * final_std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[: tokens.shape[1]]
        for layer in self.layers.values():
            h = layer(h, freqs_cis)
        return self.output(self.norm(h)).float()


def build(name: str = "debug", seed: int = 0, **overrides) -> Transformer:
    """A Transformer of config `name`, deterministically initialized from `seed`."""
    model = Transformer(config(name, **overrides))
    model.init_weights(seed)
    return model


def count_params(model: nn.Module, exclude_embedding: bool = False) -> int:
    total = sum(p.numel() for p in model.parameters())
    if exclude_embedding:
        total -= model.tok_embeddings.weight.numel()
    return total
