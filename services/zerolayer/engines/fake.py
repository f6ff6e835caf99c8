"""A scripted engine for unit tests of routing and metering. It never touches a model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from zerolayer.engines.base import SamplingSpec, TokenDelta
from zerolayer.protocol import TokenLogprob, TopLogprob

__all__ = ["FakeEngine"]


class FakeEngine:
    """Replies with a fixed list of token strings, one delta per token.

    Token ids are the positions in the script (offset by 1000) so tests can count them. When the
    script is shorter than max_tokens the finish reason is "stop", else "length". Asked for
    logprobs, the i-th token's is -(i + 1) / 10 and its k alternatives are "alt0".."alt{k-1}"
    (no model: a shape to check, not a distribution).
    """

    def __init__(
        self,
        script: list[str] | None = None,
        delay_s: float = 0.0,
        fail_after: int | None = None,
        queue_s: float | None = None,
        cached: int | None = None,
    ):
        self.script = script or ["Hello", ",", " world", "!"]
        self.queue_s = queue_s  # the queue wait it reports (None: it reports none)
        self.cached = cached  # the prompt tokens it reports from a prefix cache (None: none)
        self.delay_s = delay_s
        self.fail_after = fail_after
        self.started = False
        self.requests = 0
        self.specs: list[SamplingSpec] = []  # every request as it came
        self.aborted: list[str] = []

    async def start(self) -> None:
        self.started = True

    async def generate(self, spec: SamplingSpec) -> AsyncIterator[TokenDelta]:
        self.requests += 1
        self.specs.append(spec)
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
                hits = None
                if i == 0 and self.cached is not None:
                    hits = min(self.cached, len(spec.prompt_token_ids))
                lp = (
                    None if spec.logprobs is None else [_scripted(self.script[i], i, spec.logprobs)]
                )
                yield TokenDelta(
                    self.script[i], [1000 + i], finish if last else None, queued, hits, lp
                )
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


def _scripted(token: str, i: int, k: int) -> TokenLogprob:
    alts = [TopLogprob(f"alt{j}", list(f"alt{j}".encode()), -(j + 1) / 10) for j in range(k)]
    return TokenLogprob(token, list(token.encode()), -(i + 1) / 10, alts)
