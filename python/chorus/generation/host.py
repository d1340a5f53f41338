"""The server's handle on one interpreter's Engine: one call per step, plain values
across (chorus-server's GenerationEngines drives it from C++)."""

import json
from typing import List, Sequence, Tuple

from chorus.generation.chat import render_chat
from chorus.generation.engine import Engine
from chorus.generation.sampling import SamplingParams


class EngineHost:
    def __init__(self, model, cache_blocks: int = 512, block_size: int = 16,
                 max_running: int = 64, max_step_tokens: int = 512, prefill_chunk: int = 256,
                 prefix_caching: bool = True):
        self.engine = Engine(model, cache_blocks=cache_blocks, block_size=block_size,
                             max_running=max_running, max_step_tokens=max_step_tokens,
                             prefill_chunk=prefill_chunk, prefix_caching=prefix_caching)

    def step(self, new: Sequence[Tuple[str, str, str, str]], aborted: Sequence[str]):
        """Adds `new` requests (id, prompt, sampling parameters as JSON, chat messages as
        JSON or "": a chat request's prompt is its messages in the model's chat format),
        drops `aborted` ones, runs one step. Returns (refused [(id, why)], outputs [(id,
        text, tokens, finish_reason or "", prompt_tokens, completion_tokens)], [running,
        waiting, cache blocks used, cache blocks total, prefix cache queries, prefix cache
        hits (tokens, since the engine started)])."""
        refused: List[Tuple[str, str]] = []
        for request_id, prompt, parameters, messages in new:
            try:
                params = SamplingParams.from_dict(json.loads(parameters) if parameters else {})
                if messages:
                    prompt, stops = render_chat(self.engine.tokenizer,
                                                json.loads(messages))
                    params.stop = params.stop + [s for s in stops if s not in params.stop]
                self.engine.add(request_id, prompt, params)
            except (ValueError, TypeError) as error:
                refused.append((request_id, str(error)))
        for request_id in aborted:
            self.engine.abort(request_id)
        outputs = []
        if self.engine.has_work():
            for out in self.engine.step():
                outputs.append((out.request_id, out.text, len(out.token_ids),
                                out.finish_reason or "", out.prompt_tokens,
                                out.completion_tokens))
        refused += self.engine.failed  # requests that failed in the step
        self.engine.failed.clear()
        stats = self.engine.stats()
        return refused, outputs, [stats[key] for key in (
            "running", "waiting", "cache_blocks_used", "cache_blocks_total",
            "prefix_cache_queries", "prefix_cache_hits")]
