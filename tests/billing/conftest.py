"""Billing on a real redis-server: usage events, the consumer, the ledger."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
import redis.asyncio as aioredis
from zerolayer.billing.consumer import Biller
from zerolayer.billing.events import EventWriter, UsageEvent
from zerolayer.config import BillingConfig, TierPrice

PRICE = TierPrice(
    prompt_per_1k=Decimal("0.10"),
    cached_prompt_per_1k=Decimal("0.05"),
    completion_per_1k=Decimal("0.30"),
)
DAY_S = 86400.0
NOV_30 = 1_764_460_800.0 + 12 * 3600  # 2025-11-30 12:00 UTC
DEC_02 = NOV_30 + 2 * DAY_S


def event(
    tenant: str,
    t: float = NOV_30,
    *,
    key_id: str = "key1",
    tier: str = "baseline",
    status: str = "ok",
    prompt: int = 100,
    completion: int = 50,
    cached: int = 0,
    price: TierPrice | None = PRICE,
    eid: str | None = None,
) -> UsageEvent:
    from zerolayer.billing.events import day_of

    return UsageEvent(
        eid or "chatcmpl-" + uuid.uuid4().hex,
        tenant,
        key_id,
        "pro",
        "smollm2-135m",
        tier,
        "chat.completions",
        status,
        t,
        t + 0.5,
        day_of(t),
        price,
        prompt,
        cached,
        completion,
    )


def tenant() -> str:
    return "tenant_" + uuid.uuid4().hex[:12]


Body = Callable[[aioredis.Redis, EventWriter], Awaitable[Any]]


@pytest.fixture
def run(redis_url: str) -> Iterator[Callable[[Body], Any]]:
    """run(fn) runs fn(client, writer) on a fresh event loop with its own client."""

    def call(fn: Body) -> Any:
        async def main() -> Any:
            client = aioredis.from_url(redis_url)
            try:
                return await fn(client, EventWriter(client, 3600))
            finally:
                await client.aclose()

        return asyncio.run(main())

    yield call


async def drain(biller: Biller, rounds: int = 200) -> None:
    """Step a consumer until the group has nothing unread or pending."""
    await biller.setup()
    for _ in range(rounds):
        await biller.step(block_ms=10)
        lag = await biller.lag()
        if not lag["unread"] and not lag["pending"]:
            return
    raise AssertionError(f"the stream did not drain: {await biller.lag()}")


def biller(client: aioredis.Redis, clock: float = NOV_30, **cfg: Any) -> Biller:
    """A consumer whose clock says `clock` (no month it counts closes unless a test says)."""
    return Biller(
        client,
        BillingConfig(**{"claim_idle_s": 0.5, **cfg}),
        name=uuid.uuid4().hex,
        clock=lambda: clock,
    )
