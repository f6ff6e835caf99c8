"""Metering through the gateway app on a real redis-server: one usage event per request, billed
as delivered, counted once into usage and invoices that agree with the budget to the cent."""

from __future__ import annotations

import csv
import io
import json
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest
from zerolayer.config import usd_text
from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import CHAT, assert_openai_error, sse_events
from tests.gateway.test_faults import _BrokenBackend, _leave_after
from tests.gateway.test_limits import minute_tokens_of


def _usage(gw: Any, **params: str) -> dict[str, Any]:
    r = gw.client.get("/v1/usage", headers=gw.auth, params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _spend(gw: Any) -> int:
    month = time.strftime("%Y-%m", time.gmtime())
    return int(gw.redis.get(f"zl:rl:{{{gw.key_id}}}:cost:{month}") or 0)


def test_streamed_and_whole_replies_are_billed_the_same(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    whole = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    streamed = gw.client.post(
        "/v1/chat/completions", headers=gw.auth, json={**CHAT, "stream": True}
    )
    assert whole.status_code == streamed.status_code == 200
    gw.billed()
    a = gw.event(whole.headers["x-request-id"])["data"]
    b = gw.event(streamed.headers["x-request-id"])["data"]
    keys = ("prompt_tokens", "completion_tokens", "cost_usd", "cost_nanos", "status", "tier")
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert a["completion_tokens"] == len(SCRIPT) and a["status"] == "ok"
    assert a["prompt_tokens"] == whole.json()["usage"]["prompt_tokens"]
    assert b["endpoint"] == "chat.completions" and a["key_id"] == gw.key_id
    # a completion and a chunking call are metered too, the chunks at no cost
    text = gw.client.post(
        "/v1/completions", headers=gw.auth, json={"model": "smollm2-135m", "prompt": "Hi"}
    )
    chunks = gw.client.post(
        "/v1/chunks", headers=gw.auth, json={"model": "smollm2-135m", "input": "some text"}
    )
    assert text.status_code == chunks.status_code == 200
    gw.billed()
    usage = _usage(gw, group_by="tier")
    by_tier = {row["tier"]: row for row in usage["data"]}
    assert by_tier["baseline"]["requests"] == 3
    assert by_tier["chunker"]["requests"] == 1 and by_tier["chunker"]["cost_usd"] == "0.00"
    assert by_tier["chunker"]["prompt_tokens"] == chunks.json()["usage"]["prompt_tokens"]


def test_a_client_gone_mid_stream_is_billed_what_it_was_sent(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.05))
    body = json.dumps({**CHAT, "stream": True, "max_tokens": 7}).encode()
    got = _leave_after(gw, body, 4)  # the start, the role frame and two tokens, then gone
    assert len(got) == 4
    gw.billed()
    month = time.strftime("%Y-%m", time.gmtime())
    events = [
        json.loads(e)
        for e in gw.redis.lrange(f"zl:bill:{{{gw.record().owner}}}:events:{month}", 0, -1)
    ]
    assert len(events) == 1
    data = events[0]["data"]
    assert data["status"] == "client_disconnect" and data["completion_tokens"] == 2
    assert int(data["cost_nanos"]) == _spend(gw)  # the budget and the ledger agree


def test_an_engine_failing_mid_stream_bills_what_was_delivered(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    pipeline = gw.app.state.pipeline
    pipeline.backend = _BrokenBackend(pipeline.backend)
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "stream": True})
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "engine_error"
    plain = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    assert plain.status_code == 503
    gw.billed()
    streamed = gw.event(r.headers["x-request-id"])["data"]
    assert streamed["status"] == "engine_error" and streamed["completion_tokens"] == 1
    whole = gw.event(plain.headers["x-request-id"])["data"]
    # a whole reply that failed delivered nothing: it costs nothing
    assert whole["status"] == "engine_error" and whole["cost_nanos"] == 0
    assert streamed["cost_nanos"] == _spend(gw)


def test_refused_requests_are_recorded_and_cost_nothing(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(plans={"two": plan(requests_per_minute=2)}, key_plan="two")
    codes = [
        gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    long = {**CHAT, "max_tokens": 100_000}  # over the context: refused after tokenizing
    gw2 = make_gateway(key=(gw.key, gw.key_id), plans={"two": plan(requests_per_minute=10)})
    assert gw2.client.post("/v1/chat/completions", headers=gw.auth, json=long).status_code in (
        400,
        429,
    )
    gw.billed()
    totals = _usage(gw)["totals"]
    assert totals["statuses"]["ok"] == 2 and totals["statuses"]["rate_limited"] >= 1
    assert totals["requests"] == sum(totals["statuses"].values())
    assert Decimal(totals["cost_usd"]) * 10**9 == _spend(gw)


def test_fifty_concurrent_requests_on_a_budget_for_ten(make_gateway: GatewayFactory) -> None:
    probe = make_gateway()
    prompt = len(probe.prompts.chat(CHAT["messages"]))
    price = plan().prices["baseline"]
    reservation = price.nanos(prompt, 16)  # max_tokens 16: each request's worst case
    budget = Decimal(10 * reservation).scaleb(-9)
    gw = make_gateway(
        plans={"ten": plan(monthly_budget_usd=budget)},
        key_plan="ten",
        engine=FakeEngine(SCRIPT, delay_s=0.01),
    )
    body = {**CHAT, "max_tokens": 16}
    with ThreadPoolExecutor(50) as pool:
        replies = list(
            pool.map(
                lambda _: gw.client.post("/v1/chat/completions", headers=gw.auth, json=body),
                range(50),
            )
        )
    codes = [r.status_code for r in replies]
    assert set(codes) <= {200, 429} and codes.count(200) >= 10, codes
    for r in replies:
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "monthly_budget"
    gw.billed()
    spend = _spend(gw)
    assert spend <= int(budget * 10**9) + reservation
    admitted = [
        gw.event(r.headers["x-request-id"])["data"] for r in replies if r.status_code == 200
    ]
    month = time.strftime("%Y-%m", time.gmtime())
    inv = gw.client.get(f"/v1/invoices/{month}", headers=gw.auth).json()
    assert inv["subtotal_nanos"] == sum(int(e["cost_nanos"]) for e in admitted) == spend
    assert inv["total_usd"] == str(Decimal(spend).scaleb(-9).quantize(Decimal("0.01")))


def test_usage_invoices_and_exports_are_the_callers_own(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    b = make_gateway()  # another tenant on the same Redis
    for _ in range(2):
        assert a.client.post("/v1/chat/completions", headers=a.auth, json=CHAT).status_code == 200
    assert b.client.post("/v1/chat/completions", headers=b.auth, json=CHAT).status_code == 200
    a.billed()
    month = time.strftime("%Y-%m", time.gmtime())
    mine = _usage(a, group_by="key,model")
    assert [(r["key"], r["model"]) for r in mine["data"]] == [(a.key_id, "smollm2-135m")]
    assert mine["data"][0]["requests"] == 2 and _usage(b)["totals"]["requests"] == 1
    listing = a.client.get("/v1/invoices", headers=a.auth).json()["data"]
    assert [(i["month"], i["status"]) for i in listing] == [(month, "open")]
    inv = a.client.get(f"/v1/invoices/{month}", headers=a.auth).json()
    assert inv["lines"][0]["requests"] == 2 and inv["lines"][0]["prices"]["prompt_per_1k"]
    assert inv["subtotal_usd"] == usd_text(_spend(a))
    as_csv = a.client.get(f"/v1/invoices/{month}", headers=a.auth, params={"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert rows[0]["tier"] == "baseline" and rows[-1]["amount_usd"] == inv["total_usd"]
    lines = a.client.get(f"/v1/invoices/{month}/events", headers=a.auth).text.splitlines()
    assert len(lines) == 2 and {json.loads(x)["data"]["key_id"] for x in lines} == {a.key_id}
    table = a.client.get(
        f"/v1/invoices/{month}/events", headers=a.auth, params={"format": "csv"}
    ).text
    assert len(list(csv.DictReader(io.StringIO(table)))) == 2
    # the admin sees any tenant's; bad input is a 4xx in the OpenAI format
    tenant = a.record().owner
    admin = a.client.get(f"/admin/tenants/{tenant}/usage", headers=a.admin).json()
    assert admin["totals"]["requests"] == 2
    assert tenant in a.client.get("/admin/billing", headers=a.admin).json()["tenants"]
    missing = a.client.get("/admin/tenants/nobody/usage", headers=a.admin)
    assert_openai_error(missing, 404, "invalid_request_error")
    assert_openai_error(a.client.get("/admin/tenants/x/usage", headers=a.auth), 401)
    for params in (
        {"start": "yesterday"},
        {"group_by": "colour"},
        {"start": "2026-02-01", "end": "2026-01-01"},
    ):
        assert_openai_error(a.client.get("/v1/usage", headers=a.auth, params=params), 400)
    assert_openai_error(a.client.get("/v1/invoices/2026-13", headers=a.auth), 400)
    assert_openai_error(a.client.get("/v1/invoices/1999-01", headers=a.auth), 404)
    assert_openai_error(
        a.client.get(f"/v1/invoices/{month}", headers=a.auth, params={"format": "pdf"}), 400
    )
    assert_openai_error(a.client.get("/v1/usage"), 401)


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
def test_a_client_gone_from_a_whole_answer_stops_the_engine_and_is_billed_what_ran(
    make_gateway: GatewayFactory, path: str
) -> None:
    script = [f" w{i}" for i in range(100)]
    gw = make_gateway(engine=FakeEngine(script, delay_s=0.05))  # 5 s for the whole answer
    if path == "/responses":
        body: dict[str, Any] = {"model": "smollm2-135m", "input": "Hi", "max_output_tokens": 100}
    else:
        body = {**CHAT, "max_tokens": 100}
    left = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(gw.http() + path, headers=gw.auth, json=body, timeout=1.0)
    deadline = time.monotonic() + 10
    while not gw.engine.aborted:  # the engine stops well before its 5 s
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert time.monotonic() - left < 3.5
    rid = gw.engine.aborted[-1]
    gw.billed()
    data = gw.event(rid)["data"]
    # billed what ran: the prompt and the tokens generated until it stopped (about 20)
    assert data["status"] == "client_disconnect" and data["prompt_tokens"] > 0
    assert 5 <= data["completion_tokens"] < 60, data
    assert int(data["cost_nanos"]) > 0


def test_prefix_cache_hits_are_reported_and_billed_at_the_cached_price(
    make_gateway: GatewayFactory,
) -> None:
    """...and the key's tokens of the minute count only the prompt tokens the tier computed."""
    gw = make_gateway(
        engine=FakeEngine(SCRIPT, cached=5),
        plans={"tokens": plan(tokens_per_minute=100_000)},
        key_plan="tokens",
    )
    whole = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    streamed = gw.client.post(
        "/v1/chat/completions",
        headers=gw.auth,
        json={**CHAT, "stream": True, "stream_options": {"include_usage": True}},
    )
    resp = gw.client.post(
        "/v1/responses", headers=gw.auth, json={"model": CHAT["model"], "input": "Hi"}
    )
    assert whole.status_code == streamed.status_code == resp.status_code == 200
    shown = [
        whole.json()["usage"],
        sse_events(streamed.text)[-2]["usage"],  # the usage chunk, before [DONE]
    ]
    for usage in shown:
        assert usage["prompt_tokens_details"] == {"cached_tokens": 5}
    assert resp.json()["usage"]["input_tokens_details"]["cached_tokens"] == 5
    gw.billed()
    for r in (whole, streamed):
        data = gw.event(r.headers["x-request-id"])["data"]
        assert data["cached_prompt_tokens"] == 5
        price = gw.app.state.parts.config.plans[data["plan"]].prices[data["tier"]]
        assert price.cached < price.prompt_per_1k  # the plan's cached price is lower
        assert data["cost_nanos"] == price.nanos(data["prompt_tokens"], len(SCRIPT), 5)
        assert data["cost_nanos"] < price.nanos(data["prompt_tokens"], len(SCRIPT))
    counted = 0
    for r in (whole, streamed, resp):
        data = gw.event(r.headers["x-request-id"])["data"]
        counted += data["prompt_tokens"] - 5 + data["completion_tokens"]
    assert minute_tokens_of(gw) == counted
