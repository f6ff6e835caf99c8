"""A tier replica's live counts, moved from its engine into Redis every few seconds, where the
gateway reads them for /metrics (zerolayer.gateway.live) and `zerolayer collapse drift --live`
adds up the per-channel ones (zerolayer.collapse.live_drift). What the hashes hold is
zerolayer.store.live; their names are zerolayer.store.keyspace's. Buckets expire after
retention_s; the tier's calibrated reference is kept beside them, and each replica writes its
per-channel counts of the hour at most every channels_flush_s."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from zerolayer.config import MonitoringConfig
from zerolayer.engines.base import Engine
from zerolayer.store import keyspace
from zerolayer.store.live import ChannelCounts, fields_of

__all__ = ["LiveRecorder"]

HOUR_S = 3600

log = logging.getLogger(__name__)


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
        stamp: str | None = None,
    ):
        self.clock = clock
        self.client = client
        self.tier = tier
        self.engine = engine
        self.reference = reference
        self.cfg = cfg
        self.stamp = stamp  # the artifact counted (its card's stamp)
        self.replica = secrets.token_hex(6)
        self._pending: Counter[str] = Counter()  # counts a failed write keeps for the next
        self._task: asyncio.Task[None] | None = None
        self._channels = ChannelCounts()
        self._hour = int(clock() // HOUR_S)
        self._dirty = False
        self._written_at = float("-inf")

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
        await self.client.set(keyspace.live_reference(self.tier), json.dumps(self.reference))

    async def flush(self, force_channels: bool = False) -> None:
        """Add what the engine counted since the last flush to the current bucket; write the
        hour's per-channel counts when channels_flush_s passed since the last write (or now,
        with force_channels)."""
        signals = await self.engine.signals()
        self._pending.update(fields_of(signals))
        hour = int(self.clock() // HOUR_S)
        if hour != self._hour:  # the last hour's counts are written, this one starts empty
            await self.write_channels()
            self._channels, self._hour = ChannelCounts(), hour
        self._dirty |= self._channels.add(signals)
        if force_channels or self.clock() - self._written_at >= self.cfg.channels_flush_s:
            await self.write_channels()
        if not self._pending:
            return
        pending, self._pending = self._pending, Counter()
        key = keyspace.live_bucket(self.tier, int(self.clock() // self.cfg.bucket_s))
        pipe = self.client.pipeline(transaction=False)
        for name, n in pending.items():
            pipe.hincrby(key, name, n)
        pipe.expire(key, self.cfg.retention_s)
        try:
            await pipe.execute()
        except Exception:
            self._pending.update(pending)
            raise

    async def write_channels(self) -> None:
        """Write this replica's per-channel counts of the hour, if any came since the last
        write (the hash holds the whole hour: a failed write is made good by the next)."""
        if not self._dirty:
            return
        key = keyspace.live_channels(self.tier, self._hour, self.replica)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping=self._channels.fields(self.stamp))
        pipe.expire(key, self.cfg.retention_s)
        await pipe.execute()
        self._dirty, self._written_at = False, self.clock()

    async def retarget(
        self, engine: Engine, reference: dict[str, Any], stamp: str | None = None
    ) -> None:
        """Count another engine from now on (a swapped artifact), against its own reference."""
        with contextlib.suppress(Exception):
            await self.flush(force_channels=True)  # what the old engine counted so far
        # the new artifact's channel counts go to a hash of their own
        self._channels, self._dirty, self.stamp = ChannelCounts(), False, stamp
        self.replica = secrets.token_hex(6)
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
            await self.flush(force_channels=True)
