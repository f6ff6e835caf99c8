"""Tiers that are not ready yet (building, failed, starting), as the launcher's tier board says:
their 503s, a bare model id's way to a ready tier, and what /v1/models shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from zerolayer.config import PlanConfig
from zerolayer.store.tiers import BOARD_KEY, TierBoard, TierState

from tests.gateway.conftest import PRICE, GatewayFactory

CHEAP = {"prompt_per_1k": 0.5, "completion_per_1k": 1.0}
DEAR = {"prompt_per_1k": 2.0, "completion_per_1k": 4.0}
# default masked; dynamic costs the same and sparse24 less; baseline costs more
FALLBACK = PlanConfig(
    tiers=["masked", "baseline", "dynamic", "sparse24"],
    default_tier="masked",
    prices={"masked": PRICE, "baseline": DEAR, "dynamic": PRICE, "sparse24": CHEAP},
)


@pytest.fixture
def board(redis_url: str) -> Iterator[TierBoard]:
    """The tier board in the session's Redis, emptied after the test."""
    b = TierBoard(redis.Redis.from_url(redis_url))
    b.client.delete(BOARD_KEY)
    yield b
    b.client.delete(BOARD_KEY)
    b.client.close()


def chat(gw: Any, model: str, stream: bool = False) -> Any:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)


def test_a_building_tier_is_a_503_with_retry_after_never_another_tier(
    make_gateway: GatewayFactory, board: TierBoard
) -> None:
    gw = make_gateway(board=True)
    board.set("smollm2-135m:dynamic", TierState("building", "distillation", 0.42))
    for stream in (False, True):
        r = chat(gw, "smollm2-135m:dynamic", stream)
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "tier_building" and err["type"] == "server_error"
        assert "distillation, 42%" in err["message"]
        assert int(r.headers["retry-after"]) >= 1
    assert gw.engine.requests == 0  # nothing went to another tier
    # once ready it answers, from that tier
    board.set("smollm2-135m:dynamic", TierState("ready"))
    r = chat(gw, "smollm2-135m:dynamic")
    assert r.status_code == 200 and r.json()["model"] == "smollm2-135m:dynamic"


def test_a_failed_tier_says_why_and_a_starting_tier_asks_for_a_retry(
    make_gateway: GatewayFactory, board: TierBoard
) -> None:
    gw = make_gateway(board=True)
    board.set("smollm2-135m:sparse24", TierState("failed", reason="killed by SIGKILL"))
    r = chat(gw, "smollm2-135m:sparse24")
    assert r.status_code == 503 and r.json()["error"]["code"] == "tier_failed"
    assert "killed by SIGKILL" in r.json()["error"]["message"]
    board.set("smollm2-135m:masked", TierState("starting"))
    r = chat(gw, "smollm2-135m:masked", stream=True)
    assert r.status_code == 503 and r.json()["error"]["code"] == "tier_unavailable"
    assert "retry-after" in r.headers


def test_a_bare_id_goes_to_a_ready_tier_of_the_plan_that_costs_no_more(
    make_gateway: GatewayFactory, board: TierBoard
) -> None:
    gw = make_gateway(plans={"fallback": FALLBACK}, key_plan="fallback", board=True)
    assert chat(gw, "smollm2-135m").json()["model"] == "smollm2-135m:masked"
    board.set("smollm2-135m:masked", TierState("building", "queued"))
    # dynamic (same price) is next in the plan's order; baseline costs more and is skipped
    assert chat(gw, "smollm2-135m").json()["model"] == "smollm2-135m:dynamic"
    board.set("smollm2-135m:dynamic", TierState("failed", reason="x"))
    assert chat(gw, "smollm2-135m").json()["model"] == "smollm2-135m:sparse24"
    board.set("smollm2-135m:sparse24", TierState("building", "queued"))
    # only the dearer baseline is ready: the default's own 503
    r = chat(gw, "smollm2-135m")
    assert r.status_code == 503 and r.json()["error"]["code"] == "tier_building"
    assert "smollm2-135m:masked" in r.json()["error"]["message"]
    # what it cost is what the tier that answered costs
    board.set("smollm2-135m:sparse24", TierState("ready"))
    r = chat(gw, "smollm2-135m")
    assert r.json()["model"] == "smollm2-135m:sparse24"


def test_models_show_each_tiers_state_and_the_cards_of_ready_ones(
    make_gateway: GatewayFactory, board: TierBoard
) -> None:
    gw = make_gateway(board=True)
    board.set("smollm2-135m:dynamic", TierState("building", "2:4 search", 0.5))
    board.set("smollm2-135m:sparse24", TierState("failed", reason="out of memory"))
    data = gw.client.get("/v1/models", headers=gw.auth).json()["data"]
    tiers = {m["id"]: m for m in data if "tier" in m}
    dynamic, sparse, base = (
        tiers["smollm2-135m:dynamic"],
        tiers["smollm2-135m:sparse24"],
        tiers["smollm2-135m:baseline"],
    )
    assert dynamic["status"] == "building" and dynamic["step"] == "2:4 search"
    assert dynamic["progress"] == 0.5 and dynamic["since"] > 0 and dynamic["tier_card"] is None
    assert sparse["status"] == "failed" and sparse["reason"] == "out of memory"
    assert sparse["tier_card"] is None
    # a tier the board does not name was deployed with the application: ready, with its card
    assert base["status"] == "ready" and base["tier_card"]["tier"] == "baseline"
