"""The billing consumer: reads the usage event stream in the consumer group `billing`, counts each
batch into the ledger and acknowledges it in the same server-side script (an event is
acknowledged only once its aggregates are written, and with `appendfsync always` on disk). The
script also does the read (the group's next entries, then its position moved past them, in the
same step): a consumer that dies never holds a batch it read but did not count. Between batches
it waits on the stream (XREAD BLOCK), not in a loop.

Any number of consumers share the group. Events delivered to a consumer outside that script
(another client of the group) and left pending are claimed after `billing.claim_idle_s`
(XAUTOCLAIM) and counted, and a consumer that restarts under its own name counts its own pending
events first. Counting twice is impossible: the script keeps the ids it counted. The consumer
also closes months when their time comes and trims the stream of counted events older than
`billing.stream_retention_s`."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from zerolayer.billing.events import STREAM, day_of
from zerolayer.billing.ledger import APPLY_LUA, READ_LUA, Ledger
from zerolayer.config import BillingConfig
from zerolayer.store import keyspace

__all__ = ["GROUP", "Biller", "backlog", "consumer_name"]

log = logging.getLogger(__name__)

GROUP = "billing"
_HOUSEKEEPING_S = 30.0  # how often months are closed and the stream trimmed


def consumer_name() -> str:
    """This process's name in the group."""
    return f"{socket.gethostname()}-{os.getpid()}"


async def backlog(client: aioredis.Redis) -> dict[str, int]:
    """The usage stream's entries the group has not read yet, and those read but not counted."""
    try:
        groups = await client.xinfo_groups(STREAM)
    except ResponseError:  # no stream yet
        return {"unread": 0, "pending": 0}
    for g in groups:
        if _text(g.get("name", b"")) == GROUP:
            lag = g.get("lag")
            if lag is None:  # Redis cannot tell: count them (up to 10,000; "at least")
                after = "(" + _text(g.get("last-delivered-id") or b"0-0")
                lag = len(await client.xrange(STREAM, after, "+", count=10_000) or [])
            return {"unread": int(lag), "pending": int(g.get("pending") or 0)}
    return {"unread": int(await client.xlen(STREAM)), "pending": 0}  # no consumer started yet


_text = keyspace.text


def _id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


class Biller:
    """One consumer of the usage stream."""

    def __init__(
        self,
        client: aioredis.Redis,
        cfg: BillingConfig,
        name: str | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.cfg = cfg
        self.name = name or consumer_name()
        self.clock = clock
        self.ledger = Ledger(client, cfg.close_after_s)
        self._apply = client.register_script(APPLY_LUA)
        self._read = client.register_script(READ_LUA)
        self.counted = 0  # events counted by this consumer (not duplicates)
        self.handled = 0  # stream entries it acknowledged
        self._next_claim = 0.0
        self._next_housekeeping = 0.0
        self._own_done = False

    async def setup(self) -> None:
        """Create the group (from the stream's first entry) unless it exists."""
        try:
            # from the first entry, having read none (so Redis keeps the group's lag)
            await self.client.xgroup_create(STREAM, GROUP, id="0", mkstream=True, entries_read=0)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def count(self, entries: list[Any]) -> int:
        """Count and acknowledge stream entries ((id, fields) pairs; fields None: gone)."""
        if not entries:
            return 0
        args: list[Any] = [STREAM, GROUP, self.cfg.dedupe_ttl_s, day_of(self.clock())]
        for sid, fields in entries:
            fields = {_text(k): v for k, v in (fields or {}).items()}
            args += [sid, fields.get("e") or b"", fields.get("a") or b""]
        n = int(await self._apply(args=args))
        self.counted += n
        self.handled += len(entries)
        return n

    async def _own(self) -> None:
        """After a restart under the same name: this consumer's own pending events first."""
        while True:
            # [[stream, [(id, fields), ...]]] (redis-py types the reply as a union)
            got: Any = await self.client.xreadgroup(
                GROUP, self.name, {STREAM: "0"}, count=self.cfg.batch
            )
            entries = got[0][1] if got else []
            if not entries:
                break
            await self.count(entries)
        self._own_done = True

    async def claim(self) -> int:
        """Claim and count the events other consumers left pending too long; how many."""
        start, total = "0-0", 0
        idle_ms = int(self.cfg.claim_idle_s * 1000)
        while True:
            got = await self.client.xautoclaim(
                STREAM, GROUP, self.name, idle_ms, start_id=start, count=self.cfg.batch
            )
            start, entries = _text(got[0]), got[1]
            total += len(entries)
            await self.count(entries)
            if start == "0-0":
                return total

    async def step(self, block_ms: int = 1000) -> int:
        """One round: claims when due, one batch of new events (waiting up to block_ms for it),
        housekeeping when due; how many entries it handled."""
        if not self._own_done:
            await self._own()
        now = self.clock()
        handled = 0
        if now >= self._next_claim:
            handled += await self.claim()
            self._next_claim = now + self.cfg.claim_idle_s / 2
        counted, read, last = await self._read(
            args=[
                STREAM,
                GROUP,
                self.cfg.dedupe_ttl_s,
                day_of(now),
                self.cfg.batch,
            ]
        )
        self.counted += int(counted)
        self.handled += int(read)
        handled += int(read)
        if not read and block_ms:
            # nothing new: wait until the stream has an entry after the last one it had
            await self.client.xread({STREAM: _text(last) or "0-0"}, count=1, block=block_ms)
        if now >= self._next_housekeeping:
            await self.housekeeping(now)
            self._next_housekeeping = now + _HOUSEKEEPING_S
        return handled

    async def housekeeping(self, now: float) -> None:
        """Close the months that are due; trim counted events older than the retention."""
        for tenant, month in await self.ledger.close_due(now):
            log.info("closed the invoice of %s for %s", tenant, month)
        await self.trim(now)

    async def trim(self, now: float) -> int:
        """Drop counted events older than the retention (never one pending or unread)."""
        bound = (int((now - self.cfg.stream_retention_s) * 1000), 0)
        try:
            groups = await self.client.xinfo_groups(STREAM)
        except ResponseError:
            return 0
        for g in groups:
            last = g.get("last-delivered-id")
            if last is not None:  # entries after it are unread
                ms, seq = _id(_text(last))
                bound = min(bound, (ms, seq + 1))
        pending = await self.client.xpending(STREAM, GROUP)
        if pending and pending.get("pending") and pending.get("min"):
            bound = min(bound, _id(_text(pending["min"])))
        minid = f"{bound[0]}-{bound[1]}"
        return int(await self.client.xtrim(STREAM, minid=minid, approximate=False))

    async def lag(self) -> dict[str, int]:
        """Entries not yet read by the group, and read but not acknowledged."""
        return await backlog(self.client)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until stop is set; Redis errors are waited out (backoff with jitter)."""
        wait = 0.05
        while not stop.is_set():
            try:
                if not self._own_done:
                    await self.setup()
                await self.step()
                wait = 0.05
            except RedisError as exc:
                log.warning("billing consumer: %s; retrying in %.2f s", type(exc).__name__, wait)
                await asyncio.sleep(wait * random.uniform(0.5, 1.0))
                wait = min(5.0, wait * 2)
