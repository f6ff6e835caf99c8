"""Per-key limits of a plan, kept in Redis and checked atomically by server-side scripts, so any
number of gateway replicas sharing one Redis enforce them together.

Admission checks every limit of the key's plan and, only if all pass, takes its share of each in
the same script: one request of the minute's request count, prompt tokens + max_tokens of the
minute's token count, a concurrency lease, and the request's largest possible cost of the month's
spend. When the request ends (finished, failed or abandoned) `settle` gives back the concurrency
lease and corrects tokens and spend to what was delivered. A lease whose gateway died expires.

Windows are fixed calendar minutes (UTC); the token count admits a request when the minute's
count plus its reservation fits the limit, or when the minute is still empty (so one request
larger than the whole limit is not refused for ever). A burst therefore lets through at most the
limit, or one oversized request.

Redis keys (hash-tagged by key id): zl:rl:{id}:req:<minute>, zl:rl:{id}:tok:<minute>,
zl:rl:{id}:conc (sorted set of request ids by lease end), zl:rl:{id}:spend:<YYYY-MM> (micro-USD).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import redis.asyncio as aioredis

from zerolayer.config import PlanConfig
from zerolayer.errors import RateLimited

__all__ = ["Reservation", "Limiter", "month_of"]

_ADMIT = """
local now_ms = tonumber(ARGV[1])
local rpm, tpm = tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local conc, rid, lease_ms = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local budget, micros, month_ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if rpm >= 0 then
  local used = tonumber(redis.call('GET', KEYS[1]) or '0')
  if used >= rpm then return {'requests_per_minute', used} end
end
if tpm >= 0 then
  local used = tonumber(redis.call('GET', KEYS[2]) or '0')
  if used > 0 and used + tokens > tpm then return {'tokens_per_minute', used} end
end
if conc >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  local used = redis.call('ZCARD', KEYS[3])
  if used >= conc then return {'concurrent_requests', used} end
end
if budget >= 0 then
  local used = tonumber(redis.call('GET', KEYS[4]) or '0')
  if used + micros > budget then return {'monthly_budget', used} end
end
if rpm >= 0 then
  redis.call('INCR', KEYS[1])
  redis.call('EXPIRE', KEYS[1], 120)
end
if tpm >= 0 then
  redis.call('INCRBY', KEYS[2], tokens)
  redis.call('EXPIRE', KEYS[2], 120)
end
if conc >= 0 then
  redis.call('ZADD', KEYS[3], now_ms + lease_ms, rid)
  redis.call('PEXPIRE', KEYS[3], lease_ms)
end
redis.call('INCRBY', KEYS[4], micros)
redis.call('EXPIRE', KEYS[4], month_ttl)
return {'ok', 0}
"""

_SETTLE = """
local dt, rid, dm = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if dt ~= 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('INCRBY', KEYS[1], dt) < 0 then redis.call('SET', KEYS[1], 0, 'KEEPTTL') end
end
redis.call('ZREM', KEYS[2], rid)
if dm ~= 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  if redis.call('INCRBY', KEYS[3], dm) < 0 then redis.call('SET', KEYS[3], 0, 'KEEPTTL') end
end
return 1
"""

_NAMES = {
    "requests_per_minute": "requests per minute",
    "tokens_per_minute": "tokens per minute",
    "concurrent_requests": "concurrent requests",
    "monthly_budget": "monthly budget",
}


def month_of(now: float) -> tuple[str, float]:
    """The UTC month of a time ('YYYY-MM') and the seconds until the next one starts."""
    t = datetime.fromtimestamp(now, tz=timezone.utc)
    nxt = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=timezone.utc)
    return f"{t.year:04d}-{t.month:02d}", nxt.timestamp() - now


@dataclass(frozen=True)
class Reservation:
    """What admission took for one request, so that settle can give back the rest."""

    key_id: str
    request_id: str
    minute: int
    month: str
    tokens: int  # reserved on the minute's token count (0: the plan has no token limit)
    micros: int  # reserved on the month's spend


def _keys(key_id: str, minute: int, month: str) -> tuple[str, str, str, str]:
    base = f"zl:rl:{{{key_id}}}"
    return f"{base}:req:{minute}", f"{base}:tok:{minute}", f"{base}:conc", f"{base}:spend:{month}"


def _arg(limit: float | None) -> int:
    return -1 if limit is None else int(limit)


class Limiter:
    """Admission against a plan's per-key limits, and settlement when a request ends."""

    def __init__(
        self,
        client: aioredis.Redis,
        lease_s: float = 900.0,
        clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.lease_ms = int(lease_s * 1000)
        self.clock = clock
        self._admit = client.register_script(_ADMIT)
        self._settle = client.register_script(_SETTLE)

    async def admit(
        self,
        key_id: str,
        plan_name: str,
        plan: PlanConfig,
        request_id: str,
        tokens: int,
        micros: int,
    ) -> Reservation:
        """Take the request's share of every limit, or raise RateLimited naming the first limit
        it would break (nothing is taken then)."""
        now = self.clock()
        minute = int(now // 60)
        month, month_left = month_of(now)
        lim = plan.limits
        budget = None if lim.monthly_budget_usd is None else round(lim.monthly_budget_usd * 1e6)
        tpm = lim.tokens_per_minute
        status, used = await self._admit(
            keys=list(_keys(key_id, minute, month)),
            args=[
                int(now * 1000),
                _arg(lim.requests_per_minute),
                _arg(tpm),
                tokens,
                _arg(lim.concurrent_requests),
                request_id,
                self.lease_ms,
                _arg(budget),
                micros,
                int(month_left) + 7 * 86400,  # kept a week past the month for late settles
            ],
        )
        status = status.decode() if isinstance(status, bytes) else status
        if status != "ok":
            raise self._refusal(status, int(used), plan_name, plan, tokens, micros, now)
        return Reservation(key_id, request_id, minute, month, tokens if tpm else 0, micros)

    def _refusal(
        self,
        limit: str,
        used: int,
        plan_name: str,
        plan: PlanConfig,
        tokens: int,
        micros: int,
        now: float,
    ) -> RateLimited:
        lim = plan.limits
        if limit == "monthly_budget":
            spent, cap = used / 1e6, float(lim.monthly_budget_usd or 0)
            detail = f"spent ${spent:.4f} of ${cap:.2f}; this request may cost ${micros / 1e6:.4f}"
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

    async def settle(self, r: Reservation, tokens: int, micros: int) -> None:
        """The request ended having used `tokens` (prompt + delivered) costing `micros`: free its
        concurrency lease and correct the minute's tokens and the month's spend."""
        _, tok, conc, spend = _keys(r.key_id, r.minute, r.month)
        await self._settle(
            keys=[tok, conc, spend],
            args=[tokens - r.tokens if r.tokens else 0, r.request_id, micros - r.micros],
        )
