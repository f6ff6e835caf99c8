"""Prices that follow measured cost (config.pricing): `auto` prices, the fallback while a tier is
not measured, hand prices under cost refused, and what the gateway charges and lists."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from zerolayer.artifacts.cost import write_cost
from zerolayer.config import PlanConfig, PlatformConfig, TierPrice, usd_text
from zerolayer.config.pricing import Prices, auto_price, per_1m
from zerolayer.errors import ConfigError

from tests.gateway.conftest import SCRIPT, GatewayFactory
from tests.gateway.test_api import CHAT

MODEL = "smollm2-135m"
HAND = TierPrice(prompt_per_1k=Decimal("0.0002"), completion_per_1k=Decimal("0.0008"))


def _cfg(base: PlatformConfig, root: Path, **plans: PlanConfig) -> PlatformConfig:
    return base.model_copy(update={"artifacts_dir": str(root), "plans": {**base.plans, **plans}})


def _measure(root: Path, tier: str, prompt: str, completion: str, cls: str = "cpu-2") -> None:
    write_cost(
        root / MODEL,
        tier,
        {
            "hardware_class": cls,
            "cost_per_1m_tokens": {"prompt": prompt, "completion": completion},
        },
    )


def test_an_auto_price_is_cost_times_margin_rounded_up_to_a_cent() -> None:
    p = auto_price({"prompt": "0.054259", "completion": "0.210926"}, Decimal("3"))
    assert p.prompt_per_1k == Decimal("0.00017") and p.completion_per_1k == Decimal("0.00064")
    assert per_1m(p.completion_per_1k) == "0.64" and per_1m(p.prompt_per_1k) == "0.17"
    # never under cost x margin, however small
    tiny = auto_price({"prompt": "0.0001", "completion": "0.003"}, Decimal("2"))
    assert tiny.prompt_per_1k == tiny.completion_per_1k == Decimal("0.00001")
    assert p.cached == Decimal("0.000017")  # a cached read at a tenth, as every price


def test_quotes_follow_the_measured_cost_of_the_platforms_class(
    base_config: PlatformConfig, tmp_path: Path
) -> None:
    mixed = PlanConfig(
        tiers=["baseline", "masked", "dynamic"],
        default_tier="baseline",
        prices={"baseline": HAND, "masked": "auto", "dynamic": "auto"},
        margin=Decimal("2"),
    )
    cfg = _cfg(base_config, tmp_path, mixed=mixed)
    prices = Prices(cfg, ttl_s=0)
    assert prices.quote("mixed", MODEL, "baseline").basis == "hand"  # type: ignore[union-attr]
    # not measured yet: priced as the dearest tier of the plan with a known price
    q = prices.quote("mixed", MODEL, "masked")
    assert q is not None and q.basis == "unmeasured" and q.like == "baseline" and q.price == HAND
    _measure(tmp_path, "masked", "0.02", "0.15")
    q = prices.quote("mixed", MODEL, "masked")
    assert q is not None and q.basis == "auto"
    assert (q.price.prompt_per_1k, q.price.completion_per_1k) == (
        Decimal("0.00004"),
        Decimal("0.0003"),
    )
    # a measurement of another class is not this platform's cost
    _measure(tmp_path, "dynamic", "0.01", "0.05", cls="nvidia-h100")
    assert prices.quote("mixed", MODEL, "dynamic").basis == "unmeasured"  # type: ignore[union-attr]
    assert prices.quote("mixed", MODEL, "sparse24") is None  # not in the plan
    # every tier auto and none measured: nothing to sell it at
    only = PlanConfig(tiers=["dynamic"], default_tier="dynamic", prices={"dynamic": "auto"})
    assert Prices(_cfg(base_config, tmp_path, only=only)).price("only", MODEL, "dynamic") is None


def test_measured_costs_are_read_again_after_their_ttl(base_config: PlatformConfig) -> None:
    reads: list[str] = []
    cost: dict[str, Any] = {"prompt": "0.01", "completion": "0.1"}

    def costs(_cfg: Any, _model: str, tier: str) -> dict[str, Any] | None:
        reads.append(tier)
        return cost

    prices = Prices(base_config, ttl_s=3600, costs=costs)
    first = prices.cost(MODEL, "masked")
    cost = {"prompt": "0.02", "completion": "0.2"}
    assert prices.cost(MODEL, "masked") == first and reads == ["masked"]  # kept
    prices.ttl_s = 0
    assert prices.cost(MODEL, "masked") == cost and reads == ["masked", "masked"]


def test_a_hand_price_under_measured_cost_is_refused_unless_the_plan_allows_it(
    base_config: PlatformConfig, tmp_path: Path
) -> None:
    cheap = PlanConfig(tiers=["baseline"], default_tier="baseline", prices={"baseline": HAND})
    cfg = _cfg(base_config, tmp_path, cheap=cheap)
    _measure(tmp_path, "baseline", "0.1", "1.5")  # dearer than $0.80 per 1M completion
    problems = Prices(cfg).below_cost()
    assert any(
        "plan 'cheap' sells smollm2-135m:baseline completion tokens at $0.8 per 1M, under their "
        "measured cost of $1.5" in p
        for p in problems
    ), problems
    assert not any("'cheap'" in p and "prompt" in p for p in problems)  # $0.2 > $0.1
    with pytest.raises(ConfigError, match="below_cost: true"):
        Prices(cfg).refuse_below_cost()
    allowed = cheap.model_copy(update={"below_cost": True})
    assert not [p for p in Prices(_cfg(cfg, tmp_path, cheap=allowed)).below_cost() if "cheap" in p]


def test_the_shipped_plans_price_every_tier_and_the_free_one_may_sell_under_cost(
    base_config: PlatformConfig, tmp_path: Path
) -> None:
    cfg = _cfg(base_config, tmp_path)
    for tier in ("baseline", "masked", "dynamic", "sparse24"):
        _measure(tmp_path, tier, "0.05", "0.2")
    prices = Prices(cfg)
    assert prices.below_cost() == []  # free is under cost by design: it says so
    assert cfg.plans["free"].below_cost
    for name, plan in cfg.plans.items():
        for tier in plan.tiers:
            q = prices.quote(name, MODEL, tier)
            assert q is not None, (name, tier)
            if plan.prices[tier] == "auto":  # the collapsed tiers follow cost
                assert q.basis == "auto" and q.price == auto_price(
                    {"prompt": "0.05", "completion": "0.2"}, plan.margin
                )


def test_the_gateway_charges_and_lists_an_auto_price(
    make_gateway: GatewayFactory, base_config: PlatformConfig, tmp_path: Path
) -> None:
    auto = PlanConfig(tiers=["baseline"], default_tier="baseline", prices={"baseline": "auto"})
    # not measured, nothing else priced: the tier is not sold (503, nothing charged)
    gw = make_gateway(
        plans={"auto": auto}, key_plan="auto", settings={"artifacts_dir": str(tmp_path)}
    )
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    assert r.status_code == 503 and r.json()["error"]["code"] == "tier_unavailable", r.text
    assert "no price yet" in r.json()["error"]["message"]
    listed = {m["id"]: m for m in gw.client.get("/v1/models", headers=gw.auth).json()["data"]}
    assert listed[f"{MODEL}:baseline"]["pricing"] is None
    # measured: cost x margin (3 by default), listed per 1M and charged
    _measure(tmp_path, "baseline", "0.3", "1.2")
    gw = make_gateway(
        plans={"auto": auto}, key_plan="auto", settings={"artifacts_dir": str(tmp_path)}
    )
    listed = {m["id"]: m for m in gw.client.get("/v1/models", headers=gw.auth).json()["data"]}
    pricing = listed[f"{MODEL}:baseline"]["pricing"]
    assert pricing["basis"] == "auto"
    assert (pricing["prompt_per_1m"], pricing["completion_per_1m"]) == ("0.9", "3.6")
    assert pricing["completion_per_1k"] == "0.0036" and pricing["completion"] == "0.0000036"
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    assert r.status_code == 200, r.text
    gw.settled()
    price = TierPrice(prompt_per_1k=Decimal("0.0009"), completion_per_1k=Decimal("0.0036"))
    spent = gw.client.get("/v1/account", headers=gw.auth).json()["spent_usd"]
    assert spent == usd_text(price.nanos(r.json()["usage"]["prompt_tokens"], len(SCRIPT)))
