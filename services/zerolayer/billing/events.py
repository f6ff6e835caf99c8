"""Usage events: one per request, CloudEvents-shaped JSON, written to a Redis stream together
with its dedupe marker in one server-side script (a retried write neither loses nor doubles it).

An event is written when a request is settled (gateway.pipeline): the same script that frees the
request's place in its key's limits and corrects its spend adds the event, so the budget counter
and the ledger never disagree about a request, whichever step a crash interrupts. Refused
requests (shed, rate limited, invalid) are written by `EventWriter.write`, without a settlement.

Redis keys (zerolayer.store.keyspace): usage:events (the stream; field `e` holds the event's JSON,
`a` a summary line of what counting needs, fields joined by the unit separator: id, tenant, key id,
plan, model, tier, prices, status, day, prompt, cached prompt and completion tokens, cost in
nano-dollars), usage:seen:<event id> (its dedupe marker, kept `billing.dedupe_ttl_s`).
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from zerolayer.config import TierPrice, usd_text
from zerolayer.store import keyspace

__all__ = [
    "EVENT_TYPE",
    "RECORD_LUA",
    "SEEN_PREFIX",
    "STATUSES",
    "STREAM",
    "EventWriter",
    "UsageEvent",
    "day_of",
    "rfc3339",
]

STREAM = keyspace.usage_events()
SEEN_PREFIX = keyspace.usage_seen_prefix()
EVENT_TYPE = "ai.zerolayer.usage.v1"
SOURCE = "/zerolayer/gateway"
# ok: answered; client_disconnect: the client left (delivered tokens billed); engine_error: the
# tier failed or did not answer (delivered tokens billed); shed: refused by admission control;
# rate_limited: refused by a limit of the plan; invalid: refused after the key was checked (a
# prompt longer than the context, an unknown tier). Refused requests cost nothing.
STATUSES = ("ok", "client_disconnect", "engine_error", "shed", "rate_limited", "invalid")

# record(stream, seen_prefix, id, json, line, ttl): add the event once; 1 if added, 0 if it was
RECORD_LUA = """
local function record(stream, seen, id, event, line, ttl)
  if redis.call('SET', seen .. id, 1, 'NX', 'EX', ttl) then
    redis.call('XADD', stream, '*', 'e', event, 'a', line)
    return 1
  end
  return 0
end
"""

# ARGV: stream, seen prefix, ttl, then id, json, line triples
_WRITE = (
    RECORD_LUA
    + """
local n = 0
for i = 4, #ARGV, 3 do
  n = n + record(ARGV[1], ARGV[2], ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[3])
end
return n
"""
)
SEP = "\x1f"


def _split(t: float) -> tuple[int, int]:
    """(seconds, microseconds) of a time, rounded as datetime.fromtimestamp rounds it."""
    frac, whole = math.modf(t)
    us = round(frac * 1_000_000)
    if us >= 1_000_000:
        whole, us = whole + 1, us - 1_000_000
    return int(whole), us


def rfc3339(t: float) -> str:
    """A time as CloudEvents states it (UTC, milliseconds)."""
    s, us = _split(t)
    return f"{_second(s)}.{us // 1000:03d}Z"


@functools.lru_cache(maxsize=256)
def _second(s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s))


def day_of(t: float) -> str:
    """The UTC day of a time, YYYY-MM-DD."""
    return _day(_split(t)[0] // 86400)


@functools.lru_cache(maxsize=64)
def _day(n: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(n * 86400))


@dataclass
class UsageEvent:
    """What one request used. `day` is the UTC day it is billed to: the day its limits were
    first checked, the same instant whose month its spend was counted in."""

    id: str
    tenant: str
    key_id: str
    plan: str
    model: str
    tier: str
    endpoint: str
    status: str
    started: float
    ended: float
    day: str
    price: TierPrice | None = None  # None: a free call (chunking)
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 1  # a summarised prompt's map-reduce calls count here
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cost_nanos(self) -> int:
        """Exact cost in nano-dollars; refused requests and free calls cost nothing."""
        if self.price is None or self.status in ("shed", "rate_limited", "invalid"):
            return 0
        return self.price.nanos(
            self.prompt_tokens, self.completion_tokens, self.cached_prompt_tokens
        )

    def cloudevent(self) -> dict[str, Any]:
        """The event as CloudEvents 1.0 structured JSON."""
        nanos = self.cost_nanos
        data: dict[str, Any] = {
            "tenant": self.tenant,
            "key_id": self.key_id,
            "plan": self.plan,
            "model": self.model,
            "tier": self.tier,
            "endpoint": self.endpoint,
            "status": self.status,
            "day": self.day,
            "started_at": rfc3339(self.started),
            "ended_at": rfc3339(self.ended),
            "duration_ms": round((self.ended - self.started) * 1000, 3),
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model_calls": self.model_calls,
            "prices": self.price.applied() if self.price is not None else None,
            "cost_usd": usd_text(nanos),
            "cost_nanos": nanos,  # the same amount, as an integer the aggregation adds up
            **self.extra,
        }
        return {
            "specversion": "1.0",
            "id": self.id,
            "source": SOURCE,
            "type": EVENT_TYPE,
            "subject": self.tenant,
            "time": rfc3339(self.ended),
            "datacontenttype": "application/json",
            "data": data,
        }

    def json(self) -> str:
        return json.dumps(self.cloudevent(), separators=(",", ":"))

    def line(self) -> str:
        """The summary line counting reads instead of the JSON ("" when a part holds the
        separator: counting reads the JSON then)."""
        p = self.price.applied() if self.price is not None else None
        sig = "" if p is None else "/".join(p.values())
        parts = [
            self.id,
            self.tenant,
            self.key_id,
            self.plan,
            self.model,
            self.tier,
            sig,
            self.status,
            self.day,
            str(self.prompt_tokens),
            str(self.cached_prompt_tokens),
            str(self.completion_tokens),
            str(self.cost_nanos),
        ]
        return "" if any(SEP in x for x in parts) else SEP.join(parts)


class EventWriter:
    """Writes usage events that settle nothing (refused requests), idempotently by id."""

    def __init__(self, client: aioredis.Redis, dedupe_ttl_s: int):
        self.client = client
        self.ttl_s = dedupe_ttl_s
        self._write = client.register_script(_WRITE)

    async def write(self, *events: UsageEvent) -> int:
        """Add the events not written before; how many were new."""
        args: list[str | int] = [STREAM, SEEN_PREFIX, self.ttl_s]
        for ev in events:
            args += [ev.id, ev.json(), ev.line()]
        return int(await self._write(args=args))
