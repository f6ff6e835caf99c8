"""GET /v1/account (a key's own record, plan and month's spend) and GET /admin/account."""

from __future__ import annotations

from decimal import Decimal

from zerolayer.config import PlatformConfig, TierPrice, usd_text
from zerolayer.gateway.limits import month_of

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import assert_openai_error

CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Capital of France?"}]}


def test_a_key_sees_its_plan_and_spend_against_its_budget(make_gateway: GatewayFactory) -> None:
    limits = plan(requests_per_minute=50, monthly_budget_usd=Decimal("5"))
    gw = make_gateway(plans={"budget": limits}, key_plan="budget")
    first = gw.client.get("/v1/account", headers=gw.auth).json()
    assert first["object"] == "account" and first["month"] == month_of(gw.clock())[0]
    assert first["key"]["key_id"] == gw.key_id and first["key"]["plan"] == "budget"
    assert "key" not in first["key"] and gw.key not in str(first)  # never the secret
    assert first["plan"]["limits"] == {
        "requests_per_minute": 50,
        "tokens_per_minute": None,
        "concurrent_requests": None,
        "monthly_budget_usd": "5",
        "api_requests_per_minute": None,
        "stored_bytes": None,
        "stored_objects": None,
    }
    assert first["spent_usd"] == "0.00" and first["remaining_usd"] == first["budget_usd"]

    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    assert r.status_code == 200, r.text
    gw.settled()
    # the fixture plan's prices: 1 micro-USD per prompt token, 2 per completion token
    cost = r.json()["usage"]["prompt_tokens"] * 10**6 + len(SCRIPT) * 2 * 10**6
    after = gw.client.get("/v1/account", headers=gw.auth).json()
    assert after["spent_usd"] == usd_text(cost)
    assert after["remaining_usd"] == usd_text(5 * 10**9 - cost)


def test_a_plan_without_budget_has_none_and_its_prices_are_listed(
    make_gateway: GatewayFactory, base_config: PlatformConfig
) -> None:
    gw = make_gateway(plans={"open": plan(concurrent_requests=3)}, key_plan="open")
    body = gw.client.get("/v1/account", headers=gw.auth).json()
    assert body["budget_usd"] is None and body["remaining_usd"] is None
    assert body["plan"]["limits"]["concurrent_requests"] == 3
    gw = make_gateway(key_plan="free")
    body = gw.client.get("/v1/account", headers=gw.auth).json()
    p = base_config.plans["free"]
    assert body["plan"]["tiers"] == p.tiers and body["plan"]["default_tier"] == p.default_tier
    listed = body["plan"]["prices"]
    assert set(listed) == set(p.tiers)
    for t in p.tiers:  # hand prices: per 1K as the plan states them, per 1M as people read them
        price = p.prices[t]
        assert isinstance(price, TierPrice)
        assert {k: listed[t][k] for k in price.applied()} == price.applied()
        assert Decimal(listed[t]["completion_per_1m"]) == price.completion_per_1k * 1000
        assert Decimal(listed[t]["prompt_per_1m"]) == price.prompt_per_1k * 1000
        assert listed[t]["basis"] == "hand"


def test_wrong_keys_are_refused_and_only_the_admin_key_opens_admin_account(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    wrong = {"Authorization": "Bearer zl-not-a-key"}
    assert_openai_error(gw.client.get("/v1/account", headers=wrong), 401)
    assert_openai_error(gw.client.get("/v1/account", headers=gw.admin), 401)
    assert_openai_error(gw.client.get("/admin/account", headers=gw.auth), 401)
    admin = gw.client.get("/admin/account", headers=gw.admin)
    assert admin.status_code == 200 and admin.json()["admin"] is True
