"""The canary: a fixed set of short texts (six kinds of text, two languages besides English)
scored teacher-forced by every ready tier, periodically and at low priority, and compared with
the model's baseline (dense) tier. A tier whose KL divergence from the baseline goes over the
limit is flagged on /metrics and on its tier card.

The engines return the top k next-token log-probabilities of each position (vLLM gives at most
20), so the KL is measured on the baseline's top k tokens plus one bucket for the rest of the
vocabulary; a tier token missing from its own top k is given the probability of its k-th
token (an upper bound). Merging the tail into one bucket can only lower a KL, so the figure is
an estimate from below of the full KL, close to it when the top k hold most of the mass.

One gateway replica runs it per interval (a Redis lock); the result is kept in Redis
(keyspace.canary: `canary:<model:tier>`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from zerolayer.config import PlatformConfig
from zerolayer.protocol import Target
from zerolayer.store import keyspace

__all__ = ["CANARY_TEXTS", "CanaryRunner", "topk_kl"]

log = logging.getLogger(__name__)

CANARY_TEXTS = [
    "The committee met on Tuesday to review the budget. After a long discussion, members agreed "
    "to postpone the decision until the next quarter, when updated figures will be available.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    "
    "return a\n\nprint([fibonacci(i) for i in range(10)])\n",
    "To make a simple tomato sauce, warm olive oil in a pan, add chopped garlic, then the "
    "tomatoes and a pinch of salt. Let it simmer for twenty minutes, stirring now and then.",
    "Permission is hereby granted to any person obtaining a copy of this software to use it "
    "without restriction, subject to the conditions stated in the licence below.",
    "今天天气很好，我们一起去公园散步吧。公园里有很多花，孩子们在草地上玩耍。",
    "Bonjour à tous. La réunion aura lieu demain matin à neuf heures dans la grande salle. "
    "Merci d'apporter vos documents.",
]

_LOCK = keyspace.canary_lock()
_LAST = keyspace.canary_last()


def topk_kl(reference: list[dict[str, Any]], tier: list[dict[str, Any]]) -> tuple[float, int]:
    """Mean KL(baseline || tier) per position over the canary texts, and the positions
    compared; ValueError when the two did not score the same tokens."""
    if len(reference) != len(tier):
        raise ValueError("the tiers scored different canary texts")
    total, positions = 0.0, 0
    for ref, got in zip(reference, tier, strict=True):
        if ref["tokens"] != got["tokens"]:
            raise ValueError("the tiers tokenized the canary texts differently")
        for p_ids, p_lp, q_ids, q_lp in zip(
            ref["top_ids"], ref["top_logprobs"], got["top_ids"], got["top_logprobs"], strict=True
        ):
            q_of = dict(zip(q_ids, q_lp, strict=True))
            in_ref = set(p_ids)
            floor = min(q_lp)
            kl, p_in, q_in = 0.0, 0.0, 0.0
            for tok, lp in zip(p_ids, p_lp, strict=True):
                lq = q_of.get(tok, floor)
                p = math.exp(lp)
                kl += p * (lp - lq)
                p_in += p
                q_in += math.exp(lq)
            # the tier's mass outside the baseline's top k is at least that of its own top
            # tokens there (the floors above may overstate what it gives the baseline's)
            outside = sum(math.exp(lq) for tok, lq in q_of.items() if tok not in in_ref)
            p_rest, q_rest = max(1.0 - p_in, 0.0), max(1.0 - q_in, outside, 1e-12)
            if p_rest > 1e-12:
                kl += p_rest * math.log(p_rest / q_rest)
            total += max(kl, 0.0)
            positions += 1
    if not positions:
        raise ValueError("no canary positions were scored")
    return total / positions, positions


Scorer = Callable[[Target, list[str], int], Awaitable[list[dict[str, Any]]]]


class CanaryRunner:
    """Runs the canary over the ready tiers of every model and records each tier's KL."""

    def __init__(
        self,
        client: aioredis.Redis,
        cfg: PlatformConfig,
        score: Scorer,
        ready: Callable[[], Awaitable[list[Target]]],
        texts: list[str] | None = None,
    ):
        self.client = client
        self.cfg = cfg
        self.score = score
        self.ready = ready
        self.texts = texts or CANARY_TEXTS
        self._task: asyncio.Task[None] | None = None

    def baseline(self, model: str) -> str | None:
        """The model's first tier that serves the dense weights (the canary's reference)."""
        tiers = self.cfg.models[model].tiers
        return next((t for t, tc in tiers.items() if tc.artifact == "dense"), None)

    async def run(self) -> dict[str, Any]:
        """Measure every ready tier now; per tier its KL, limit and flag (or the error)."""
        mon = self.cfg.monitoring
        ready = await self.ready()
        out: dict[str, Any] = {}
        for model in self.cfg.models:
            base_tier = self.baseline(model)
            base = Target(model, base_tier) if base_tier else None
            if base is None or base not in ready:
                continue
            reference = await self._score(base)
            if not reference:
                continue
            for target in [t for t in ready if t.model == model]:
                try:
                    got = reference if target == base else await self._score(target)
                    if not got:
                        continue  # an engine that cannot score (the scripted one)
                    kl, positions = topk_kl(reference, got)
                except Exception as exc:  # one tier's failure does not stop the others
                    log.warning("canary of %s failed: %s", target, exc)
                    out[str(target)] = {"error": f"{type(exc).__name__}: {exc}"}
                    continue
                limit = self.cfg.models[model].tiers[target.tier].canary_kl_limit
                limit = mon.canary_kl_limit if limit is None else limit
                row = {"kl": kl, "limit": limit, "positions": positions}
                kept: dict[FieldT, EncodableT] = {
                    "kl": kl,
                    "limit": limit,
                    "positions": positions,
                    "at": time.time(),
                    "baseline": str(base),
                }
                await self.client.hset(keyspace.canary(str(target)), mapping=kept)
                out[str(target)] = {**row, "flag": kl > limit}
        if out:
            await self.client.set(_LAST, time.time())
        return out

    async def _score(self, target: Target) -> list[dict[str, Any]]:
        return await self.score(target, self.texts, self.cfg.monitoring.canary_top_k)

    def start(self) -> None:
        """Run every canary_interval_s in the background (one gateway replica at a time)."""
        self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        interval = self.cfg.monitoring.canary_interval_s
        while True:
            await asyncio.sleep(min(interval, 30.0))
            try:
                last = await self.client.get(_LAST)
                if last is not None and time.time() - float(last) < interval:
                    continue
                if not await self.client.set(_LOCK, "1", nx=True, ex=600):
                    continue  # another gateway replica is running it
                try:
                    await self.run()
                finally:
                    await self.client.delete(_LOCK)
            except Exception as exc:  # Redis or a tier away: the next round tries again
                log.warning("canary round failed: %s", exc)

    async def close(self) -> None:
        """Stop the background loop."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
