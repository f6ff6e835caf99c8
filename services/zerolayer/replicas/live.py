"""A tier replica's live counts, moved from its engine into Redis every few seconds, where the
gateway reads them for /metrics (zerolayer.gateway.live).

Per tier, one Redis hash per time bucket (`zl:live:<model:tier>:<bucket>`, bucket = unix time //
bucket_s) to which every replica of the tier adds: per layer, the sampled decode steps'
down_proj inputs at or under the reference threshold (`u<i>`) out of all counted (`t<i>`); the
inputs the tier's thresholds skipped (`skipped`) out of all thresholded ones (`seen`), decode and
prefill together; sampled tokens (`tokens`, `prompt_tokens`); and the prefix cache's queried and
hit tokens (`pc_queries`, `pc_hits`). Buckets expire after retention_s. The tier's calibrated
reference is kept beside them (`zl:live:ref:<model:tier>`).

Per channel, each replica also keeps how many sampled tokens (prompts and decode steps) had
down_proj's input at or under the reference threshold, per hour, and writes its counts of the
hour (at most every channels_flush_s) to a hash of its own, `zl:live:ch:<model:tier>:<hour>:
<replica>`: `stamp` (the artifact counted), `widths` and `rows` (per layer: channels, tokens; JSON)
and `under` (the counts, int64 little-endian, layer after layer). `zerolayer collapse drift
--live` adds them up (zerolayer.collapse.live_drift)."""

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

import numpy as np
import redis.asyncio as aioredis

from zerolayer.config import MonitoringConfig
from zerolayer.engines.base import Engine

__all__ = [
    "ChannelCounts",
    "LiveRecorder",
    "bucket_key",
    "channels_key",
    "channels_pattern",
    "fields_of",
    "reference_key",
]

HOUR_S = 3600

log = logging.getLogger(__name__)


def bucket_key(tier: str, bucket: int) -> str:
    """The Redis hash of one tier's counts in one time bucket."""
    return f"zl:live:{tier}:{bucket}"


def reference_key(tier: str) -> str:
    """Where a tier's calibrated reference is kept (JSON)."""
    return f"zl:live:ref:{tier}"


def channels_key(tier: str, hour: int, replica: str) -> str:
    """The hash of one replica's per-channel counts in one hour."""
    return f"zl:live:ch:{tier}:{hour}:{replica}"


def channels_pattern(tier: str) -> str:
    """A SCAN pattern of every replica's per-channel counts of a tier."""
    return f"zl:live:ch:{tier}:*"


class ChannelCounts:
    """Per layer: tokens counted and, per channel, how many were at or under the threshold."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.under: list[np.ndarray | None] = []

    def add(self, signals: dict[str, Any]) -> bool:
        """Add both phases' per-channel counts of an engine's signals(); whether any came."""
        added = False
        for phase in ("decode", "prefill"):
            counts = signals.get(phase) or {}
            if counts.get("channels") and counts.get("rows"):
                added |= self.merge(counts["rows"], counts["channels"])
        return added

    def merge(self, rows: list[int], under: list[Any]) -> bool:
        """Add per-layer counts (tokens; per-channel counts, None where the layer was not
        counted); whether any were added. A layer of another width than the one held (another
        artifact's layout) is left out."""
        if not self.rows:
            self.rows, self.under = [0] * len(rows), [None] * len(rows)
        added = False
        for i, (n, c) in enumerate(zip(rows, under, strict=True)):
            if c is None or not n:
                continue
            c = np.asarray(c, dtype=np.int64)
            held = self.under[i]
            if held is not None and len(held) != len(c):
                continue
            self.under[i] = c if held is None else held + c
            self.rows[i] += int(n)
            added = True
        return added

    def fields(self, stamp: str | None) -> dict[str, Any]:
        """The hash fields of these counts (layers not counted: width 0)."""
        widths = [0 if u is None else len(u) for u in self.under]
        blob = b"".join(u.astype("<i8").tobytes() for u in self.under if u is not None)
        return {
            "stamp": stamp or "",
            "widths": json.dumps(widths),
            "rows": json.dumps(self.rows),
            "under": blob,
        }

    @staticmethod
    def parse(fields: dict[bytes, bytes]) -> tuple[str, list[int], list[np.ndarray | None]]:
        """(stamp, rows, per-layer counts) from a hash written by fields()."""
        widths = json.loads(fields[b"widths"])
        rows = json.loads(fields[b"rows"])
        flat = np.frombuffer(fields[b"under"], dtype="<i8")
        under: list[np.ndarray | None] = []
        at = 0
        for w in widths:
            under.append(flat[at : at + w].copy() if w else None)
            at += w
        return fields[b"stamp"].decode(), rows, under


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
        await self.client.set(reference_key(self.tier), json.dumps(self.reference))

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

    async def write_channels(self) -> None:
        """Write this replica's per-channel counts of the hour, if any came since the last
        write (the hash holds the whole hour: a failed write is made good by the next)."""
        if not self._dirty:
            return
        key = channels_key(self.tier, self._hour, self.replica)
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
