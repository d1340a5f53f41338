"""A paged KV cache: one pool of fixed-size blocks that every sequence draws from.

Keys and values of layer l live in k[l] and v[l], [num_blocks, block_size, kv_heads,
head_dim]; a sequence owns a list of blocks (its block table), so sequences of any
length share the pool without fragmentation and a finished one gives its blocks back
at once. BatchAttention is the attention of one engine step over such sequences.

Prefix caching (vLLM's automatic prefix caching): a full block is named by a SHA-256
digest chained over every token up to its end, so a block holds the same keys and values
for every sequence that starts with those tokens. A new sequence takes the cached blocks
of its longest such prefix (shared, counted by reference) and computes only the rest.
A block nobody references keeps its contents until its slot is needed, the least
recently used first.
"""

import hashlib
import math
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from chorus.generation.protocol import ModelShape


class CacheFull(Exception):
    """Not enough free blocks for what was asked (nothing was allocated)."""


class PagedKVCache:
    def __init__(self, shape: ModelShape, num_blocks: int, block_size: int = 16,
                 device: Union[str, torch.device] = "cpu", prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a KV cache needs at least one block of at least one token")
        self.shape = shape
        self.device = torch.device(device)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.prefix_caching = prefix_caching
        size = (shape.n_layers, num_blocks * block_size, shape.n_kv_heads, shape.head_dim)
        # Flat over (block, offset): a token's slot is block * block_size + offset.
        self.k = torch.zeros(size, dtype=shape.dtype, device=self.device)
        self.v = torch.zeros(size, dtype=shape.dtype, device=self.device)
        self._free: List[int] = list(range(num_blocks - 1, -1, -1))  # pop() takes block 0 first
        self._references = [0] * num_blocks
        self._digest_of: Dict[int, bytes] = {}  # block -> digest of its (full) contents
        self._block_of: Dict[bytes, int] = {}   # and back
        # Unreferenced blocks that keep their contents, least recently used first.
        self._evictable: "OrderedDict[int, None]" = OrderedDict()

    @property
    def free_blocks(self) -> int:
        return len(self._free) + len(self._evictable)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def grow(self, block_table: List[int], tokens: int) -> None:
        """Extends `block_table` to hold `tokens` tokens; CacheFull (and no change) if the
        pool cannot."""
        needed = self.blocks_for(tokens) - len(block_table)
        if needed > self.free_blocks:
            raise CacheFull(f"{needed} more blocks needed, {self.free_blocks} free")
        for _ in range(max(0, needed)):
            block_table.append(self._take())

    def release(self, block_table: List[int]) -> None:
        """Drops the sequence's references; the last block first, so that a prefix's tail
        is evicted before its head (which more sequences share)."""
        for block in reversed(block_table):
            self._references[block] -= 1
            if self._references[block] > 0:
                continue
            if block in self._digest_of:
                self._evictable[block] = None
            else:
                self._free.append(block)
        block_table.clear()

    def acquire_prefix(self, tokens: List[int]) -> Tuple[List[int], List[bytes]]:
        """The cached blocks of the longest prefix of `tokens` in whole blocks (all but
        the last token at most: its logits must be computed), referenced for the caller,
        and their digests."""
        blocks: List[int] = []
        digests: List[bytes] = []
        if not self.prefix_caching:
            return blocks, digests
        for i in range((len(tokens) - 1) // self.block_size):
            digest = self._digest(digests, tokens, i)
            block = self._block_of.get(digest)
            if block is None:
                break
            blocks.append(block)
            digests.append(digest)
        for block in blocks:
            if self._references[block] == 0:
                del self._evictable[block]
            self._references[block] += 1
        return blocks, digests

    def keep_full_blocks(self, block_table: List[int], tokens: List[int], computed: int,
                         digests: List[bytes]) -> None:
        """Names the sequence's full blocks among its first `computed` tokens (whose keys
        and values are written) for later sequences; `digests` holds those of its blocks
        named so far and grows."""
        if not self.prefix_caching:
            return
        for i in range(len(digests), computed // self.block_size):
            digest = self._digest(digests, tokens, i)
            digests.append(digest)
            block = block_table[i]
            if digest not in self._block_of and block not in self._digest_of:
                self._block_of[digest] = block
                self._digest_of[block] = digest

    def _digest(self, digests: List[bytes], tokens: List[int], i: int) -> bytes:
        """Block i's digest: its tokens chained to the digest of block i - 1."""
        piece = tokens[i * self.block_size:(i + 1) * self.block_size]
        parent = digests[i - 1] if i > 0 else b""
        return hashlib.sha256(parent + array("q", piece).tobytes()).digest()

    def _take(self) -> int:
        """A block for new contents: a never-named one, else the least recently used
        unreferenced one (forgetting its contents)."""
        if self._free:
            block = self._free.pop()
        else:
            block, _ = self._evictable.popitem(last=False)
            del self._block_of[self._digest_of.pop(block)]
        self._references[block] = 1
        return block

    def slots(self, block_table: List[int], start: int, end: int) -> torch.Tensor:
        """The cache slots of positions [start, end) of the sequence with `block_table`."""
        positions = torch.arange(start, end)
        blocks = torch.tensor(block_table, dtype=torch.long)[positions // self.block_size]
        return blocks * self.block_size + positions % self.block_size


@dataclass
class SequenceSlice:
    """One sequence's part of a step: its new tokens are positions [start, end)."""
    block_table: List[int]
    start: int
    end: int


class BatchAttention:
    """The attention callable a model's forward_step gets for one step (protocol.py).

    Decode-only sequences (one new token each) attend in one padded batch per layer;
    a sequence with several new tokens (a prompt, or a chunk of one) attends alone,
    causally, over its cached prefix and itself. Indices are built on the host and go to
    the cache's device once per step.
    """

    def __init__(self, cache: PagedKVCache, slices: List[SequenceSlice]):
        self.cache = cache
        self.slices = slices
        lengths = [s.end - s.start for s in slices]
        offsets = torch.tensor([0] + lengths).cumsum(0)
        self.last_token_index = offsets[1:] - 1
        self._singles = [i for i, n in enumerate(lengths) if n == 1]
        self._multis = [i for i, n in enumerate(lengths) if n > 1]
        self._offsets = offsets.tolist()
        self.write_slots = torch.empty(self._offsets[-1], dtype=torch.long)
        if self._singles:
            self._index_decodes([slices[i] for i in self._singles])
        self._multi_context = {}
        for i in self._multis:
            s, first = slices[i], self._offsets[i]
            context = cache.slots(s.block_table, 0, s.end)
            self._multi_context[i] = context
            self.write_slots[first:first + s.end - s.start] = context[s.start:]
        if cache.device.type != "cpu":
            self._to(cache.device)

    def _to(self, device: torch.device) -> None:
        """The step's indices and masks on `device` (copied without waiting)."""
        def move(tensor):
            return tensor.to(device, non_blocking=True)
        self._multi_context = {i: move(c) for i, c in self._multi_context.items()}
        for name in ("write_slots", "_single_blocks", "_single_mask", "_single_rows"):
            if hasattr(self, name):  # the decode indices exist when the step has decodes
                setattr(self, name, move(getattr(self, name)))

    def _index_decodes(self, singles: List[SequenceSlice]) -> None:
        """The one-token sequences' contexts as whole blocks, [B, width] (one row per
        sequence, padded), and the mask of their positions: a decode step is mostly these,
        and whole blocks are gathered many times faster than single slots."""
        block_size = self.cache.block_size
        ends = torch.tensor([s.end for s in singles])
        width = -(-int(ends.max()) // block_size)
        table = torch.tensor([s.block_table[:width] + [0] * (width - len(s.block_table[:width]))
                              for s in singles])
        self._single_blocks = table.flatten()
        self._single_width = width
        positions = torch.arange(width * block_size)
        self._single_mask = (positions[None, :] < ends[:, None])[:, None, None, :]
        self._single_rows = torch.tensor([self._offsets[i] for i in self._singles])
        last = ends - 1
        self.write_slots[self._single_rows] = (
            table[torch.arange(len(singles)), last // block_size] * block_size
            + last % block_size)

    def _gather_decodes(self, cache: torch.Tensor) -> torch.Tensor:
        """[B, width * block_size, kv_heads, head_dim] from one layer's cache."""
        blocks = cache.view(self.cache.num_blocks, -1).index_select(0, self._single_blocks)
        return blocks.view(len(self._singles), self._single_width * self.cache.block_size,
                           *cache.shape[1:])

    def _attend_decodes(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                        rep: int, scale: Optional[float]) -> torch.Tensor:
        """The one-token sequences' attention: q [B, heads, head_dim] against their
        padded contexts, [B, heads, 1, head_dim] by [B, heads, width, head_dim], masked."""
        key = _repeat(self._gather_decodes(keys), rep).transpose(1, 2)
        value = _repeat(self._gather_decodes(values), rep).transpose(1, 2)
        attended = F.scaled_dot_product_attention(q.unsqueeze(2), key, value,
                                                  attn_mask=self._single_mask, scale=scale)
        return attended.squeeze(2).to(q.dtype)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: Optional[float] = None) -> torch.Tensor:
        """Writes k and v into the cache; each token's attention over its sequence up to
        itself. `scale`: of q·k (default 1/sqrt(head_dim))."""
        keys, values = self.cache.k[layer], self.cache.v[layer]
        keys.index_copy_(0, self.write_slots, k.to(keys.dtype))
        values.index_copy_(0, self.write_slots, v.to(values.dtype))
        rep = q.shape[1] // k.shape[1]
        if not self._multis:  # a decode step: the rows are the batch, in order
            return self._attend_decodes(q, keys, values, rep, scale)
        out = torch.empty_like(q)
        if self._singles:
            out[self._single_rows] = self._attend_decodes(q[self._single_rows], keys, values,
                                                          rep, scale)
        for i in self._multis:
            s, first = self.slices[i], self._offsets[i]
            n = s.end - s.start
            slots = self._multi_context[i]
            key = _repeat(keys[slots], rep).transpose(0, 1)  # [heads, end, head_dim]
            value = _repeat(values[slots], rep).transpose(0, 1)
            query = q[first:first + n].transpose(0, 1)  # [heads, n, head_dim]
            # New token j (position start + j) sees positions <= start + j.
            allowed = (torch.arange(s.end, device=q.device)[None, :]
                       <= torch.arange(s.start, s.end, device=q.device)[:, None])
            attended = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed,
                                                      scale=scale)
            out[first:first + n] = attended.transpose(0, 1).to(out.dtype)
        return out


def _repeat(x: torch.Tensor, rep: int) -> torch.Tensor:
    """[..., kv_heads, head_dim] -> [..., kv_heads * rep, head_dim] (grouped-query)."""
    return x if rep == 1 else x.repeat_interleave(rep, dim=-2)
