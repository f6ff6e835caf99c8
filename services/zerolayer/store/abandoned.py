"""What ran of a whole (non-streamed) request whose caller left: a tier replica whose call is
cancelled stops its engine and leaves the request's prompt and completion tokens here
(keyspace.abandoned, kept `TTL_S`); the gateway that cancelled it reads them to settle the
request to what ran. A stream needs none of this: its gateway counts every token it is sent."""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from zerolayer.store import keyspace

__all__ = ["AbandonedReports", "ran"]

log = logging.getLogger(__name__)

TTL_S = 600


class AbandonedReports:
    """A replica's reporter: called (synchronously, from the cancelled call) with a request's
    id and tokens; writes them in the background."""

    def __init__(self, client: aioredis.Redis):
        self.client = client
        self._writing: set[asyncio.Task[None]] = set()

    def __call__(self, request_id: str, prompt: int, completion: int) -> None:
        task = asyncio.ensure_future(self._write(request_id, prompt, completion))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _write(self, request_id: str, prompt: int, completion: int) -> None:
        try:
            await self.client.set(
                keyspace.abandoned(request_id), f"{prompt} {completion}", ex=TTL_S
            )
        except RedisError as exc:  # the gateway then settles the prompt alone
            log.warning("tokens of abandoned %s not reported: %s", request_id, type(exc).__name__)


async def ran(
    client: aioredis.Redis, request_id: str, wait_s: float, every_s: float = 0.1
) -> tuple[int, int] | None:
    """The prompt and completion tokens a replica reported for an abandoned request, waiting
    up to `wait_s` for the report; None when none came."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            got = await client.get(keyspace.abandoned(request_id))
        except RedisError:
            got = None
        if got is not None:
            prompt, _, completion = keyspace.text(got).partition(" ")
            return int(prompt), int(completion)
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(every_s)
