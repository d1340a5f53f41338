"""What a generative model provides to be served by chorus (a structural protocol).

    class MyModel(torch.nn.Module):
        tokenizer: Tokenizer                   # shipped in the archive with the model
        def model_shape(self) -> ModelShape:   # what the KV cache must hold
            ...
        def forward_step(self, tokens, positions, attention) -> torch.Tensor:
            ...

forward_step runs one step for a batch of sequences, flattened: `tokens` and
`positions` are [N] (each sequence's new tokens, one after another: a whole
prompt or a chunk of one, or the one token a decode step feeds). Inside each
attention layer the model calls attention(layer, q, k, v) with q [N, heads,
head_dim] and k, v [N, kv_heads, head_dim] (after rotary embedding); chorus
writes k and v into the cache and returns the attention output [N, heads,
head_dim], each token seeing its own sequence's cache up to itself. The model
returns the logits of attention.last_token_index ([S] rows of the flattened
batch), [S, vocab], in fp32.

For structured output (structured.py) the tokenizer also gives its vocabulary, one of:
`tokenizer_json` (a Hugging Face tokenizers file's text) or `token_bytes()` (each token
id's bytes, b"" for a special token). Without either, a structured request is refused.
"""

from dataclasses import dataclass
from typing import List, Protocol, Sequence, runtime_checkable

import torch


@dataclass(frozen=True)
class ModelShape:
    n_layers: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    max_seq_len: int  # prompt plus generated tokens
    dtype: torch.dtype = torch.float32


@runtime_checkable
class Tokenizer(Protocol):
    eos_token_ids: Sequence[int]

    def encode(self, text: str) -> List[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@runtime_checkable
class GenerativeModel(Protocol):
    tokenizer: Tokenizer

    def model_shape(self) -> ModelShape: ...

    def forward_step(self, tokens: torch.Tensor, positions: torch.Tensor,
                     attention) -> torch.Tensor: ...


def is_generative(model) -> bool:
    return (callable(getattr(model, "forward_step", None))
            and callable(getattr(model, "model_shape", None))
            and isinstance(getattr(model, "tokenizer", None), Tokenizer))
