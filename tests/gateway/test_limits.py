"""Per-key plan limits in Redis: requests, tokens (reserved then settled), concurrency, budget;
several gateway replicas on one real Redis."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from zerolayer.config import usd_text
from zerolayer.engines.base import SamplingSpec, TokenDelta
from zerolayer.engines.fake import FakeEngine
from zerolayer.errors import RateLimited
from zerolayer.gateway.limits import Limiter, month_of

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import assert_openai_error

CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Capital of France?"}]}


def ask(gw: Any, max_tokens: int = 16, stream: bool = False) -> Any:
    body = {**CHAT, "max_tokens": max_tokens, "stream": stream}
    return gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)


def minute_tokens(redis_url: str, gw: Any) -> int:
    client = redis.Redis.from_url(redis_url)
    minute = int(gw.clock() // 60)
    return int(client.get(f"zl:rl:{{{gw.key_id}}}:tok:{minute}") or 0)


def test_requests_per_minute_gives_429_naming_the_limit(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(plans={"tight": plan(requests_per_minute=3)}, key_plan="tight")
    assert [ask(gw).status_code for _ in range(3)] == [200, 200, 200]
    r = ask(gw)
    err = assert_openai_error(r, 429, "rate_limit_error")
    assert err["code"] == "requests_per_minute"
    assert "requests per minute" in err["message"] and "'tight'" in err["message"]
    # Retry-After: the seconds left in this calendar minute, rounded up
    left = 60 - gw.clock() % 60
    assert abs(int(r.headers["retry-after"]) - left) <= 1, (r.headers["retry-after"], left)
    metrics = gw.client.get("/metrics").text
    assert 'zerolayer_rate_limited_total{limit="requests_per_minute",plan="tight"}' in metrics


def test_tokens_are_reserved_then_settled_to_what_was_delivered(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    gw = make_gateway(plans={"tokens": plan(tokens_per_minute=100_000)}, key_plan="tokens")
    prompt = len(gw.prompts.chat(CHAT["messages"]))
    before = minute_tokens(redis_url, gw)
    r = ask(gw, max_tokens=500)
    assert r.status_code == 200
    gw.settled()
    used = minute_tokens(redis_url, gw) - before
    # reserved prompt + 500; settled to prompt + the 7 tokens the engine delivered
    assert used == prompt + len(SCRIPT), used


def test_token_limit_refuses_what_does_not_fit_and_frees_it_after_settling(
    make_gateway: GatewayFactory,
) -> None:
    gw0 = make_gateway()
    prompt = len(gw0.prompts.chat(CHAT["messages"]))
    reserve = prompt + 100
    gw = make_gateway(plans={"tokens": plan(tokens_per_minute=reserve + 20)}, key_plan="tokens")
    assert ask(gw, max_tokens=100).status_code == 200  # settles to prompt + 7
    gw.settled()
    err = assert_openai_error(ask(gw, max_tokens=100), 429, "rate_limit_error")
    assert err["code"] == "tokens_per_minute" and f"reserves {reserve}" in err["message"]
    assert ask(gw, max_tokens=5).status_code == 200  # a smaller reservation still fits


def test_concurrency_limit_frees_the_slot_when_the_request_ends(
    make_gateway: GatewayFactory,
) -> None:
    slow = FakeEngine(SCRIPT, delay_s=0.15)  # about 1 s per request
    gw = make_gateway(plans={"one": plan(concurrent_requests=1)}, key_plan="one", engine=slow)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(ask, gw)
        deadline = time.monotonic() + 5
        while slow.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        err = assert_openai_error(ask(gw), 429, "rate_limit_error")
        assert err["code"] == "concurrent_requests" and "1 of 1 in flight" in err["message"]
        assert first.result().status_code == 200
    gw.settled()
    assert ask(gw).status_code == 200


def test_monthly_budget_reserves_the_worst_case_and_settles_the_real_cost(
    make_gateway: GatewayFactory,
) -> None:
    gw0 = make_gateway()
    prompt = len(gw0.prompts.chat(CHAT["messages"]))
    # prices: 1 micro-USD per prompt token, 2 per completion token (in nano-USD)
    real = prompt * 10**6 + len(SCRIPT) * 2 * 10**6
    worst = prompt * 10**6 + 16 * 2 * 10**6
    budget_usd = Decimal(real + worst - 1).scaleb(-9)  # the first fits, the second does not
    gw = make_gateway(plans={"budget": plan(monthly_budget_usd=budget_usd)}, key_plan="budget")
    assert ask(gw, max_tokens=16).status_code == 200
    gw.settled()
    r = ask(gw, max_tokens=16)
    err = assert_openai_error(r, 429, "rate_limit_error")
    assert err["code"] == "monthly_budget"
    assert f"spent ${usd_text(real)} of ${budget_usd}" in err["message"]
    left = month_of(gw.clock())[1]
    assert abs(int(r.headers["retry-after"]) - left) < 5
    # max_tokens 1 makes the worst case small enough
    assert ask(gw, max_tokens=1).status_code == 200


def test_limits_hold_across_two_gateway_replicas(make_gateway: GatewayFactory) -> None:
    a = make_gateway(plans={"five": plan(requests_per_minute=5)}, key_plan="five")
    b = make_gateway(plans={"five": plan(requests_per_minute=5)}, key=(a.key, a.key_id))
    codes = [ask(gw).status_code for gw in (a, b) * 4]
    assert codes.count(200) == 5 and codes.count(429) == 3, codes


class GatedEngine(FakeEngine):
    """Holds every request it admits until the test opens the gate, so that every admission
    is decided while all the admitted requests are still in flight, however slow the machine."""

    def __init__(self) -> None:
        super().__init__(SCRIPT)
        self.gate = threading.Event()
        self.held = 0  # requests waiting at the gate

    async def generate(self, spec: SamplingSpec) -> AsyncIterator[TokenDelta]:
        self.held += 1
        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        async for delta in super().generate(spec):
            yield delta


def test_burst_of_50_on_two_replicas_stays_within_limit_plus_one_reservation(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    held = GatedEngine()
    gw0 = make_gateway()
    prompt = len(gw0.prompts.chat(CHAT["messages"]))
    reserve = prompt + 40
    limit = 5 * reserve + reserve // 2
    plans = {"burst": plan(tokens_per_minute=limit)}
    a = make_gateway(plans=plans, key_plan="burst", engine=held)
    b = make_gateway(plans=plans, key=(a.key, a.key_id), engine=held)
    with ThreadPoolExecutor(50) as pool:
        futures = [pool.submit(ask, (a, b)[i % 2], 40) for i in range(50)]
        deadline = time.monotonic() + 120
        # every request is either refused (answered) or held in the engine: all decided
        while sum(f.done() for f in futures) + held.held < 50:
            assert time.monotonic() < deadline, "requests neither refused nor admitted"
            time.sleep(0.02)
        held.gate.set()
        results = [f.result() for f in futures]
    codes = [r.status_code for r in results]
    admitted = codes.count(200)
    assert set(codes) <= {200, 429}, codes
    # a refusal means the minute's count was over limit - reserve (4.5 reservations), so at least
    # 5 got through; every admitted request reserved `reserve` while the others were in flight
    assert admitted >= 5, codes
    assert admitted * reserve <= limit + reserve, (admitted, reserve, limit)
    # after settlement the minute holds exactly what the admitted requests used
    a.settled()
    b.settled()
    used = minute_tokens(redis_url, a)
    assert used == admitted * (prompt + len(SCRIPT)) and used <= limit, (used, admitted)
    refused = [json.loads(r.text)["error"]["code"] for r in results if r.status_code == 429]
    assert set(refused) == {"tokens_per_minute"}


def test_chunks_count_against_the_key_and_refusals_are_counted(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(plans={"chunky": plan(requests_per_minute=1)}, key_plan="chunky")
    body = {"model": "smollm2-135m", "input": "some text"}
    assert gw.client.post("/v1/chunks", headers=gw.auth, json=body).status_code == 200
    err = assert_openai_error(gw.client.post("/v1/chunks", headers=gw.auth, json=body), 429)
    assert err["code"] == "requests_per_minute"
    metrics = gw.client.get("/metrics").text
    assert 'zerolayer_rate_limited_total{limit="requests_per_minute",plan="chunky"} 1' in metrics


def test_answers_carry_the_keys_rate_limits_in_openai_headers(
    make_gateway: GatewayFactory,
) -> None:
    limits = {"requests_per_minute": 5, "tokens_per_minute": 100_000}
    gw = make_gateway(plans={"metered": plan(**limits)}, key_plan="metered")
    prompt = len(gw.prompts.chat(CHAT["messages"]))
    first = ask(gw, max_tokens=16)
    h = first.headers
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("5", "4")
    assert h["x-ratelimit-limit-tokens"] == "100000"
    # the reservation counts: prompt + max_tokens
    assert int(h["x-ratelimit-remaining-tokens"]) == 100_000 - (prompt + 16)
    for name in ("requests", "tokens"):
        reset = h[f"x-ratelimit-reset-{name}"]
        assert reset.endswith("s") and 1 <= int(reset[:-1]) <= 60, reset
    gw.settled()  # the first settles to prompt + the 7 tokens delivered
    streamed = ask(gw, max_tokens=16, stream=True)
    assert streamed.headers["x-ratelimit-remaining-requests"] == "3"
    left = 100_000 - (prompt + len(SCRIPT)) - (prompt + 16)
    assert int(streamed.headers["x-ratelimit-remaining-tokens"]) == left
    body = {"model": "smollm2-135m", "input": "Hi", "max_output_tokens": 4}
    resp = gw.client.post("/v1/responses", headers=gw.auth, json=body)
    assert resp.status_code == 200 and resp.headers["x-ratelimit-remaining-requests"] == "2"
    chunks = {"model": "smollm2-135m", "input": "some text"}
    cut = gw.client.post("/v1/chunks", headers=gw.auth, json=chunks)
    assert cut.headers["x-ratelimit-remaining-requests"] == "1"
    # a plan without limits sends none
    free = make_gateway(plans={"open": plan()}, key_plan="open")
    assert not [k for k in ask(free).headers if k.startswith("x-ratelimit")]


# -- the limiter's own guarantees, on the real Redis --------------------------------------------


class Pinned:
    """A settable clock for the limiter (Redis's own time is used in production)."""

    def __init__(self) -> None:
        self.t = 60 * (time.time() // 60) + 10

    def __call__(self) -> float:
        return self.t


def _limiter(redis_url: str, lease_s: float = 60.0) -> tuple[Limiter, Pinned, Any]:
    clock = Pinned()
    client = aioredis.from_url(redis_url)
    return Limiter(client, lease_s, clock=clock), clock, client


def _counters(redis_url: str, key_id: str, minute: int) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url)
    p = f"zl:rl:{{{key_id}}}"
    month = month_of(minute * 60)[0]
    return {
        "req": int(client.get(f"{p}:req:{minute}") or 0),
        "tok": int(client.get(f"{p}:tok:{minute}") or 0),
        "spend": int(client.get(f"{p}:cost:{month}") or 0),
        "leases": client.zcard(f"{p}:conc"),
        "reservations": len(list(client.scan_iter(f"{p}:res:*"))),
    }


def test_every_step_is_idempotent_by_request_id(redis_url: str) -> None:
    limits = plan(requests_per_minute=10, tokens_per_minute=1000, monthly_budget_usd=1.0)

    async def run() -> list[dict[str, Any]]:
        lim, clock, client = _limiter(redis_url)
        key = "idem" + uuid.uuid4().hex[:8]
        seen = []
        r = await lim.request(key, "p", limits, "req-1")
        assert await lim.request(key, "p", limits, "req-1") == r  # a retried call takes nothing
        await lim.reserve(r, "p", limits, 100, 5000)
        await lim.reserve(r, "p", limits, 100, 5000)
        seen.append(_counters(redis_url, key, r.minute))
        assert await lim.settle(r, 30, 1200) is True
        assert await lim.settle(r, 30, 1200) is False  # a second settle changes nothing
        seen.append(_counters(redis_url, key, r.minute))
        await client.aclose()
        return seen

    reserved, settled = asyncio.run(run())
    assert reserved == {"req": 1, "tok": 100, "spend": 5000, "leases": 1, "reservations": 1}
    assert settled == {"req": 1, "tok": 30, "spend": 1200, "leases": 0, "reservations": 0}


def test_a_request_id_run_again_after_its_settlement_counts_once(redis_url: str) -> None:
    """A batch request run again under its id (its worker lost the note of the first run): the
    second settlement finds the usage event there and gives its reservation back whole, so the
    month's spend and the minute's tokens count the request once, as the invoice does."""
    from tests.billing.conftest import event

    limits = plan(tokens_per_minute=1000, monthly_budget_usd=1.0)

    async def run() -> list[dict[str, Any]]:
        lim, clock, client = _limiter(redis_url)
        key = "again" + uuid.uuid4().hex[:8]
        used = event("tenant", time.time(), key_id=key, eid="batch_x-1")
        seen = []
        for _ in range(2):  # the first run, then the same request run again
            r = await lim.request(key, "p", limits, "batch_x-1")
            await lim.reserve(r, "p", limits, 100, 5000)
            assert await lim.settle(r, 30, 1200, event=used) is True
            seen.append(_counters(redis_url, key, r.minute))
        await client.aclose()
        return seen

    first, again = asyncio.run(run())
    assert first == {"req": 0, "tok": 30, "spend": 1200, "leases": 0, "reservations": 0}
    assert again == first


def test_the_sweep_returns_what_a_dead_gateway_held_and_renewal_keeps_the_living(
    redis_url: str,
) -> None:
    limits = plan(concurrent_requests=2, tokens_per_minute=1000, monthly_budget_usd=1.0)

    async def run() -> tuple[Any, ...]:
        lim, clock, client = _limiter(redis_url, lease_s=60)
        key = "sweep" + uuid.uuid4().hex[:8]
        dead = await lim.request(key, "p", limits, "dead")
        await lim.reserve(dead, "p", limits, 100, 5000)
        alive = await lim.request(key, "p", limits, "alive")
        await lim.reserve(alive, "p", limits, 50, 2000)
        with pytest.raises(RateLimited):  # two leases held: the plan's concurrency is used
            await lim.request(key, "p", limits, "third")
        clock.t += 40
        await lim.renew([alive])  # the living gateway renews its request; the dead one cannot
        clock.t += 30  # the dead lease ran out 10 s ago, the renewed one has 30 s left
        swept = await lim.sweep()
        after = _counters(redis_url, key, dead.minute)
        third = await lim.request(key, "p", limits, "third")  # a slot is free again
        assert await lim.settle(dead, 999, 999) is False  # the sweep settled it already
        await lim.settle(alive, 60, 2500)
        await lim.settle(third, 0, 0)
        done = _counters(redis_url, key, dead.minute)
        await client.aclose()
        return swept, after, done

    swept, after, done = asyncio.run(run())
    assert swept >= 1
    assert after["leases"] == 1 and after["reservations"] == 1
    assert after["tok"] == 50 and after["spend"] == 2000  # the dead one's reservation returned
    assert done["leases"] == 0 and done["tok"] == 60 and done["spend"] == 2500


def test_cheap_limits_come_before_tokenizing(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(
        plans={"three": plan(requests_per_minute=3, tokens_per_minute=10**6)}, key_plan="three"
    )
    long = {**CHAT, "messages": [{"role": "user", "content": "word " * 5000}]}
    codes = [
        gw.client.post("/v1/chat/completions", headers=gw.auth, json=long).status_code
        for _ in range(5)
    ]
    # over the context: 400 while the minute has room, then 429 without reading the prompt
    assert codes == [400, 400, 400, 429, 429], codes
    gw.settled()
    # the prompts that were read count against the key's tokens of the minute
    assert minute_tokens_of(gw) >= 3 * 5000


def minute_tokens_of(gw: Any) -> int:
    minute = int(gw.clock() // 60)
    return int(gw.redis.get(f"zl:rl:{{{gw.key_id}}}:tok:{minute}") or 0)


def test_chunks_count_the_tokens_they_cut(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(plans={"cut": plan(tokens_per_minute=10_000)}, key_plan="cut")
    body = {"model": "smollm2-135m", "input": ["one two three " * 50, "four five " * 50]}
    r = gw.client.post("/v1/chunks", headers=gw.auth, json=body)
    assert r.status_code == 200, r.text
    gw.settled()
    assert minute_tokens_of(gw) == r.json()["usage"]["total_tokens"] > 0


def test_many_chunk_inputs_are_one_chunker_call(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    chunker = gw.app.state.pipeline.backend.chunker
    calls: list[int] = []
    original = chunker.all_spans

    def counted(*args: Any) -> Any:
        calls.append(len(args[1]))
        return original(*args)

    chunker.all_spans = counted
    try:
        body = {"model": "smollm2-135m", "input": [""] * 1000}
        t0 = time.monotonic()
        r = gw.client.post("/v1/chunks", headers=gw.auth, json=body)
        took = time.monotonic() - t0
    finally:
        del chunker.all_spans
    assert r.status_code == 200, r.text
    assert calls == [1000], calls  # one call for the whole body
    print(f"1,000 empty inputs answered in {took:.2f} s")


def test_an_admission_whose_reply_was_lost_gives_its_lease_back(redis_url: str) -> None:
    """The request script ran but its reply never came (Redis killed in between): abandon()
    frees the lease it took, and is a no-op when there was none."""
    limits = plan(concurrent_requests=1)

    async def run() -> tuple[int, int, bool, bool]:
        lim, clock, client = _limiter(redis_url)
        key = "lost" + uuid.uuid4().hex[:8]
        await lim.request(key, "p", limits, "req-1")  # as if its reply were lost
        with pytest.raises(RateLimited):  # the one slot is taken
            await lim.request(key, "p", limits, "req-2")
        before = _counters(redis_url, key, int(clock() // 60))["leases"]
        first, again = await lim.abandon(key, "req-1"), await lim.abandon(key, "req-1")
        await lim.request(key, "p", limits, "req-3")  # the slot is free again
        after = _counters(redis_url, key, int(clock() // 60))["leases"]
        await client.aclose()
        return before, after, first, again

    before, after, first, again = asyncio.run(run())
    assert (before, after) == (1, 1)  # req-1's lease gone, req-3's taken
    assert first is True and again is False


@pytest.mark.parametrize(
    "when",
    [
        "2026-12-31T23:59:59.750",
        "2027-01-01T00:00:00",
        "2028-02-28T12:00:00",
        "2028-02-29T23:59:59",
    ],
)
def test_month_of_agrees_with_datetime_at_month_ends(when: str) -> None:
    from datetime import datetime, timezone

    t = datetime.fromisoformat(when).replace(tzinfo=timezone.utc)
    nxt = datetime(t.year + (t.month == 12), t.month % 12 + 1, 1, tzinfo=timezone.utc)
    month, left = month_of(t.timestamp())
    assert month == f"{t.year:04d}-{t.month:02d}"
    assert left == pytest.approx(nxt.timestamp() - t.timestamp(), abs=1e-6)


def test_the_other_routes_have_a_per_key_limit_apart_from_model_calls(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(
        plans={"api": plan(requests_per_minute=100, api_requests_per_minute=3)}, key_plan="api"
    )
    for _ in range(5):  # model calls count against requests_per_minute only
        assert ask(gw).status_code == 200
    routes = [("GET", "/v1/keys"), ("GET", "/v1/account"), ("POST", "/v1/conversations")]
    for method, path in routes:
        r = gw.client.request(method, path, headers=gw.auth, json={} if method == "POST" else None)
        assert r.status_code == 200, (path, r.text)
    refused = gw.client.get("/v1/requests", headers=gw.auth)
    err = assert_openai_error(refused, 429, "rate_limit_error")
    assert err["code"] == "api_requests_per_minute" and "3 of 3" in err["message"]
    assert refused.headers["retry-after"] == "40"  # the pinned clock is 20 s into its minute
    assert ask(gw).status_code == 200  # model calls still go through
    # another key of its own minute is not affected
    other = make_gateway(plans={"api": plan(api_requests_per_minute=3)}, key_plan="api")
    assert other.client.get("/v1/keys", headers=other.auth).status_code == 200
