"""Sampling parameters (one home for their names, defaults and limits) and sampling."""

import os
from dataclasses import dataclass, field, fields
from typing import List, Optional

import torch

from chorus.generation.structured import check_spec


@dataclass
class SamplingParams:
    """How one request picks its tokens. temperature 0 is greedy; top_k 0 and top_p 1
    keep every token; a seed makes sampling reproducible; max_tokens None runs to the
    end of the context (or a stop)."""
    max_tokens: Optional[int] = 16
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: Optional[int] = None
    stop: List[str] = field(default_factory=list)
    ignore_eos: bool = False
    # A JSON schema, regex, choice or grammar the output must follow (structured.py).
    structured_outputs: Optional[dict] = None

    @classmethod
    def from_dict(cls, values: dict) -> "SamplingParams":
        """From request parameters; ValueError naming an unknown or invalid one."""
        if not isinstance(values, dict):
            raise ValueError("sampling parameters must be an object of names and values")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown sampling parameter {unknown[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        values = dict(values)
        if isinstance(values.get("stop"), str):
            values["stop"] = [values["stop"]]
        if values.get("structured_outputs") is not None:
            values["structured_outputs"] = check_spec(values["structured_outputs"])
        params = cls(**values)
        params.validate()
        return params

    def validate(self) -> None:
        def need(ok, what):
            if not ok:
                raise ValueError(what)
        need(self.max_tokens is None
             or (isinstance(self.max_tokens, int) and not isinstance(self.max_tokens, bool)
                 and self.max_tokens >= 1),
             f"max_tokens must be a positive integer (got {self.max_tokens!r})")
        need(isinstance(self.temperature, (int, float)) and self.temperature >= 0,
             f"temperature must be >= 0 (got {self.temperature!r})")
        need(isinstance(self.top_k, int) and self.top_k >= 0,
             f"top_k must be an integer >= 0 (got {self.top_k!r})")
        need(isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1,
             f"top_p must be in (0, 1] (got {self.top_p!r})")
        need(self.seed is None or isinstance(self.seed, int),
             f"seed must be an integer (got {self.seed!r})")
        need(isinstance(self.stop, list) and all(isinstance(s, str) and s for s in self.stop),
             "stop must be a string or a list of non-empty strings")
        if self.structured_outputs is not None:
            check_spec(self.structured_outputs)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generator(self) -> torch.Generator:
        seed = self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little")
        return torch.Generator().manual_seed(seed & ((1 << 63) - 1))


def sample(logits: torch.Tensor, params: SamplingParams,
           generator: torch.Generator) -> int:
    """One token from `logits` [vocab] (fp32) as `params` say."""
    if params.greedy:
        return int(logits.argmax())
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.numel():
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1:
        ordered, order = logits.sort(descending=True)
        cumulative = ordered.softmax(-1).cumsum(-1)
        # Keep the smallest prefix whose mass reaches top_p (the first token always).
        drop = cumulative - ordered.softmax(-1) >= params.top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop),
                                    float("-inf"))
    return int(torch.multinomial(logits.softmax(-1), 1, generator=generator))
