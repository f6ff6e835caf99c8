"""A scripted engine for unit tests of routing and metering. It never touches a model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from zerolayer.engines.base import SamplingSpec, TokenDelta

__all__ = ["FakeEngine"]


class FakeEngine:
    """Replies with a fixed list of token strings, one delta per token.

    Token ids are the positions in the script (offset by 1000) so tests can count them. When the
    script is shorter than max_tokens the finish reason is "stop", else "length".
    """

    def __init__(
        self,
        script: list[str] | None = None,
        delay_s: float = 0.0,
        fail_after: int | None = None,
        queue_s: float | None = None,
    ):
        self.script = script or ["Hello", ",", " world", "!"]
        self.queue_s = queue_s  # the queue wait it reports (None: it reports none)
        self.delay_s = delay_s
        self.fail_after = fail_after
        self.started = False
        self.requests = 0
        self.aborted: list[str] = []

    async def start(self) -> None:
        self.started = True

    async def generate(self, spec: SamplingSpec) -> AsyncIterator[TokenDelta]:
        self.requests += 1
        n = min(len(self.script), spec.max_tokens)
        finish = "length" if spec.max_tokens < len(self.script) else "stop"
        done = False
        try:
            for i in range(n):
                if self.fail_after is not None and i >= self.fail_after:
                    raise RuntimeError("scripted engine failure")
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                last = i == n - 1
                queued = self.queue_s if i == 0 else None
                yield TokenDelta(self.script[i], [1000 + i], finish if last else None, queued)
            done = True
        finally:
            if not done:
                self.aborted.append(spec.request_id)

    async def check_health(self) -> None:
        if not self.started:
            raise RuntimeError("fake engine not started")

    async def stats(self) -> dict[str, Any]:
        return {"engine": "fake", "requests": self.requests, "aborted": len(self.aborted)}

    async def signals(self) -> dict[str, Any]:
        return {"sample_rate": 0.0}

    async def canary(
        self, texts: list[str], top_k: int = 20, max_tokens: int = 128
    ) -> list[dict[str, Any]]:
        return []  # no model: nothing to score

    def info(self) -> dict[str, Any]:
        return {"engine": "fake", "device": "none", "hardware_sparsity": False, "offload": False}

    async def shutdown(self) -> None:
        self.started = False
