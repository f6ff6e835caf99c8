"""Per-key plan limits in Redis: requests, tokens (reserved then settled), concurrency, budget;
several gateway replicas on one real Redis."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from zerolayer.engines.fake import FakeEngine
from zerolayer.gateway.limits import month_of

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
    # prices: 1 micro-USD per prompt token, 2 per completion token
    real = prompt * 1000 + len(SCRIPT) * 2000
    worst = prompt * 1000 + 16 * 2000
    budget_usd = (real + worst - 1) / 1e6  # the first fits, the second's worst case does not
    gw = make_gateway(plans={"budget": plan(monthly_budget_usd=budget_usd)}, key_plan="budget")
    assert ask(gw, max_tokens=16).status_code == 200
    gw.settled()
    r = ask(gw, max_tokens=16)
    err = assert_openai_error(r, 429, "rate_limit_error")
    assert err["code"] == "monthly_budget"
    assert f"spent ${real / 1e6:.4f}" in err["message"]
    left = month_of(gw.clock())[1]
    assert abs(int(r.headers["retry-after"]) - left) < 5
    # max_tokens 1 makes the worst case small enough
    assert ask(gw, max_tokens=1).status_code == 200


def test_limits_hold_across_two_gateway_replicas(make_gateway: GatewayFactory) -> None:
    a = make_gateway(plans={"five": plan(requests_per_minute=5)}, key_plan="five")
    b = make_gateway(plans={"five": plan(requests_per_minute=5)}, key=(a.key, a.key_id))
    codes = [ask(gw).status_code for gw in (a, b) * 4]
    assert codes.count(200) == 5 and codes.count(429) == 3, codes


def test_burst_of_50_on_two_replicas_stays_within_limit_plus_one_reservation(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    slow = FakeEngine(SCRIPT, delay_s=0.05)
    gw0 = make_gateway()
    prompt = len(gw0.prompts.chat(CHAT["messages"]))
    reserve = prompt + 40
    limit = 5 * reserve + reserve // 2
    plans = {"burst": plan(tokens_per_minute=limit)}
    a = make_gateway(plans=plans, key_plan="burst", engine=slow)
    b = make_gateway(plans=plans, key=(a.key, a.key_id), engine=slow)
    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda i: ask((a, b)[i % 2], max_tokens=40), range(50)))
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
