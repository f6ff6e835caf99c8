"""The meter of one gateway replica: the key's limits (requests and tokens per minute,
concurrency, the month's budget) in two steps, the leases of the requests in flight (renewed,
and swept for dead gateways), and every request's settlement with its usage event, retried in
the background until Redis answers. The request path (zerolayer.gateway.pipeline) and the routes
that bill without a tier (chunking) call it; it knows nothing of HTTP or of the tiers."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from zerolayer.billing.events import UsageEvent, day_of
from zerolayer.config import PlatformConfig, TierPrice
from zerolayer.config.pricing import Prices
from zerolayer.errors import (
    APIError,
    ClientGone,
    Overloaded,
    RateLimited,
    ShuttingDown,
    TierUnavailable,
)
from zerolayer.gateway.limits import Limiter, Reservation, rate_headers, retried
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.revocation import RevocationWatch
from zerolayer.gateway.sse import usage
from zerolayer.gateway.summarize import SummaryJob
from zerolayer.protocol import End, Target
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["Call", "Meter", "status_of"]

log = logging.getLogger(__name__)


def status_of(exc: BaseException) -> str:
    """The usage event status of a request that ended with this exception."""
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, Overloaded | ShuttingDown):
        return "shed"
    if isinstance(exc, asyncio.CancelledError | ClientGone):
        return "client_disconnect"
    if isinstance(exc, APIError) and exc.status_code < 500:
        return "invalid"
    return "engine_error"


@dataclass
class Call:
    """A request on its way to a tier, with what settlement needs."""

    record: ApiKeyRecord
    target: Target
    dest: Target
    reservation: Reservation
    job: SummaryJob | None = None
    tokenized: int = 0  # prompt tokens read for a request refused after tokenizing
    settled: bool = False
    deferred: bool = False  # its settlement waits for what ran (a whole request left): later
    endpoint: str = "chat.completions"  # the API it came through (its usage event says)
    started: float = 0.0  # when the gateway had it (time.time())
    free: bool = False  # a call without a price (chunking)
    tokens_counted: int = -1  # the key's tokens of the minute with this reservation
    batch: bool = False  # a request of a batch: billed at the plan's batch price

    def billed(self, prompt: int, completion: int) -> tuple[int, int]:
        """The request's tokens plus those of its map-reduce calls, if any."""
        if self.job is None:
            return prompt, completion
        return prompt + self.job.prompt_used, completion + self.job.completion_used

    def usage(self, prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
        """Usage as the reply reports it: billed tokens, map-reduce calls included; `cached`
        of the prompt's from the prefix cache."""
        return usage(*self.billed(prompt, completion), cached)


class Meter:
    """Limits, leases, settlement and usage events of one gateway replica's requests."""

    def __init__(
        self,
        limiter: Limiter,
        metrics: Metrics,
        config: PlatformConfig,
        prices: Prices | None = None,
    ):
        self.limiter = limiter
        self.metrics = metrics
        self.config = config
        self.prices = prices or Prices(config)
        self.inflight: dict[str, Reservation] = {}  # request id -> its place in the limits
        self._background: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self.draining = False  # shutting down: new requests are refused
        self.revocations = RevocationWatch(limiter.client)  # keys of open streams revoked

    async def request(self, record: ApiKeyRecord, rid: str) -> Reservation:
        """The cheap limits (requests/min, concurrency), before any heavy work."""
        if self.draining:
            raise ShuttingDown("the platform is shutting down; retry shortly", 5.0)
        self._keep()
        try:
            r = await self.limiter.request(
                record.key_id, record.plan, self.config.plans[record.plan], rid
            )
        except RateLimited as exc:
            self.metrics.inc("limited", exc.code or "", record.plan)
            raise
        except RedisError:
            # the script may have run before the connection broke, its reply lost: its lease is
            # given back once Redis answers again (a no-op if it never ran)
            async def step() -> None:
                await self.limiter.abandon(record.key_id, rid)

            self.later(retried(step, f"abandoning {rid}", self._stop))
            raise
        self.inflight[rid] = r
        return r

    async def reserve(
        self, record: ApiKeyRecord, r: Reservation, tokens: int, nanos: int, extra: int = 0
    ) -> int:
        """The limits that need the request's size: tokens/min and the monthly budget; the
        minute's token count with this reservation (-1: the plan has no token limit)."""
        try:
            return await self.limiter.reserve(
                r, record.plan, self.config.plans[record.plan], tokens, nanos, extra
            )
        except RateLimited as exc:
            self.inflight.pop(r.request_id, None)  # the script gave the lease back
            self.metrics.inc("limited", exc.code or "", record.plan)
            raise

    def price(self, call: Call) -> TierPrice:
        """What the call's tokens cost: its plan's price for its tier now (config.pricing; a
        batch's share of it); a 503 when the tier has no price yet."""
        plan = self.config.plans[call.record.plan]
        t = call.target
        price = self.prices.price(call.record.plan, t.model, t.tier)
        if price is None:
            raise TierUnavailable(
                f"{t} has no price yet: its cost is not measured and no other tier of plan "
                f"{call.record.plan!r} has a price to sell it at",
                60.0,
            )
        return price.batched(plan.batch_price_share) if call.batch else price

    async def priced(self, call: Call, prompt: int, completion: int, extra: int = 0) -> None:
        """Reserve a call on its tier: prompt + completion tokens at the plan's price for the
        tier (and `extra` more requests of the minute); the minute's count goes on the call."""
        price = self.price(call)
        call.tokens_counted = await self.reserve(
            call.record,
            call.reservation,
            prompt + completion,
            price.nanos(prompt, completion),
            extra,
        )

    async def free(
        self, record: ApiKeyRecord, rid: str, model: str, tokens: int, endpoint: str = "chunks"
    ) -> Call:
        """Both limit steps at once for a call that costs nothing but counts (chunking: its
        tier is "chunker"); a refusal is recorded as a usage event."""
        started = time.time()
        target = Target(model, "chunker")
        try:
            r = await self.request(record, rid)
            counted = await self.reserve(record, r, tokens, 0)
        except RateLimited as exc:
            self.refused(record, target, rid, endpoint, exc, started)
            raise
        return Call(
            record,
            target,
            target,
            r,
            endpoint=endpoint,
            started=started,
            free=True,
            tokens_counted=counted,
        )

    def headers(self, call: Call) -> dict[str, str]:
        """The headers of an admitted request's answer: its id and the key's rate limits."""
        limits = self.config.plans[call.record.plan].limits
        rates = rate_headers(limits, call.reservation, call.tokens_counted, time.time())
        return {"x-request-id": call.reservation.request_id, **rates}

    def settle(
        self,
        r: Reservation,
        tokens: int,
        nanos: int,
        extra: int = 0,
        event: UsageEvent | None = None,
    ) -> None:
        """Correct a reservation to what was used, free its lease and add the request's usage
        event: in the background (the request may be in the middle of being cancelled),
        retried until Redis answers."""
        self.later(self._settle(r, tokens, nanos, extra, event))

    async def _settle(
        self, r: Reservation, tokens: int, nanos: int, extra: int, event: UsageEvent | None
    ) -> None:
        step = functools.partial(self.limiter.settle, r, tokens, nanos, extra, event)
        if await retried(step, f"settling {r.request_id}", self._stop):
            self.inflight.pop(r.request_id, None)

    def refused(
        self,
        record: ApiKeyRecord,
        target: Target,
        rid: str,
        endpoint: str,
        exc: BaseException,
        started: float,
    ) -> None:
        """Record a request refused before it had a reservation (shed, rate limited): its
        usage event, costing nothing, in the background."""
        now = time.time()
        ev = UsageEvent(
            rid,
            record.owner,
            record.key_id,
            record.plan,
            target.model,
            target.tier,
            endpoint,
            status_of(exc),
            started,
            now,
            day_of(started),
        )
        step = functools.partial(self.limiter.events.write, ev)
        self.later(retried(step, f"recording {rid}", self._stop))

    def finish(
        self,
        call: Call,
        prompt: int,
        completion: int,
        status: str = "ok",
        cached: int = 0,
        deferred: bool = False,
    ) -> None:
        """Settle a request (and its map-reduce calls) to what was used, with its usage event,
        once. A deferred call is settled only by the finish that says so (`deferred`)."""
        if call.settled or call.deferred != deferred:
            return
        call.settled = True
        prompt, completion = call.billed(prompt, completion)
        record, target = call.record, call.target
        self.metrics.inc("finished", str(target), record.plan, status)
        price = None if call.free else self.price(call)
        calls = call.job.calls if call.job is not None else 0
        event = UsageEvent(
            call.reservation.request_id,
            record.owner,
            record.key_id,
            record.plan,
            target.model,
            target.tier,
            call.endpoint,
            status,
            call.started,
            time.time(),
            call.reservation.day or day_of(call.started),
            price,
            prompt,
            min(cached, prompt),
            completion,
            1 + calls,
        )
        # the minute's token limit counts what the tier computed: prompt tokens read from its
        # prefix cache are not counted (as Anthropic's input-token limits do not)
        tokens = max(prompt + completion, call.tokenized) - min(cached, prompt)
        self.settle(call.reservation, tokens, event.cost_nanos, calls, event)

    def later(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a coroutine to its end even if the request that started it is cancelled."""
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background step failed", exc_info=task.exception())

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Wait for pending settlements (tests, shutdown), at most timeout_s; True if none is
        left."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while self._background:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(list(self._background), timeout=left)
        return True

    async def quiesce(self, timeout_s: float) -> int:
        """Shutdown, first step: refuse new requests (503 with Retry-After) and wait, at most
        timeout_s, until the requests in flight have ended and settled; how many are left."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.inflight and loop.time() < deadline:
            await asyncio.sleep(0.1)
        await self.drain(max(0.0, deadline - loop.time()))
        return len(self.inflight)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Shutdown: settle what is pending (bounded), then stop retrying and renewing. What is
        left is returned by another gateway's sweep once its lease runs out."""
        await self.drain(timeout_s)
        self._stop.set()
        if self._keeper is not None:
            self._keeper.cancel()
        await self.revocations.close()
        await self.metrics.close()

    def start(self) -> None:
        """Start renewing leases and sweeping orphaned ones (needs a running event loop)."""
        self._keep()

    def _keep(self) -> None:
        if self._keeper is None:
            self._keeper = asyncio.ensure_future(self._keep_leases())

    async def _keep_leases(self) -> None:
        """Renew the leases of requests in flight every third of a lease; sweep orphaned ones
        about once a lease (each gateway at its own random phase)."""
        loop = asyncio.get_running_loop()
        lease_s = self.limiter.lease_ms / 1000
        next_sweep = loop.time() + random.uniform(0.1, 1.0) * lease_s
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), lease_s / 3)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await self.limiter.renew(list(self.inflight.values()))
                if loop.time() >= next_sweep:
                    if swept := await self.limiter.sweep():
                        log.warning(
                            "returned %d reservations of requests whose gateway died", swept
                        )
                    next_sweep = loop.time() + random.uniform(0.5, 1.0) * lease_s
            except RedisError as exc:
                log.warning("lease upkeep failed: %s", type(exc).__name__)

    @property
    def stopping(self) -> asyncio.Event:
        """Set when the gateway stops: background retries give up then."""
        return self._stop

    def observed(self, call: Call, end: End) -> None:
        """A finished request's latencies and tokens, per tier and plan."""
        tier, plan = str(call.target), call.record.plan
        if end.ttft_s is not None:
            self.metrics.observe("ttft", end.ttft_s, tier, plan)
        if end.tpot_s is not None:
            self.metrics.observe("tpot", end.tpot_s, tier, plan)
        self.metrics.inc("prompt_tokens", tier, plan, n=end.prompt_tokens)
        self.metrics.inc("completion_tokens", tier, plan, n=end.completion_tokens)
