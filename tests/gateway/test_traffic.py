"""Traffic sampling for recalibration: only keys that opted in (themselves, or through their
plan) have prompts kept; opting out and revocation delete what was kept; the admin API and its
errors. A real redis-server behind the gateway."""

from __future__ import annotations

import json
import uuid

from zerolayer.config import PlanConfig

from tests.gateway.conftest import PRICE, GatewayFactory
from tests.gateway.test_api import CHAT, assert_openai_error

EVERY = {"rate": 1.0}  # keep every request of an opted-in key


def _chat(text: str) -> dict[str, object]:
    return {**CHAT, "messages": [{"role": "user", "content": text}]}


def _kept(gw, key_id: str) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    gw.settled()  # a sample is written in the background, like settlement
    r = gw.client.get(f"/admin/keys/{key_id}/traffic", headers=gw.admin)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def test_opted_out_keys_prompts_are_never_stored(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(traffic=EVERY)  # a pro key: the plan keeps nothing, the key says nothing
    secret = f"never-store-{uuid.uuid4().hex}"
    for _ in range(3):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=_chat(secret))
        assert r.status_code == 200, r.text
    assert _kept(gw, gw.key_id) == []
    # nowhere in Redis: no stream of the key, and no kept prompt holds the text
    assert not gw.redis.exists(f"zl:traffic:{gw.key_id}")
    for name in gw.redis.scan_iter("zl:traffic:*"):
        if gw.redis.type(name) == b"stream":
            assert all(secret.encode() not in f[b"text"] for _, f in gw.redis.xrange(name))
    # a key opted out explicitly on a plan that samples: still nothing
    sampled = PlanConfig(
        tiers=["baseline"],
        default_tier="baseline",
        prices={"baseline": PRICE},
        sample_traffic=True,
    )
    gw2 = make_gateway(plans={"sampled": sampled}, key_plan="sampled", traffic=EVERY)
    r = gw2.client.patch(
        f"/admin/keys/{gw2.key_id}", headers=gw2.admin, json={"sample_traffic": False}
    )
    assert r.status_code == 200 and r.json()["sample_traffic"] is False
    assert gw2.client.post("/v1/chat/completions", headers=gw2.auth, json=_chat(secret))
    assert _kept(gw2, gw2.key_id) == []


def test_opt_in_keeps_prompts_and_opt_out_deletes_them(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(traffic={**EVERY, "max_chars": 100})
    r = gw.client.patch(f"/admin/keys/{gw.key_id}", headers=gw.admin, json={"sample_traffic": True})
    assert r.status_code == 200 and r.json()["sample_traffic"] is True
    assert r.json()["plan"] == "pro"  # the plan is left as it was
    gw.client.post("/v1/chat/completions", headers=gw.auth, json=_chat("Where is Lyon?"))
    long = "word " * 100
    comp = {"model": "smollm2-135m", "prompt": long, "max_tokens": 2}
    assert gw.client.post("/v1/completions", headers=gw.auth, json=comp).status_code == 200
    kept = _kept(gw, gw.key_id)
    assert [e["kind"] for e in kept] == ["chat", "text"]
    assert json.loads(kept[0]["text"]) == [{"role": "user", "content": "Where is Lyon?"}]
    assert kept[0]["model"] == "smollm2-135m" and kept[0]["tier"] == "baseline"
    assert kept[1]["text"] == long[:100]  # cut to max_chars

    r = gw.client.patch(
        f"/admin/keys/{gw.key_id}", headers=gw.admin, json={"sample_traffic": False}
    )
    assert r.status_code == 200 and r.json()["traffic_deleted"] == 2
    assert _kept(gw, gw.key_id) == []
    gw.client.post("/v1/chat/completions", headers=gw.auth, json=_chat("Where is Nice?"))
    assert _kept(gw, gw.key_id) == []


def test_plan_opt_in_rate_and_deletion_with_the_key(make_gateway: GatewayFactory) -> None:
    sampled = PlanConfig(
        tiers=["baseline"],
        default_tier="baseline",
        prices={"baseline": PRICE},
        sample_traffic=True,
    )
    gw = make_gateway(plans={"sampled": sampled}, key_plan="sampled", traffic={"rate": 0.5})
    n = 40
    for i in range(n):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=_chat(f"q{i}"))
        assert r.status_code == 200
    kept = _kept(gw, gw.key_id)
    assert 5 <= len(kept) <= 35, len(kept)  # about half (binomial, n=40: p < 1e-5 outside)
    other = make_gateway(key_plan="pro", traffic=EVERY)  # another key, not opted in
    other.client.post("/v1/chat/completions", headers=other.auth, json=_chat("mine"))
    assert _kept(other, other.key_id) == []

    r = gw.client.delete(f"/admin/keys/{gw.key_id}", headers=gw.admin)
    assert r.status_code == 200 and r.json()["traffic_deleted"] == len(kept)
    assert _kept(gw, gw.key_id) == []


def test_traffic_admin_errors(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    err = assert_openai_error(
        gw.client.get("/admin/keys/000000000000/traffic", headers=gw.admin), 404
    )
    assert err["code"] == "key_not_found"
    assert_openai_error(gw.client.delete(f"/admin/keys/{gw.key_id}/traffic", headers=gw.auth), 401)
    r = gw.client.patch(f"/admin/keys/{gw.key_id}", headers=gw.admin, json={})
    assert_openai_error(r, 400)
    r = gw.client.patch(f"/admin/keys/{gw.key_id}", headers=gw.admin, json={"sample_traffic": 3})
    assert_openai_error(r, 400)
    r = gw.client.delete(f"/admin/keys/{gw.key_id}/traffic", headers=gw.admin)
    assert r.status_code == 200 and r.json() == {"key_id": gw.key_id, "deleted": 0}
