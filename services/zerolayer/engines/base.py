"""The one async engine protocol every engine implements. Routing and metering only see this.
An engine runs the prepared request (SamplingSpec, zerolayer.protocol) as it is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from zerolayer.protocol import SamplingSpec, TokenLogprob

__all__ = ["SamplingSpec", "TokenDelta", "Engine"]


@dataclass(frozen=True)
class TokenDelta:
    """New output since the previous delta. finish_reason is set on the last one only; queue_s,
    on the first one, is how long the request waited before the engine started it (None: the
    engine cannot tell); cached_tokens, on the first one, how many prompt tokens came from the
    engine's prefix cache (None: it cannot tell); logprobs, when the request asked for them,
    one entry per token of token_ids but an end-of-sequence one."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    queue_s: float | None = None
    cached_tokens: int | None = None
    logprobs: list[TokenLogprob] | None = None


@runtime_checkable
class Engine(Protocol):
    """start, generate (async token stream with a finish reason), check_health, stats, signals,
    canary, info."""

    async def start(self) -> None:
        """Load the model; return when the engine can serve."""

    def generate(self, spec: SamplingSpec) -> AsyncIterator[TokenDelta]:
        """Stream the output of one request. Closing the iterator aborts the request."""

    async def check_health(self) -> None:
        """Raise if the engine cannot serve."""

    async def stats(self) -> dict[str, Any]:
        """Counters for /metrics and the model card."""

    async def signals(self) -> dict[str, Any]:
        """What the engine measured of its own traffic since the last call (then zeroed), for
        the production signals: `decode`/`prefill` (sampled activation counts, the torch
        engine's Probe.drain) and `prefix_cache` ({queries, hits} in tokens, where the engine
        keeps a prefix cache)."""

    async def canary(
        self, texts: list[str], top_k: int = 20, max_tokens: int = 128
    ) -> list[dict[str, Any]]:
        """Per text, teacher forced at low priority: `tokens` and, for every position after the
        first, `top_ids`/`top_logprobs` of the next-token distribution ([] where the engine
        cannot score)."""

    def info(self) -> dict[str, Any]:
        """How the engine runs the tier on this machine, for the tier card: engine, device,
        hardware_sparsity (2:4 on sparse tensor cores), offload (layers in host memory)."""

    async def shutdown(self) -> None:
        """Release the engine's processes and memory."""
