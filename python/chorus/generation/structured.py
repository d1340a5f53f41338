"""Structured output: a request's tokens held to a JSON schema, to any JSON object, to a
regular expression, to one of a list of strings or to a grammar (Lark or GBNF), by a
mask over the vocabulary at each step, as vLLM's `structured_outputs` do.

The masks come from llguidance (guidance-ai's; vLLM's "guidance" backend and
llama.cpp's): it compiles nothing ahead per schema (a lexer and an Earley parser walk a
token trie, tens of microseconds a mask), so a request with a new schema costs its
neighbours in the batch nothing up front; and it ships one abi3 wheel without Python
dependencies, so the same package serves every Python the interpreters run. It is
imported only when a request asks for structure.

A spec (SamplingParams.structured_outputs) has exactly one of these keys:
    {"json": schema}            a JSON schema (an object, or its text)
    {"json_object": true}       any JSON object
    {"regex": pattern}          Rust regex syntax, matched whole
    {"choice": [str, ...]}      one of the strings
    {"grammar": text}           Lark (llguidance's dialect) or GBNF
JSON comes out compact (", " and ": " between items, no other whitespace) unless the
schema's own "x-guidance" options say otherwise.
"""

import json
from typing import Any, List, Sequence

import torch

KINDS = ("json", "json_object", "regex", "choice", "grammar")
# What OpenAI's and Python's json.dumps write; a schema's x-guidance options win.
JSON_DEFAULTS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def check_spec(spec) -> dict:
    """`spec` (an object, or its JSON text) checked for shape; ValueError naming what is
    wrong. The grammar itself is checked when a Constraint is made."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            raise ValueError("structured_outputs must be a JSON object") from None
    if isinstance(spec, dict):  # vLLM's model_dump() leaves the other kinds as null
        spec = {key: value for key, value in spec.items() if value is not None}
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise ValueError("structured_outputs must have exactly one of the keys "
                         f"{', '.join(KINDS)}")
    kind, value = next(iter(spec.items()))
    valid = {"json": isinstance(value, (dict, str)),
             "json_object": value is True,
             "regex": isinstance(value, str) and value != "",
             "choice": (isinstance(value, list) and value != []
                        and all(isinstance(c, str) for c in value)),
             "grammar": isinstance(value, str) and value != ""}[kind]
    if not valid:
        need = {"json": "a JSON schema object", "json_object": "true",
                "regex": "a non-empty string", "choice": "a non-empty list of strings",
                "grammar": "a non-empty grammar text (Lark or GBNF)"}[kind]
        raise ValueError(f"structured_outputs.{kind} must be {need}")
    return spec


def _llguidance():
    try:
        import llguidance
    except ImportError:
        raise ValueError("structured output needs the llguidance package in the serving "
                         "Python (tools/requirements pins it)") from None
    return llguidance


class Vocabulary:
    """A model's vocabulary as llguidance reads it, made on the first structured request.
    The tokenizer provides either `tokenizer_json` (a Hugging Face tokenizers file's
    text) or `token_bytes()` (each id's bytes). A vocabulary without an end-of-sequence
    token gets a virtual one past the logits: a grammar that is complete ends the
    request instead."""

    def __init__(self, tokenizer, logits_width: int):
        self.tokenizer = tokenizer
        self.logits_width = logits_width
        self._llg_tokenizer: Any = None  # llguidance.LLTokenizer, made once

    def _build(self):
        llg = _llguidance()
        eos = list(self.tokenizer.eos_token_ids)
        if isinstance(getattr(self.tokenizer, "tokenizer_json", None), str):
            return llg.LLTokenizer(self.tokenizer.tokenizer_json,
                                   n_vocab=max(self.logits_width, 1), eos_token=eos or None)
        token_bytes = getattr(self.tokenizer, "token_bytes", None)
        if not callable(token_bytes):
            raise ValueError("structured output needs the model's tokenizer to provide "
                             "token_bytes() or tokenizer_json (its vocabulary)")
        tokens = list(token_bytes())
        if not eos:  # past every logits column, so it is never sampled
            tokens += [b""] * max(0, self.logits_width - len(tokens))
            eos = [len(tokens)]
            tokens.append(b"")
        return llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped(self.tokenizer, tokens, eos[0])))

    def constraint(self, spec: dict) -> "Constraint":
        """A fresh matcher for `spec` (checked); ValueError with llguidance's message for
        a schema, regex or grammar it cannot take."""
        llg = _llguidance()
        if self._llg_tokenizer is None:
            self._llg_tokenizer = self._build()
        tokenizer = self._llg_tokenizer
        kind, value = next(iter(check_spec(spec).items()))
        try:
            if kind in ("json", "json_object"):
                schema = {"type": "object"} if kind == "json_object" else value
                grammar = llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_DEFAULTS)
            else:
                grammar = llg.grammar_from(kind, json.dumps(value) if kind == "choice" else value)
        except ValueError as error:
            raise ValueError(f"structured_outputs.{kind}: {error}") from None
        matcher = llg.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"structured_outputs.{kind}: {matcher.get_error()}")
        return Constraint(matcher, tokenizer.vocab_size)


class Constraint:
    """One request's matcher: which tokens may come next, and the tokens that came."""

    def __init__(self, matcher, vocab_size: int):
        self.matcher = matcher
        self.vocab_size = vocab_size

    def consume(self, token: int) -> None:
        """Advances the matcher; a token it refuses (or a limit it hits) leaves it in its
        error state, which `error` reports."""
        self.matcher.consume_token(token)

    @property
    def error(self) -> str:
        """Why the matcher failed ("" while it has not)."""
        return self.matcher.get_error() if self.matcher.is_error() else ""

    @property
    def done(self) -> bool:
        """The grammar is complete and admits nothing more: the request ends ("stop")."""
        return not self.matcher.is_error() and self.matcher.is_stopped()


def allowed_tokens(constraints: Sequence[Constraint], logits_width: int) -> torch.Tensor:
    """[len(constraints), logits_width] bool: the tokens each constraint admits next
    (columns past its vocabulary are not)."""
    words = (max(c.vocab_size for c in constraints) + 31) // 32
    bitmask = torch.zeros(len(constraints), words, dtype=torch.int32)
    for row, constraint in enumerate(constraints):
        constraint.matcher.unsafe_compute_mask_ptr(bitmask[row].data_ptr(), words * 4)
    bits = ((bitmask.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1).flatten(1)
    allowed = torch.zeros(len(constraints), logits_width, dtype=torch.bool)
    width = min(logits_width, bits.shape[1])
    allowed[:, :width] = bits[:, :width].bool()
    return allowed


def mask_rows(logits: torch.Tensor, rows: List[int],
              constraints: Sequence[Constraint]) -> torch.Tensor:
    """The `rows` of `logits` with the tokens their constraints forbid at -inf (a new
    tensor; `logits` is left alone)."""
    allowed = allowed_tokens(constraints, logits.shape[-1]).to(logits.device)
    picked = logits[torch.tensor(rows, device=logits.device)]
    return picked.masked_fill(~allowed, float("-inf"))


class _Wrapped:
    """A token_bytes() tokenizer as llguidance's TokenizerWrapper reads it."""

    def __init__(self, tokenizer, tokens: List[bytes], eos: int):
        self.tokenizer, self.tokens = tokenizer, tokens
        self.eos_token_id, self.bos_token_id = eos, None
        self.special_token_ids = [i for i, t in enumerate(tokens) if t == b""]

    def __call__(self, text) -> List[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return list(self.tokenizer.encode(text))
