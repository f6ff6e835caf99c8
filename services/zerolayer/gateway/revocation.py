"""Streams end within a second of their key's revocation.

A request's key is checked when it arrives; a stream then runs for as long as its engine
writes. While streams are open, each gateway replica asks Redis every `every_s` (half a second)
which of their keys were revoked since (one script for all of them, whatever their number), and
a stream whose key was revoked ends at its next event with a `key_revoked` failure (401), billed
for what it delivered. No stream open: no query."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from zerolayer.store import keyspace

__all__ = ["RevocationWatch"]

log = logging.getLogger(__name__)

# ARGV: key-id prefix, key-hash prefix, key ids...; the ids whose key is revoked or gone
_REVOKED = """
local out = {}
for i = 3, #ARGV do
  local digest = redis.call('GET', ARGV[1] .. ARGV[i])
  if (not digest) or redis.call('HGET', ARGV[2] .. digest, 'revoked') == '1' then
    table.insert(out, ARGV[i])
  end
end
return out
"""


class RevocationWatch:
    """Which keys of this replica's open streams were revoked (see the module's docstring)."""

    def __init__(self, client: aioredis.Redis, every_s: float = 0.5):
        self.every_s = every_s
        self._script = client.register_script(_REVOKED)
        self._open: Counter[str] = Counter()  # key id -> its open streams
        self.revoked: set[str] = set()  # of those keys, the ones revoked since
        self._task: asyncio.Task[None] | None = None

    def opened(self, key_id: str) -> None:
        """A stream of this key opened (close it with closed())."""
        self._open[key_id] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._watch())

    def closed(self, key_id: str) -> None:
        self._open[key_id] -= 1
        if self._open[key_id] <= 0:
            del self._open[key_id]
            self.revoked.discard(key_id)

    async def _watch(self) -> None:
        while self._open:
            await asyncio.sleep(self.every_s)
            ids = list(self._open)
            if not ids:
                return
            try:
                gone = await self._script(
                    args=[keyspace.api_key_id_prefix(), keyspace.api_key_prefix(), *ids]
                )
            except RedisError as exc:  # checked again at the next tick
                log.warning("revocation check failed: %s", type(exc).__name__)
                continue
            self.revoked.update(keyspace.text(k) for k in gone if keyspace.text(k) in self._open)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
