"""Continuous batching over a paged KV cache: requests join the running batch at the next
step and leave it when they finish; a long prompt is prefilled in chunks beside the
running decodes, so it does not stall them.

    engine = Engine(model, cache_blocks=256)
    engine.add("r1", "Once upon", SamplingParams(max_tokens=32, temperature=0))
    while engine.has_work():
        for out in engine.step():
            print(out.request_id, out.text, out.finish_reason)

Not thread-safe: one thread (chorus-server's loop for this interpreter) drives it.
"""

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Sequence, Tuple, Union

import torch

from chorus.generation.kv_cache import BatchAttention, CacheFull, PagedKVCache, SequenceSlice
from chorus.generation.protocol import is_generative
from chorus.generation.sampling import SamplingParams, sample
from chorus.generation.structured import Constraint, Vocabulary, mask_rows


@dataclass
class StepOutput:
    """What one request got from a step."""
    request_id: str
    token_ids: List[int]           # new tokens (an EOS that ended it included)
    text: str                      # new text; held back while it may be part of a stop string
    finish_reason: Optional[str]   # None while running; "stop" or "length" when done
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Request:
    request_id: str
    prompt: List[int]
    params: SamplingParams
    max_tokens: int
    generator: torch.Generator
    output: List[int] = field(default_factory=list)
    block_table: List[int] = field(default_factory=list)
    cached: int = 0        # leading tokens whose keys and values are in the cache
    digests: List[bytes] = field(default_factory=list)  # of its full blocks (prefix caching)
    emitted: str = ""      # text already handed out
    preemptions: int = 0
    constraint: Optional[Constraint] = None  # structured output's matcher

    @property
    def tokens(self) -> List[int]:
        return self.prompt + self.output


class Engine:
    def __init__(self, model, cache_blocks: int = 512, block_size: int = 16,
                 max_running: int = 64, max_step_tokens: int = 512, prefill_chunk: int = 256,
                 prefix_caching: bool = True):
        if not is_generative(model):
            raise TypeError("the model does not implement chorus.generation's protocol "
                            "(tokenizer, model_shape(), forward_step())")
        self.model = model
        self.tokenizer = model.tokenizer
        self.shape = model.model_shape()
        # The KV cache lives where the model's weights do (its serving device).
        self.device = _device_of(model)
        self.cache = PagedKVCache(self.shape, cache_blocks, block_size, self.device,
                                  prefix_caching)
        self.max_running = max_running
        self.max_step_tokens = max_step_tokens
        self.prefill_chunk = prefill_chunk
        self.waiting: Deque[Request] = deque()
        self.running: List[Request] = []
        self._ids: Dict[str, Request] = {}
        self._eos = set(self.tokenizer.eos_token_ids)
        self._vocabulary = Vocabulary(self.tokenizer, self.shape.vocab_size)
        # Requests that failed in a step, (id, why): their caller hands these on.
        self.failed: List[Tuple[str, str]] = []
        self.prefix_queries = 0  # tokens of admitted sequences looked up in the prefix cache
        self.prefix_hits = 0     # of which were there

    # Requests.

    def add(self, request_id: str, prompt: Union[str, Sequence[int]],
            params: Optional[SamplingParams] = None) -> int:
        """Queues a request; returns its prompt's token count. ValueError for a duplicate
        id, an empty prompt, or one the context or the whole cache cannot hold."""
        params = params or SamplingParams()
        params.validate()
        if request_id in self._ids:
            raise ValueError(f"request id {request_id!r} is already running")
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        room = self.shape.max_seq_len - len(ids)
        if room < 1:
            raise ValueError(f"the prompt has {len(ids)} tokens; the model's context is "
                             f"{self.shape.max_seq_len}")
        if self.cache.blocks_for(len(ids) + 1) > self.cache.num_blocks:
            raise ValueError(f"the prompt has {len(ids)} tokens; the KV cache holds "
                             f"{self.cache.num_blocks * self.cache.block_size}")
        request = Request(request_id, ids, params, min(params.max_tokens or room, room),
                          params.generator())
        if params.structured_outputs is not None:
            request.constraint = self._vocabulary.constraint(params.structured_outputs)
        self._ids[request_id] = request
        self.waiting.append(request)
        return len(ids)

    def abort(self, request_id: str) -> bool:
        """Drops a request and frees its cache at once; False if it is not here."""
        request = self._ids.pop(request_id, None)
        if request is None:
            return False
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)
        self.cache.release(request.block_table)
        return True

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def stats(self) -> dict:
        return {"running": len(self.running), "waiting": len(self.waiting),
                "cache_blocks_used": self.cache.used_blocks,
                "cache_blocks_total": self.cache.num_blocks,
                "prefix_cache_queries": self.prefix_queries,
                "prefix_cache_hits": self.prefix_hits}

    # Steps.

    def step(self) -> List[StepOutput]:
        """Admits what fits, runs the model once over every running request (a prompt
        chunk or one decode token each) and samples; returns what each request got."""
        self._admit()
        slices, batch = self._schedule()
        if not batch:
            return []
        tokens = torch.tensor([t for r, s in zip(batch, slices) for t in r.tokens[s.start:s.end]])
        positions = torch.cat([torch.arange(s.start, s.end) for s in slices])
        attention = BatchAttention(self.cache, slices)
        if self.device.type != "cpu":
            tokens = tokens.to(self.device, non_blocking=True)
            positions = positions.to(self.device, non_blocking=True)
            attention.last_token_index = attention.last_token_index.to(self.device)
        with torch.inference_mode():
            logits = self.model.forward_step(tokens, positions, attention)
        outputs = []
        # Greedy picks for every row at once (one argmax, one copy out).
        greedy = logits.argmax(-1).tolist()
        masked = self._constrain(logits, batch, slices)
        for row, (request, piece) in enumerate(zip(batch, slices)):
            request.cached = piece.end
            self.cache.keep_full_blocks(request.block_table, request.tokens, request.cached,
                                        request.digests)
            if piece.end < len(request.tokens):
                continue  # a prompt chunk: its next token comes from a later step
            if row in masked and self._failed(request):
                continue
            if row in masked and bool(torch.isinf(masked[row]).all()):
                # Only an end the vocabulary lacks is left: the structure is complete.
                outputs.append(self._progress(request, None))
                continue
            if row in masked:
                token = (int(masked[row].argmax()) if request.params.greedy else
                         sample(masked[row].float().cpu(), request.params, request.generator))
            elif request.params.greedy:
                token = greedy[row]
            else:
                token = sample(logits[row].float().cpu(), request.params, request.generator)
            if request.constraint is not None:
                request.constraint.consume(token)
                if self._failed(request):
                    continue
            request.output.append(token)
            outputs.append(self._progress(request, token))
        return outputs

    def _failed(self, request: Request) -> bool:
        """Ends `request` as failed when its matcher has (the others go on)."""
        error = request.constraint.error if request.constraint is not None else ""
        if error:
            self._finish(request)
            self.failed.append((request.request_id, f"structured output failed: {error}"))
        return bool(error)

    def _constrain(self, logits, batch, slices) -> Dict[int, torch.Tensor]:
        """The logits of the rows that sample under a constraint, its forbidden tokens at
        -inf; the other rows are not touched (they do not wait for masks)."""
        rows = [row for row, (request, piece) in enumerate(zip(batch, slices))
                if request.constraint is not None and piece.end == len(request.tokens)]
        if not rows:
            return {}
        masked = mask_rows(logits, rows, [batch[row].constraint for row in rows])
        return dict(zip(rows, masked))

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            request = self.waiting[0]
            blocks, digests = self.cache.acquire_prefix(request.tokens)
            request.block_table.extend(blocks)
            try:
                self.cache.grow(request.block_table, len(request.tokens))
            except CacheFull:
                self.cache.release(request.block_table)
                return  # first come, first served: it waits for blocks
            request.cached, request.digests = len(blocks) * self.cache.block_size, digests
            if self.cache.prefix_caching:
                self.prefix_queries += len(request.tokens)
                self.prefix_hits += request.cached
            self.running.append(self.waiting.popleft())

    def _schedule(self):
        """Each running request's slice of this step, within the token budget; the newest
        request is preempted (its cache freed, recomputed later) when blocks run out."""
        budget = self.max_step_tokens
        slices, batch = [], []
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            pending = len(request.tokens) - request.cached
            n = min(pending, budget, self.prefill_chunk if pending > 1 else 1)
            try:
                self.cache.grow(request.block_table, request.cached + n)
            except CacheFull:
                victim = self.running[-1]
                self._preempt(victim)
                if victim is request:
                    break
                continue
            slices.append(SequenceSlice(request.block_table, request.cached, request.cached + n))
            batch.append(request)
            budget -= n
            i += 1
        return slices, batch

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self.cache.release(request.block_table)
        request.cached, request.digests = 0, []
        request.preemptions += 1
        self.waiting.appendleft(request)

    def _progress(self, request: Request, token: Optional[int]) -> StepOutput:
        """What `token` (None: no token, the output is complete) gives the request."""
        reason = None
        if token is None or (token in self._eos and not request.params.ignore_eos):
            reason = "stop"
        elif request.constraint is not None and request.constraint.done:
            reason = "stop"  # the output is complete: the grammar admits only its end
        elif len(request.output) >= request.max_tokens:
            reason = "length"
        text_ids = [t for t in request.output if t not in self._eos or request.params.ignore_eos]
        text = self.tokenizer.decode(text_ids)
        for stop in request.params.stop:
            at = text.find(stop)
            if at >= 0:
                text, reason = text[:at], "stop"
        if reason is None:
            text = text[:len(text) - _held_back(text, request.params.stop)]
        delta = text[len(request.emitted):] if text.startswith(request.emitted) else ""
        request.emitted += delta
        if reason is not None:
            self._finish(request)
        return StepOutput(request.request_id, [] if token is None else [token], delta, reason,
                          len(request.prompt), len(request.output))

    def _finish(self, request: Request) -> None:
        self.running.remove(request)
        self.cache.release(request.block_table)
        self._ids.pop(request.request_id, None)


def _held_back(text: str, stops: List[str]) -> int:
    """How many trailing characters of `text` to hold back: an incomplete character
    (decoded as U+FFFD) or the start of a stop string."""
    hold = 0
    while hold < len(text) and text[len(text) - 1 - hold] == "\ufffd":
        hold += 1
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:n]):
                hold = max(hold, n)
                break
    return hold


def _device_of(model) -> torch.device:
    """The device of the model's first parameter or buffer (the CPU when it has none)."""
    if isinstance(model, torch.nn.Module):
        for tensor in model.parameters():
            return tensor.device
        for tensor in model.buffers():
            return tensor.device
    return torch.device("cpu")


def greedy_continuations(model, texts: Sequence[str], max_tokens: int = 16) -> List[str]:
    """Each text's greedy continuation (`max_tokens` tokens) by an engine of its own, sized
    for them: what a generative model's plain call does, and what packaging records as
    its signature (chorus-server drives the engines itself)."""
    block_size = 16
    need = [len(model.tokenizer.encode(text)) + max_tokens for text in texts]
    engine = Engine(model, cache_blocks=sum(-(-n // block_size) for n in need) + 1,
                    block_size=block_size)
    for i, text in enumerate(texts):
        engine.add(str(i), text, SamplingParams(max_tokens=max_tokens, temperature=0))
    answers = [""] * len(texts)
    while engine.has_work():
        for out in engine.step():
            answers[int(out.request_id)] += out.text
    return answers
