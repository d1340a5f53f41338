"""Server-side text generation: a paged KV cache, continuous batching, sampling.

A generative model implements the protocol in protocol.py (a step over a batch of
sequences that reads and writes a PagedKVCache, plus a tokenizer); Engine runs
requests through it, many at once, a step at a time. Everything here runs inside
one interpreter; chorus-server drives one Engine per interpreter.
"""

from chorus.generation.engine import Engine, Request, StepOutput
from chorus.generation.kv_cache import CacheFull, PagedKVCache
from chorus.generation.protocol import GenerativeModel, ModelShape, Tokenizer, is_generative
from chorus.generation.sampling import SamplingParams

__all__ = ["CacheFull", "Engine", "GenerativeModel", "ModelShape", "PagedKVCache", "Request",
           "SamplingParams", "StepOutput", "Tokenizer", "is_generative"]
