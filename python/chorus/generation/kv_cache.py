"""A paged KV cache: one pool of fixed-size blocks that every sequence draws from.

Keys and values of layer l live in k[l] and v[l], [num_blocks, block_size, kv_heads,
head_dim]; a sequence owns a list of blocks (its block table), so sequences of any
length share the pool without fragmentation and a finished one gives its blocks back
at once. BatchAttention is the attention of one engine step over such sequences.
"""

import math
from dataclasses import dataclass
from typing import List

import torch
import torch.nn.functional as F

from chorus.generation.protocol import ModelShape


class CacheFull(Exception):
    """Not enough free blocks for what was asked (nothing was allocated)."""


class PagedKVCache:
    def __init__(self, shape: ModelShape, num_blocks: int, block_size: int = 16):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a KV cache needs at least one block of at least one token")
        self.shape = shape
        self.block_size = block_size
        self.num_blocks = num_blocks
        size = (shape.n_layers, num_blocks * block_size, shape.n_kv_heads, shape.head_dim)
        # Flat over (block, offset): a token's slot is block * block_size + offset.
        self.k = torch.zeros(size, dtype=shape.dtype)
        self.v = torch.zeros(size, dtype=shape.dtype)
        self._free: List[int] = list(range(num_blocks - 1, -1, -1))  # pop() takes block 0 first

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def grow(self, block_table: List[int], tokens: int) -> None:
        """Extends `block_table` to hold `tokens` tokens; CacheFull (and no change) if the
        pool cannot."""
        needed = self.blocks_for(tokens) - len(block_table)
        if needed > len(self._free):
            raise CacheFull(f"{needed} more blocks needed, {len(self._free)} free")
        for _ in range(max(0, needed)):
            block_table.append(self._free.pop())

    def release(self, block_table: List[int]) -> None:
        self._free.extend(reversed(block_table))
        block_table.clear()

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
    causally, over its cached prefix and itself.
    """

    def __init__(self, cache: PagedKVCache, slices: List[SequenceSlice]):
        self.cache = cache
        self.slices = slices
        lengths = [s.end - s.start for s in slices]
        offsets = torch.tensor([0] + lengths).cumsum(0)
        self.last_token_index = offsets[1:] - 1
        self.write_slots = torch.cat([cache.slots(s.block_table, s.start, s.end) for s in slices])
        self._singles = [i for i, n in enumerate(lengths) if n == 1]
        self._multis = [i for i, n in enumerate(lengths) if n > 1]
        self._offsets = offsets.tolist()
        if self._singles:
            longest = max(slices[i].end for i in self._singles)
            padded = torch.zeros(len(self._singles), longest, dtype=torch.long)
            mask = torch.zeros(len(self._singles), 1, 1, longest, dtype=torch.bool)
            for row, i in enumerate(self._singles):
                s = slices[i]
                padded[row, :s.end] = cache.slots(s.block_table, 0, s.end)
                mask[row, 0, 0, :s.end] = True
            self._single_rows = torch.tensor([self._offsets[i] for i in self._singles])
            self._single_slots, self._single_mask = padded, mask
        self._multi_context = {i: cache.slots(slices[i].block_table, 0, slices[i].end)
                               for i in self._multis}

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> torch.Tensor:
        keys, values = self.cache.k[layer], self.cache.v[layer]
        keys[self.write_slots] = k.to(keys.dtype)
        values[self.write_slots] = v.to(values.dtype)
        out = torch.empty_like(q)
        rep = q.shape[1] // k.shape[1]
        if self._singles:
            # [B, heads, 1, head_dim] against [B, heads, longest, head_dim], padding masked.
            query = q[self._single_rows].unsqueeze(2)
            key = _repeat(keys[self._single_slots], rep).transpose(1, 2)
            value = _repeat(values[self._single_slots], rep).transpose(1, 2)
            attended = F.scaled_dot_product_attention(query, key, value,
                                                      attn_mask=self._single_mask)
            out[self._single_rows] = attended.squeeze(2).to(out.dtype)
        for i in self._multis:
            s, first = self.slices[i], self._offsets[i]
            n = s.end - s.start
            slots = self._multi_context[i]
            key = _repeat(keys[slots], rep).transpose(0, 1)  # [heads, end, head_dim]
            value = _repeat(values[slots], rep).transpose(0, 1)
            query = q[first:first + n].transpose(0, 1)  # [heads, n, head_dim]
            # New token j (position start + j) sees positions <= start + j.
            allowed = (torch.arange(s.end)[None, :]
                       <= torch.arange(s.start, s.end)[:, None])
            attended = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed)
            out[first:first + n] = attended.transpose(0, 1).to(out.dtype)
        return out


def _repeat(x: torch.Tensor, rep: int) -> torch.Tensor:
    """[..., kv_heads, head_dim] -> [..., kv_heads * rep, head_dim] (grouped-query)."""
    return x if rep == 1 else x.repeat_interleave(rep, dim=-2)
