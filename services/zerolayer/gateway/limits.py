"""Per-key limits of a plan, kept in Redis and checked atomically by server-side scripts, so any
number of gateway replicas sharing one Redis enforce them together.

A request passes two steps, so that the cheap limits come before any heavy work:

1. `request`, right after the key is checked (before the body is tokenized): one request of the
   minute's request count and a concurrency lease.
2. `reserve`, once the prompt's size is known: prompt tokens + max_tokens of the minute's token
   count, and the request's largest possible cost of the month's spend (exact integer
   nano-dollars, the unit of the invoices). A refusal here gives the
   lease back (the request still counts as a request).

When the request ends (finished, failed or abandoned) `settle` gives back the lease, corrects
tokens and spend to what was delivered, and adds the request's usage event to the billing stream,
all in one script: the budget and the ledger agree on every request. Every step is idempotent by
request id: a retried call (redis-py retries after a dropped connection) neither takes nor gives
back twice, and a second settle is a no-op. A reservation is a hash `...:res:<request id>`; the
lease is its entry in the key's sorted set `...:conc`, scored by when it ends. Gateways renew the
leases of their requests in flight; a lease that ran out belongs to a gateway that died, and
`sweep` gives its reservation back (tokens and worst-case cost: such a request wrote no usage
event, so it costs nothing in the budget and on the invoice alike).

Time is Redis's (`TIME` in the scripts), so every gateway agrees on minutes and leases whatever
its own clock says; only the day a request is billed to (its spend counter's month, its usage
event's day) is the gateway's, taken once when the request is first counted. A test may pin the
time with `clock`.

Windows are fixed calendar minutes (UTC); the token count admits a request when the minute's
count plus its reservation fits the limit, or when the minute is still empty (so one request
larger than the whole limit is not refused for ever).

Redis keys (zerolayer.store.keyspace; hash-tagged by key id, so one key's are on one shard):
rl:{id}:req:<minute>, rl:{id}:api:<minute> (the other routes' requests, `api_request`),
rl:{id}:tok:<minute>, rl:{id}:conc, rl:{id}:res:<request id>,
rl:{id}:cost:<YYYY-MM> (nano-USD). The scripts build the minute's and the reservation's key
names from the key's prefix: all share its hash tag.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from zerolayer.billing.events import (
    RECORD_LUA,
    SEEN_PREFIX,
    STREAM,
    EventWriter,
    UsageEvent,
    day_of,
)
from zerolayer.config import PlanConfig, PlanLimits, usd_text
from zerolayer.errors import RateLimited
from zerolayer.store import keyspace

__all__ = ["Reservation", "Limiter", "month_of", "rate_headers", "retried"]

log = logging.getLogger(__name__)

_COMMON = """
local function redis_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function now_ms()
  if tonumber(ARGV[1]) > 0 then return tonumber(ARGV[1]) end
  return redis_ms()
end
local function correct(key, delta)
  if delta ~= 0 and redis.call('EXISTS', key) == 1 then
    if redis.call('INCRBY', key, delta) < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
  end
end
-- end a reservation: the lease back, tokens, spend and extra requests corrected to what was
-- used (only counters the plan keeps exist)
local function give_back(p, rid, used_tokens, used_nanos, used_extra)
  local res = p .. ':res:' .. rid
  local h = redis.call('HMGET', res, 'minute', 'tokens', 'nanos', 'month', 'extra')
  redis.call('ZREM', p .. ':conc', rid)
  if not h[1] then return 0 end
  local tokens, nanos = tonumber(h[2]), tonumber(h[3])
  if h[4] then
    correct(p .. ':tok:' .. h[1], used_tokens - tokens)
    correct(p .. ':cost:' .. h[4], used_nanos - nanos)
    correct(p .. ':req:' .. h[1], used_extra - tonumber(h[5] or '0'))
  end
  redis.call('DEL', res)
  return 1
end
"""

# ARGV: now_ms|0, prefix, rid, rpm, conc, lease_ms
_REQUEST = (
    _COMMON
    + """
local p, rid = ARGV[2], ARGV[3]
local rpm, conc, lease = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = now_ms()
local res = p .. ':res:' .. rid
local minute = math.floor(now / 60000)
local reqk, leases = p .. ':req:' .. minute, p .. ':conc'
if redis.call('EXISTS', res) == 1 then
  return {'ok', tonumber(redis.call('GET', reqk) or '0'), now,
          tonumber(redis.call('HGET', res, 'at') or '0')}
end
if rpm >= 0 then
  local used = tonumber(redis.call('GET', reqk) or '0')
  if used >= rpm then return {'requests_per_minute', used, now} end
end
if conc >= 0 then
  local used = redis.call('ZCOUNT', leases, now, '+inf')
  if used >= conc then return {'concurrent_requests', used, now} end
end
local counted = -1
if rpm >= 0 then
  counted = redis.call('INCR', reqk)
  redis.call('EXPIRE', reqk, 120)
end
redis.call('ZADD', leases, now + lease, rid)
local at = redis_ms()
redis.call('HSET', res, 'minute', minute, 'tokens', 0, 'nanos', 0, 'at', at)
return {'ok', counted, now, at}
"""
)

# ARGV: now_ms|0, prefix, limit: one request of the minute to the routes other than the model
# calls, unless the minute's are used up
_API = (
    _COMMON
    + """
local now = now_ms()
local k = ARGV[2] .. ':api:' .. math.floor(now / 60000)
local used = tonumber(redis.call('GET', k) or '0')
if used >= tonumber(ARGV[3]) then return {0, used, now} end
used = redis.call('INCR', k)
redis.call('EXPIRE', k, 120)
return {1, used, now}
"""
)

# ARGV: now_ms|0, prefix, rid, tokens, tpm, budget, nanos, month, month_ttl_s, extra, rpm
_RESERVE = (
    _COMMON
    + """
local p, rid = ARGV[2], ARGV[3]
local tokens, tpm = tonumber(ARGV[4]), tonumber(ARGV[5])
local budget, nanos, month, month_ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8], ARGV[9]
local extra, rpm = tonumber(ARGV[10]), tonumber(ARGV[11])
local res = p .. ':res:' .. rid
local h = redis.call('HMGET', res, 'minute', 'month')
if not h[1] then return {'gone', 0} end
local reqk, tokk, spend = p .. ':req:' .. h[1], p .. ':tok:' .. h[1], p .. ':cost:' .. month
if h[2] then return {'ok', tonumber(redis.call('GET', tokk) or '-1')} end
if rpm >= 0 and extra > 0 then
  local used = tonumber(redis.call('GET', reqk) or '0')
  if used + extra > rpm then
    give_back(p, rid, 0, 0, 0)
    return {'requests_per_minute', used}
  end
end
if tpm >= 0 then
  local used = tonumber(redis.call('GET', tokk) or '0')
  if used > 0 and used + tokens > tpm then
    give_back(p, rid, 0, 0, 0)
    return {'tokens_per_minute', used}
  end
end
if budget >= 0 then
  local used = tonumber(redis.call('GET', spend) or '0')
  if used + nanos > budget then
    give_back(p, rid, 0, 0, 0)
    return {'monthly_budget', used}
  end
end
if rpm >= 0 and extra > 0 then redis.call('INCRBY', reqk, extra) end
local counted = -1
if tpm >= 0 then
  counted = redis.call('INCRBY', tokk, tokens)
  redis.call('EXPIRE', tokk, 120)
else
  tokens = 0
end
redis.call('INCRBY', spend, nanos)
redis.call('EXPIRE', spend, month_ttl)
if rpm < 0 then extra = 0 end
redis.call('HSET', res, 'tokens', tokens, 'nanos', nanos, 'month', month, 'extra', extra)
return {'ok', counted}
"""
)

# ARGV: now_ms|0, prefix, rid, used_tokens, used_nanos, used_extra[, stream, seen prefix,
# dedupe ttl, event id, event json, event line]: the settlement, and the request's usage event
# added once. A request id whose usage event is there already ran and was counted (a batch's
# request run again after its worker lost what it noted): this run's reservation is given back
# whole, so the month's spend and the minute's tokens count the request once, as the invoice does
_SETTLE = (
    _COMMON
    + RECORD_LUA
    + """
local used_t, used_n, used_x = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local added = 0
if #ARGV >= 12 then
  added = record(ARGV[7], ARGV[8], ARGV[10], ARGV[11], ARGV[12], ARGV[9])
  if added == 0 then used_t, used_n, used_x = 0, 0, 0 end
end
local done = give_back(ARGV[2], ARGV[3], used_t, used_n, used_x)
return {done, added}
"""
)

# ARGV: now_ms|0, prefix, lease_ms, rid...
_RENEW = (
    _COMMON
    + """
local leases, ends = ARGV[2] .. ':conc', now_ms() + tonumber(ARGV[3])
local n = 0
for i = 4, #ARGV do
  n = n + redis.call('ZADD', leases, 'XX', 'CH', ends, ARGV[i])
end
return n
"""
)

# ARGV: now_ms|0, prefix, most
_SWEEP = (
    _COMMON
    + """
local p = ARGV[2]
local gone = redis.call('ZRANGEBYSCORE', p .. ':conc', '-inf', '(' .. now_ms(), 'LIMIT', 0,
  tonumber(ARGV[3]))
for _, rid in ipairs(gone) do give_back(p, rid, 0, 0, 0) end
return #gone
"""
)

_NAMES = {
    "requests_per_minute": "requests per minute",
    "tokens_per_minute": "tokens per minute",
    "concurrent_requests": "concurrent requests",
    "monthly_budget": "monthly budget",
    "api_requests_per_minute": "requests per minute to the other routes",
}


def month_of(now: float) -> tuple[str, float]:
    """The UTC month of a time ('YYYY-MM') and the seconds until the next one starts."""
    month, ends = _month_of_day(math.floor(now / 86400))
    return month, ends - now


@functools.lru_cache(maxsize=64)
def _month_of_day(day: int) -> tuple[str, float]:
    """The month of a UTC day (days since 1970) and when the next month starts (a request
    asks for its month twice; working it out with datetime cost more than the rest of it)."""
    t = datetime.fromtimestamp(day * 86400, tz=timezone.utc)
    nxt = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=timezone.utc)
    return f"{t.year:04d}-{t.month:02d}", nxt.timestamp()


@dataclass(frozen=True)
class Reservation:
    """A request's place in its key's limits (what it took is kept in Redis under its id)."""

    key_id: str
    request_id: str
    minute: int  # Redis's minute when the request was counted
    day: str = ""  # the UTC day (YYYY-MM-DD) it is billed to, the gateway's when it was counted
    requests: int = -1  # the key's requests of that minute once this one counted (-1: no limit)
    at_ms: int = 0  # Redis's time (ms) when it was counted (what a tenant's purge fence compares)

    @property
    def month(self) -> str:
        return self.day[:7]


def rate_headers(limits: PlanLimits, r: Reservation, tokens: int, now: float) -> dict[str, str]:
    """The x-ratelimit-* headers of an admitted request, as OpenAI sends them: per limit of
    the plan that has one, its size, what is left of the current minute after this request
    (tokens: its reservation, prompt + max_tokens), and when the minute's count starts over.
    `tokens` is the minute's count after the reservation (-1: not reserved yet)."""
    reset = f"{max(1, math.ceil((r.minute + 1) * 60 - now))}s"
    out: dict[str, str] = {}
    for name, cap, used in (
        ("requests", limits.requests_per_minute, r.requests),
        ("tokens", limits.tokens_per_minute, tokens),
    ):
        if cap is not None and used >= 0:
            out[f"x-ratelimit-limit-{name}"] = str(cap)
            out[f"x-ratelimit-remaining-{name}"] = str(max(0, cap - used))
            out[f"x-ratelimit-reset-{name}"] = reset
    return out


_prefix = keyspace.rate_limit


def _arg(limit: float | None) -> int:
    return -1 if limit is None else int(limit)


async def retried(
    step: Callable[[], Awaitable[object]],
    what: str,
    stop: asyncio.Event | None = None,
    first_s: float = 0.05,
    most_s: float = 5.0,
) -> bool:
    """Run an async Redis step until Redis answers (backoff with jitter up to most_s), or until
    `stop` is set; True when it ran."""
    wait = first_s
    while True:
        try:
            await step()
            return True
        except RedisError as exc:
            log.warning("%s failed (%s); retrying in %.2f s", what, type(exc).__name__, wait)
        if stop is not None and stop.is_set():
            return False
        await asyncio.sleep(wait * random.uniform(0.5, 1.0))
        wait = min(most_s, wait * 2)


class Limiter:
    """The two admission steps against a plan's per-key limits, settlement when a request ends,
    lease renewal and the sweep of leases whose gateway died."""

    def __init__(
        self,
        client: aioredis.Redis,
        lease_s: float = 60.0,
        clock: Callable[[], float] | None = None,
        dedupe_ttl_s: int = 40 * 86400,
    ):
        self.client = client
        self.lease_ms = int(lease_s * 1000)
        self.dedupe_ttl_s = dedupe_ttl_s
        self.events = EventWriter(client, dedupe_ttl_s)  # usage events that settle nothing
        self.clock = clock  # None: Redis's time (tests pin it)
        self._api = client.register_script(_API)
        self._request = client.register_script(_REQUEST)
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._renew = client.register_script(_RENEW)
        self._sweep = client.register_script(_SWEEP)

    def _pinned_ms(self) -> int:
        return int(self.clock() * 1000) if self.clock is not None else 0

    def now(self) -> float:
        """The time the limits count in (the pinned clock in tests, else this machine's)."""
        return self.clock() if self.clock is not None else time.time()

    async def request(
        self, key_id: str, plan_name: str, plan: PlanConfig, request_id: str
    ) -> Reservation:
        """Step 1: count the request and take a concurrency lease, or raise RateLimited."""
        lim = plan.limits
        status, used, now_ms, *admitted = await self._request(
            args=[
                self._pinned_ms(),
                _prefix(key_id),
                request_id,
                _arg(lim.requests_per_minute),
                _arg(lim.concurrent_requests),
                self.lease_ms,
            ],
        )
        status, now = keyspace.text(status), int(now_ms) / 1000
        if status != "ok":
            raise self._refusal(status, int(used), plan_name, plan, 0, 0, now)
        # an admission also returns Redis's own time, even when a test pins the limits' clock
        # (a refusal does not): what a tenant's purge fence compares
        at_ms = int(admitted[0])
        return Reservation(key_id, request_id, int(now // 60), day_of(self.now()), int(used), at_ms)

    async def api_request(self, key_id: str, plan_name: str, plan: PlanConfig) -> None:
        """Count one request to a route other than the model calls against the plan's
        api_requests_per_minute, or raise RateLimited (refusals do not count)."""
        cap = plan.limits.api_requests_per_minute
        if cap is None:
            return
        ok, used, now_ms = await self._api(args=[self._pinned_ms(), _prefix(key_id), cap])
        if not int(ok):
            raise self._refusal(
                "api_requests_per_minute", int(used), plan_name, plan, 0, 0, int(now_ms) / 1000
            )

    async def reserve(
        self,
        r: Reservation,
        plan_name: str,
        plan: PlanConfig,
        tokens: int,
        nanos: int,
        extra_requests: int = 0,
    ) -> int:
        """Step 2: reserve tokens and worst-case spend, and count `extra_requests` more
        requests of the minute (the model calls a request fans out to), or raise RateLimited
        (the lease is given back then). Returns the minute's token count with this reservation
        (-1 when the plan has no token limit)."""
        lim = plan.limits
        budget = lim.budget_nanos
        now = self.now()
        month_left = month_of(now)[1]
        month = r.month or month_of(now)[0]
        status, used = await self._reserve(
            args=[
                self._pinned_ms(),
                _prefix(r.key_id),
                r.request_id,
                tokens,
                _arg(lim.tokens_per_minute),
                _arg(budget),
                nanos,
                month,
                int(month_left) + 7 * 86400,  # kept a week past the month for late settles
                extra_requests,
                _arg(lim.requests_per_minute),
            ],
        )
        status = keyspace.text(status)
        if status == "gone":
            raise RateLimited(
                "the request's concurrency lease ran out before it was admitted; retry",
                1.0,
                code="concurrent_requests",
            )
        if status != "ok":
            raise self._refusal(status, int(used), plan_name, plan, tokens, nanos, now)
        return int(used)

    def _refusal(
        self,
        limit: str,
        used: int,
        plan_name: str,
        plan: PlanConfig,
        tokens: int,
        nanos: int,
        now: float,
    ) -> RateLimited:
        lim = plan.limits
        if limit == "monthly_budget":
            spent, cap = usd_text(used), lim.monthly_budget_usd
            detail = f"spent ${spent} of ${cap}; this request may cost up to ${usd_text(nanos)}"
            retry = month_of(now)[1]
        elif limit == "concurrent_requests":
            detail = f"{used} of {lim.concurrent_requests} in flight"
            retry = 1.0
        else:
            cap = getattr(lim, limit)
            asks = f"; this request reserves {tokens}" if limit == "tokens_per_minute" else ""
            detail = f"{used} of {cap} used this minute{asks}"
            retry = 60 - now % 60
        return RateLimited(
            f"rate limit reached: {_NAMES[limit]} of plan {plan_name!r} ({detail})",
            retry,
            code=limit,
        )

    async def abandon(self, key_id: str, request_id: str) -> bool:
        """Give back the lease (and reservation) of a request whose admission may or may not
        have run: its reply was lost with the connection. False if there was none to give."""
        args: list[str | int] = [self._pinned_ms(), _prefix(key_id), request_id, 0, 0, 0]
        done, _ = await self._settle(args=args)
        return bool(done)

    async def settle(
        self,
        r: Reservation,
        tokens: int,
        nanos: int,
        extra: int = 0,
        event: UsageEvent | None = None,
    ) -> bool:
        """The request ended having used `tokens` (prompt + delivered) costing `nanos` and made
        `extra` further model calls: free its lease, correct the minute's tokens and requests
        and the month's spend, and add its usage event (once, by its id), in one step. False
        if it was settled (or swept) before: the limits do not change then, and the event is
        added only if it was not."""
        args: list[str | int] = [
            self._pinned_ms(),
            _prefix(r.key_id),
            r.request_id,
            tokens,
            nanos,
            extra,
        ]
        if event is not None:
            args += [STREAM, SEEN_PREFIX, self.dedupe_ttl_s, event.id, event.json(), event.line()]
        done, _ = await self._settle(args=args)
        return bool(done)

    async def spent(self, key_id: str, month: str) -> int:
        """A key's spend counter for a month, in nano-dollars."""
        return int(await self.client.get(f"{_prefix(key_id)}:cost:{month}") or 0)

    async def renew(self, reservations: Iterable[Reservation]) -> None:
        """Extend the leases of requests still in flight (one script call per key)."""
        by_key: dict[str, list[str]] = {}
        for r in reservations:
            by_key.setdefault(r.key_id, []).append(r.request_id)
        for key_id, rids in by_key.items():
            await self._renew(args=[self._pinned_ms(), _prefix(key_id), self.lease_ms, *rids])

    async def sweep(self, most: int = 1000) -> int:
        """Give back the reservations whose lease ran out (their gateway died); how many."""
        n = 0
        async for name in self.client.scan_iter(
            match=keyspace.rate_limit_leases_pattern(), count=500
        ):
            prefix = keyspace.text(name).removesuffix(":conc")
            n += int(await self._sweep(args=[self._pinned_ms(), prefix, most]))
        return n
