"""A tier replica's live counts, moved from its engine into Redis every few seconds, where the
gateway reads them for /metrics (zerolayer.gateway.live).

Per tier, one Redis hash per time bucket (`zl:live:<model:tier>:<bucket>`, bucket = unix time //
bucket_s) to which every replica of the tier adds: per layer, the sampled decode steps'
down_proj inputs at or under the reference threshold (`u<i>`) out of all counted (`t<i>`); the
inputs the tier's thresholds skipped (`skipped`) out of all thresholded ones (`seen`), decode and
prefill together; sampled tokens (`tokens`, `prompt_tokens`); and the prefix cache's queried and
hit tokens (`pc_queries`, `pc_hits`). Buckets expire after retention_s. The tier's calibrated
reference is kept beside them (`zl:live:ref:<model:tier>`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from zerolayer.config import MonitoringConfig
from zerolayer.engines.base import Engine

__all__ = ["LiveRecorder", "bucket_key", "reference_key", "fields_of"]

log = logging.getLogger(__name__)


def bucket_key(tier: str, bucket: int) -> str:
    """The Redis hash of one tier's counts in one time bucket."""
    return f"zl:live:{tier}:{bucket}"


def reference_key(tier: str) -> str:
    """Where a tier's calibrated reference is kept (JSON)."""
    return f"zl:live:ref:{tier}"


def fields_of(signals: dict[str, Any]) -> Counter[str]:
    """An engine's signals() as the hash fields they add to."""
    out: Counter[str] = Counter()
    decode, prefill = signals.get("decode"), signals.get("prefill")
    if decode:
        for i, (u, t) in enumerate(zip(decode["under"], decode["total"], strict=True)):
            if t:
                out[f"u{i}"] += u
                out[f"t{i}"] += t
        out["tokens"] += decode["tokens"]
    if prefill:
        out["prompt_tokens"] += prefill["tokens"]
    for phase in (decode, prefill):
        if phase:
            out["skipped"] += phase["skipped"]
            out["seen"] += phase["seen"]
    cache = signals.get("prefix_cache")
    if cache:
        out["pc_queries"] += cache["queries"]
        out["pc_hits"] += cache["hits"]
    return +out  # zero counts dropped


class LiveRecorder:
    """Flushes one replica's engine signals to its tier's current bucket every flush_s."""

    def __init__(
        self,
        client: aioredis.Redis,
        tier: str,
        engine: Engine,
        reference: dict[str, Any],
        cfg: MonitoringConfig,
        clock: Callable[[], float] = time.time,
    ):
        self.clock = clock
        self.client = client
        self.tier = tier
        self.engine = engine
        self.reference = reference
        self.cfg = cfg
        self._pending: Counter[str] = Counter()  # counts a failed write keeps for the next
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin flushing in the background (on the running loop)."""
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        published = False
        while True:
            try:
                if not published:
                    await self.publish_reference()
                    published = True
                await self.flush()
            except Exception as exc:  # Redis away: counts stay pending, the loop goes on
                log.warning("live counts of %s not written: %s", self.tier, exc)
            await asyncio.sleep(self.cfg.flush_s)

    async def publish_reference(self) -> None:
        """Keep the tier's calibrated reference where the gateway reads it."""
        await self.client.set(reference_key(self.tier), json.dumps(self.reference))

    async def flush(self) -> None:
        """Add what the engine counted since the last flush to the current bucket."""
        self._pending.update(fields_of(await self.engine.signals()))
        if not self._pending:
            return
        pending, self._pending = self._pending, Counter()
        key = bucket_key(self.tier, int(self.clock() // self.cfg.bucket_s))
        pipe = self.client.pipeline(transaction=False)
        for name, n in pending.items():
            pipe.hincrby(key, name, n)
        pipe.expire(key, self.cfg.retention_s)
        try:
            await pipe.execute()
        except Exception:
            self._pending.update(pending)
            raise

    async def retarget(self, engine: Engine, reference: dict[str, Any]) -> None:
        """Count another engine from now on (a swapped artifact), against its own reference."""
        with contextlib.suppress(Exception):
            await self.flush()  # what the old engine counted so far
        self.engine, self.reference = engine, reference
        with contextlib.suppress(Exception):  # else the loop publishes it on its next turn
            await self.publish_reference()

    async def close(self) -> None:
        """Stop the loop and write the last counts (best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await self.flush()
