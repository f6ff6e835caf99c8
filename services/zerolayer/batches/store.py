"""Batches in Redis. A batch is a hash: its tenant, the key that made it (its requests run as
that key: its plan, limits and price), its fixed fields (OpenAI's batch object: endpoint, input
file, window, metadata, times), its status, counts and output files. Each request's result line
(OpenAI's output line: id, custom_id, response, error) is written once, by its line number,
with the count it adds, in one script: a request run twice (a worker that died after running it
and before noting it) is noted, and counted, once.

Queue: the batches still to run (validating, in progress, cancelling, finalizing), in a sorted
set by creation time; a worker takes one by a lease (SET NX PX) that it renews while it runs
the batch and that frees itself when the worker dies, so another gateway replica goes on with
it, skipping the lines already noted."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import redis.asyncio as aioredis

from zerolayer.conversations import NotFound
from zerolayer.store import keyspace
from zerolayer.store.pages import ids_after, list_page

__all__ = ["ACTIVE", "BatchStore", "NotCancellable", "new_batch_id"]

ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
_TIMES = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)

# KEYS: batch hash, its results hash; ARGV: line number, result line, 'completed'|'failed'
_NOTE = """
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
return 1
"""

# KEYS: batch hash; ARGV: now (s), new status, the statuses it may come from...
_MOVE = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return -1 end
for i = 3, #ARGV do
  if status == ARGV[i] then
    redis.call('HSET', KEYS[1], 'status', ARGV[2], ARGV[2] .. '_at', ARGV[1])
    return 1
  end
end
return 0
"""


class NotCancellable(Exception):
    """The batch has ended, or is being cancelled already."""


def new_batch_id() -> str:
    return "batch_" + secrets.token_hex(12)


class BatchStore:
    """Batches and their results (module doc)."""

    def __init__(self, client: aioredis.Redis):
        self.client = client
        self._note = client.register_script(_NOTE)
        self._move = client.register_script(_MOVE)

    async def create(
        self,
        tenant: str,
        key_id: str,
        endpoint: str,
        input_file_id: str,
        metadata: dict[str, str],
        total: int,
        window_s: int,
        bid: str | None = None,
    ) -> dict[str, Any]:
        bid = bid or new_batch_id()
        now = int(time.time())
        fixed = {
            "id": bid,
            "object": "batch",
            "endpoint": endpoint,
            "input_file_id": input_file_id,
            "completion_window": "24h",
            "created_at": now,
            "expires_at": now + window_s,
            "metadata": metadata or None,
        }
        key = keyspace.batch(bid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "tenant": tenant,
                "key_id": key_id,
                "fixed": json.dumps(fixed),
                "status": "validating",
                "total": total,
                "completed": 0,
                "failed": 0,
            },
        )
        pipe.zadd(keyspace.tenant_batches(tenant), {bid: time.time_ns() // 1000})
        pipe.zadd(keyspace.batch_queue(), {bid: now})
        await pipe.execute()
        return await self.get(tenant, bid)

    async def raw(self, bid: str) -> dict[str, str]:
        got = await self.client.hgetall(keyspace.batch(bid))
        return {keyspace.text(k): keyspace.text(v) for k, v in got.items()}

    async def status(self, bid: str) -> str | None:
        """A batch's status alone (None: no such batch)."""
        got = await self.client.hget(keyspace.batch(bid), "status")
        return None if got is None else keyspace.text(got)

    async def get(self, tenant: str, bid: str) -> dict[str, Any]:
        """A tenant's batch as OpenAI's batch object; NotFound when it has none of that id."""
        h = await self.raw(bid)
        if h.get("tenant") != tenant:
            raise NotFound(f"no batch with id {bid!r}")
        return _object(h)

    async def page(self, tenant: str, limit: int, after: str | None) -> dict[str, Any]:
        """A page of the tenant's batches, newest first (by cursor: `after`)."""
        got = await self.client.zrange(keyspace.tenant_batches(tenant), 0, -1, desc=True)
        ids = ids_after([keyspace.text(i) for i in got], after)  # type: ignore[arg-type]  # members
        if ids is None:
            raise NotFound(f"no batch with id {after!r} to list after")
        data = []
        for bid in ids[: limit + 1]:
            try:
                data.append(await self.get(tenant, bid))
            except NotFound:
                continue
        return list_page(data, limit)

    async def move(self, bid: str, status: str, *sources: str) -> bool:
        """Set a batch's status (and its time) if it is one of `sources` now."""
        done = await self._move(
            keys=[keyspace.batch(bid)], args=[int(time.time()), status, *sources]
        )
        return bool(done == 1)

    async def cancel(self, tenant: str, bid: str) -> dict[str, Any]:
        """Ask a running batch to stop: cancelling (the worker ends it as cancelled)."""
        await self.get(tenant, bid)
        if not await self.move(bid, "cancelling", "validating", "in_progress"):
            raise NotCancellable(bid)
        return await self.get(tenant, bid)

    async def note(self, bid: str, line: int, result: dict[str, Any], ok: bool) -> bool:
        """Write a request's result line, once; False if it was written before."""
        args: list[str | int] = [line, json.dumps(result), "completed" if ok else "failed"]
        done = await self._note(keys=[keyspace.batch(bid), keyspace.batch_results(bid)], args=args)
        return bool(done)

    async def noted(self, bid: str) -> set[int]:
        """The line numbers whose results are written."""
        return {int(k) for k in await self.client.hkeys(keyspace.batch_results(bid))}

    async def results(self, bid: str) -> dict[int, dict[str, Any]]:
        got = await self.client.hgetall(keyspace.batch_results(bid))
        return {int(k): json.loads(v) for k, v in got.items()}

    async def finish(self, bid: str, status: str, fields: dict[str, str]) -> None:
        """A batch's end: its status and time, its files, off the queue."""
        pipe = self.client.pipeline(transaction=True)
        mapping: dict[str, str | int] = {**fields, "status": status}
        mapping[f"{status}_at"] = int(time.time())
        pipe.hset(keyspace.batch(bid), mapping=mapping)  # type: ignore[arg-type]  # str keys are fine
        pipe.zrem(keyspace.batch_queue(), bid)
        await pipe.execute()

    async def unqueue(self, bid: str) -> None:
        await self.client.zrem(keyspace.batch_queue(), bid)

    async def queued(self) -> list[str]:
        got = await self.client.zrange(keyspace.batch_queue(), 0, -1)
        return [keyspace.text(i) for i in got]  # type: ignore[arg-type]  # members, no scores

    async def take(self, bid: str, worker: str, lease_ms: int) -> bool:
        """The lease of a queued batch, for this worker; False if another holds it."""
        return bool(await self.client.set(keyspace.batch_lease(bid), worker, nx=True, px=lease_ms))

    async def renew(self, bid: str, worker: str, lease_ms: int) -> bool:
        """Keep the lease (False: it ran out and is another's now)."""
        key = keyspace.batch_lease(bid)
        if keyspace.text(await self.client.get(key) or b"") != worker:
            return False
        return bool(await self.client.pexpire(key, lease_ms))

    async def release(self, bid: str, worker: str) -> None:
        key = keyspace.batch_lease(bid)
        if keyspace.text(await self.client.get(key) or b"") == worker:
            await self.client.delete(key)


def _object(h: dict[str, str]) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(h["fixed"])
    obj["status"] = h["status"]
    for name in _TIMES:
        obj[name] = int(h[name]) if name in h else None
    obj["output_file_id"] = h.get("output_file_id") or None
    obj["error_file_id"] = h.get("error_file_id") or None
    obj["errors"] = json.loads(h["errors"]) if h.get("errors") else None
    obj["request_counts"] = {
        "total": int(h.get("total", 0)),
        "completed": int(h.get("completed", 0)),
        "failed": int(h.get("failed", 0)),
    }
    return obj
