"""A Hugging Face transformers causal LM behind chorus.generation's protocol: the
checkpoint's own modeling code (transformers'), its attention routed through chorus'
paged KV cache by transformers' public attention interface, so any architecture whose
attention goes through that interface serves with continuous batching and prefix
caching, and no architecture's code is copied here.

    lm = TransformersCausalLM(AutoModelForCausalLM.from_pretrained(path), tokenizer)

A step's flattened batch runs as one sequence of N tokens with each token's own
position (position_ids), so the model applies its rotary or learned position
embeddings itself; every attention layer hands its queries, keys and values (after
those embeddings) to the step's BatchAttention, which keeps each sequence to its own
cache. transformers builds no mask for an attention implementation it does not know.
"""

import threading
from typing import Any, List, Optional

import torch

from chorus.generation.protocol import ModelShape

ATTENTION = "chorus_paged"
# Attention inputs the paged attention does not apply: refused, never ignored.
UNSUPPORTED = {"softcap": "logit soft-capping", "s_aux": "attention sinks",
               "sinks": "attention sinks", "position_bias": "a position bias",
               "alibi": "ALiBi"}
_step = threading.local()  # the running step's BatchAttention, per engine thread


def paged_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None,
                    dropout: float = 0.0, **kwargs: Any):
    """transformers' attention signature: query [1, heads, N, head_dim], key and value
    [1, kv_heads, N, head_dim]; returns ([1, N, heads, head_dim], None)."""
    for name in UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise ValueError(f"attention with {UNSUPPORTED[name]} ({name}) is not supported by "
                             "chorus' paged attention")
    if attention_mask is not None:
        raise ValueError("the model passes its own attention mask (an attention bias): not "
                         "supported by chorus' paged attention")
    attention = getattr(_step, "attention", None)
    if attention is None:
        raise RuntimeError(f"{ATTENTION} attention runs only inside an engine step")
    out = attention(module.layer_idx, query[0].transpose(0, 1), key[0].transpose(0, 1),
                    value[0].transpose(0, 1), scale=scaling)
    return out.unsqueeze(0), None


def register() -> None:
    """Makes ATTENTION known to transformers (in each interpreter, once)."""
    from transformers import AttentionInterface
    AttentionInterface.register(ATTENTION, paged_attention)


def _config_value(config, *names, default=None):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


class TransformersCausalLM(torch.nn.Module):
    """`model`: a transformers *ForCausalLM; `tokenizer`: chorus.generation's Tokenizer
    protocol over the checkpoint's tokenizer; `max_seq_len`: the served context (at most
    the model's, and its sliding window where it has one: within it, attention over the
    whole context is the model's own)."""

    def __init__(self, model: torch.nn.Module, tokenizer, max_seq_len: Optional[int] = None):
        super().__init__()
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
            else model.config
        self.model = model
        self.tokenizer = tokenizer
        heads = _config_value(config, "num_attention_heads", "n_head")
        hidden = _config_value(config, "hidden_size", "n_embd")
        limit = _config_value(config, "max_position_embeddings", "n_positions", default=2048)
        window = _config_value(config, "sliding_window")
        if window and getattr(config, "use_sliding_window", True) is not False:
            limit = min(limit, window)
        self.shape = ModelShape(
            n_layers=_config_value(config, "num_hidden_layers", "n_layer"),
            n_kv_heads=_config_value(config, "num_key_value_heads", default=heads),
            head_dim=_config_value(config, "head_dim", default=hidden // heads),
            vocab_size=config.vocab_size, max_seq_len=min(max_seq_len or limit, limit),
            dtype=next(model.parameters()).dtype)

    def __setstate__(self, state):
        super().__setstate__(state)
        self.prepare()

    def prepare(self) -> "TransformersCausalLM":
        """Switches the model's attention to the paged cache (also done on unpickling);
        ValueError when the architecture does not take it."""
        register()
        self.model.set_attn_implementation(ATTENTION)
        if getattr(self.model.config, "_attn_implementation", None) != ATTENTION:
            raise ValueError(f"{type(self.model).__name__} does not take an attention "
                             "implementation through transformers' attention interface")
        return self

    def forward(self, text: List[str]) -> List[str]:
        """Greedy continuations of `text` (16 tokens each)."""
        from chorus.generation.engine import greedy_continuations
        return greedy_continuations(self, text)

    def model_shape(self) -> ModelShape:
        return self.shape

    def forward_step(self, tokens: torch.Tensor, positions: torch.Tensor,
                     attention) -> torch.Tensor:
        _step.attention = attention
        try:
            out = self.model(input_ids=tokens[None], position_ids=positions[None],
                             use_cache=False, logits_to_keep=attention.last_token_index)
        finally:
            _step.attention = None
        return out.logits[0].float()
