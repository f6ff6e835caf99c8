"""The torch engine's key/value cache: one slot per running sequence."""

from __future__ import annotations

import torch

from zerolayer.engines.torch_engine.checkpoint import Shape

__all__ = ["SlotCache"]


class SlotCache:
    """Keys and values of up to `slots` sequences, one slot each, per layer:
    [slots, kv_heads, capacity, head_dim]. Grows (doubling) as sequences and lengths need."""

    def __init__(self, shape: Shape, dtype: torch.dtype, device: torch.device, max_len: int):
        self.shape, self.dtype, self.device, self.max_len = shape, dtype, device, max_len
        self.slots = 0
        self.capacity = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []

    @property
    def held_bytes(self) -> int:
        """What the slots hold now (they grow, never shrink)."""
        return self.bytes_for(self.slots, self.capacity) if self.slots else 0

    def bytes_for(self, slots: int, length: int) -> int:
        return _pow2(slots) * min(_pow2(length), self.max_len) * self.token_bytes()

    def ensure(self, slots: int, length: int) -> None:
        """Room for `slots` sequences of up to `length` tokens."""
        want_s = max(self.slots, _pow2(slots))
        want_c = max(self.capacity, min(_pow2(length), self.max_len))
        if want_s == self.slots and want_c == self.capacity:
            return
        s = self.shape
        size = (want_s, s.kv_heads, want_c, s.head_dim)
        for store in (self.k, self.v):
            for i in range(s.layers):
                new = torch.zeros(size, dtype=self.dtype, device=self.device)
                if store:
                    new[: self.slots, :, : self.capacity] = store[i]
                    store[i] = new
            if not store:
                store.extend(
                    torch.zeros(size, dtype=self.dtype, device=self.device) for _ in range(s.layers)
                )
        self.slots, self.capacity = want_s, want_c

    def token_bytes(self) -> int:
        """Keys and values of one token, all layers."""
        s = self.shape
        return 2 * s.layers * s.kv_heads * s.head_dim * torch.finfo(self.dtype).bits // 8

    def take_out(self, slot: int, length: int) -> list[torch.Tensor]:
        """A copy of one sequence's keys and values in host memory (a pre-empted sequence's,
        put back by put_back when it resumes, in any slot)."""
        return [t[slot, :, :length].to("cpu", copy=True) for t in [*self.k, *self.v]]

    def put_back(self, slot: int, saved: list[torch.Tensor]) -> None:
        for t, part in zip([*self.k, *self.v], saved, strict=True):
            t[slot, :, : part.shape[1]].copy_(part)

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy one sequence's keys and values to another slot."""
        for store in (self.k, self.v):
            for t in store:
                t[dst, :, :length] = t[src, :, :length]


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
