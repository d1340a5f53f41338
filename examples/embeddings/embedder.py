"""A Hugging Face checkpoint behind a text-to-vector signature, served by chorus-server's
dynamic batcher and OpenAI's /v1/embeddings (docs/server.md):

    forward(text: List[str]) -> (embedding [B, D] fp32, prompt_tokens [B] int64)

The network is transformers' own (AutoModel: an encoder such as BERT, or a decoder's
base model), the tokenizer the checkpoint's tokenizer.json (the `tokenizers` library),
the pooling what its sentence-transformers config says (mean or CLS), last-token for a
decoder. Shipped in the archive with its weights; transformers and tokenizers are
imported where the archive runs.
"""

from typing import List, Optional

import torch
import torch.nn.functional as F

POOLINGS = ("mean", "cls", "last")


class TextEmbedder(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, tokenizer_json: str, pooling: str,
                 normalize: bool, max_length: int, pad_token_id: int):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)} (got {pooling!r})")
        self.model = model
        self.tokenizer_json = tokenizer_json
        self.pooling = pooling
        self.normalize = normalize
        self.max_length = max_length
        self.pad_token_id = pad_token_id
        self._tokenizer = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_tokenizer"] = None  # a Rust object: rebuilt from its JSON where it runs
        return state

    def tokenizer(self):
        if self._tokenizer is None:
            import tokenizers
            tokenizer = tokenizers.Tokenizer.from_str(self.tokenizer_json)
            tokenizer.enable_truncation(self.max_length)
            tokenizer.no_padding()
            self._tokenizer = tokenizer
        return self._tokenizer

    def token_ids(self, text: List[str]) -> List[List[int]]:
        return [encoding.ids for encoding in self.tokenizer().encode_batch(list(text))]

    def forward(self, text: List[str]):
        ids = self.token_ids(text)
        lengths = torch.tensor([len(i) for i in ids], dtype=torch.int64)
        width = max(1, int(lengths.max()))
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.int64)
        mask = torch.zeros((len(ids), width), dtype=torch.int64)
        for row, row_ids in enumerate(ids):
            input_ids[row, :len(row_ids)] = torch.tensor(row_ids, dtype=torch.int64)
            mask[row, :len(row_ids)] = 1
        with torch.inference_mode():
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            pooled = pool(hidden.float(), mask, self.pooling)
            if self.normalize:
                pooled = F.normalize(pooled, dim=-1)
        return pooled, lengths


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """[B, T, D] hidden states, [B, T] attention mask (right-padded) -> [B, D]."""
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "last":
        last = (mask.sum(1) - 1).clamp(min=0)
        return hidden[torch.arange(hidden.shape[0]), last]
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def pad_id(tokenizer_config: dict, vocab: dict) -> Optional[int]:
    token = tokenizer_config.get("pad_token")
    if isinstance(token, dict):
        token = token.get("content")
    return vocab.get(token) if token is not None else None
