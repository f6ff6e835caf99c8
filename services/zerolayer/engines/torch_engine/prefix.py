"""The torch engine's prefix cache: the keys and values of whole blocks of tokens, kept after
the sequence that computed them ends, so a later prompt that begins the same way starts its
prefill after them.

A block is BLOCK tokens. Its name is a hash of the cache salt (the tenant: one tenant never
reads another's blocks, nor learns from its timing what another sent), every token before it
and its own tokens, chained block by block as vLLM names its blocks; so a block is found only
when everything before it matches too. Blocks live in one tensor each, [layers, 2, kv_heads,
BLOCK, head_dim], on the engine's device; the running sequences keep their own copies in their
slots (the compiled decode step reads one dense slot per sequence), so a hit costs one copy into
the slot instead of the prompt's forward pass over those tokens.

Eviction is least recently used, and a block is touched after every block it follows, so a
chain is evicted from its end: a block is never kept without the blocks before it, which it
could not be found without. The cache holds at most `limit` bytes and gives memory back to the
slots whenever the engine's KV budget needs it (evict_to)."""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

import torch

from zerolayer.engines.torch_engine.cache import SlotCache
from zerolayer.engines.torch_engine.checkpoint import Shape

__all__ = ["BLOCK", "PrefixCache", "block_names"]

BLOCK = 16


def block_names(tokens: list[int], salt: str, block: int = BLOCK) -> list[bytes]:
    """The chained name of each whole block of `tokens` (a trailing part block has none)."""
    name = hashlib.blake2b(salt.encode(), digest_size=16).digest()
    out = []
    for at in range(0, len(tokens) - block + 1, block):
        chunk = array("q", tokens[at : at + block]).tobytes()
        name = hashlib.blake2b(name + chunk, digest_size=16).digest()
        out.append(name)
    return out


class PrefixCache:
    """Blocks of keys and values by chained name, least recently used first."""

    def __init__(
        self, shape: Shape, dtype: torch.dtype, device: torch.device, limit: int, block: int = BLOCK
    ):
        self.shape, self.dtype, self.device, self.block = shape, dtype, device, block
        self.limit = limit
        bits = torch.finfo(dtype).bits
        self.block_bytes = 2 * shape.layers * shape.kv_heads * block * shape.head_dim * bits // 8
        self._blocks: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self.evicted = 0

    @property
    def held_bytes(self) -> int:
        return len(self._blocks) * self.block_bytes

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, names: list[bytes], most: int) -> int:
        """How many of the leading blocks of `names` are here (at most `most`); those are
        touched."""
        n = 0
        for name in names[:most]:
            if name not in self._blocks:
                break
            n += 1
        self._touch(names[:n])
        return n

    def load(self, names: list[bytes], cache: SlotCache, slot: int) -> None:
        """Copy these blocks (all here: match() said so) into the start of a slot."""
        if not names:
            return
        b = self.block
        # [blocks, layers, 2, kv_heads, block, head_dim] -> per layer [kv_heads, tokens, head_dim]
        stacked = torch.stack([self._blocks[n] for n in names])
        s = self.shape
        t = len(names) * b
        for i in range(s.layers):
            for kv, store in enumerate((cache.k, cache.v)):
                part = stacked[:, i, kv].permute(1, 0, 2, 3).reshape(s.kv_heads, t, s.head_dim)
                store[i][slot, :, :t] = part

    def save(self, names: list[bytes], cache: SlotCache, slot: int) -> int:
        """Keep the blocks of a slot's first len(names) * block tokens that are not here yet
        (within the limit, evicting the least recently used); how many were added."""
        if self.limit < self.block_bytes or not names:
            return 0
        new = [j for j, name in enumerate(names) if name not in self._blocks]
        # what fits: never evict this sequence's own blocks to make room for its later ones
        room = max(0, self.limit // self.block_bytes - len(names) + len(new))
        new = new[: min(len(new), room)]
        if new:
            s, b = self.shape, self.block
            lo, hi = new[0] * b, (new[-1] + 1) * b
            per_layer = [
                torch.stack((cache.k[i][slot, :, lo:hi], cache.v[i][slot, :, lo:hi]))
                for i in range(s.layers)
            ]
            # [layers, 2, kv_heads, tokens, head_dim] -> [blocks, layers, 2, kv_heads, block, hd]
            whole = torch.stack(per_layer).view(
                s.layers, 2, s.kv_heads, (hi - lo) // b, b, s.head_dim
            )
            whole = whole.permute(3, 0, 1, 2, 4, 5)
            for j in new:
                self._blocks[names[j]] = whole[j - new[0]].clone()
        self._touch(names)
        self.evict_to(self.limit)
        return len(new)

    def evict_to(self, most: int) -> int:
        """Drop the least recently used blocks until at most `most` bytes are kept; how many
        bytes were freed."""
        freed = 0
        while self._blocks and self.held_bytes > most:
            self._blocks.popitem(last=False)
            self.evicted += 1
            freed += self.block_bytes
        return freed

    def clear(self) -> None:
        self._blocks.clear()

    def _touch(self, names: list[bytes]) -> None:
        """Most recent last: the chain's first block becomes the most recent of all, so a chain
        is evicted from its end."""
        for name in reversed(names):
            if name in self._blocks:
                self._blocks.move_to_end(name)
