"""A tenant's own keys (/v1/keys: list, relabel, revoke; another tenant's keys are invisible),
the operator's key labels, tenants list (/admin/tenants) and live operations page data
(/admin/operations: per-tier counters, queue wait and collapse alerts), over a real Redis."""

from __future__ import annotations

import time
from typing import Any

from zerolayer.gateway.operations import alerts_of
from zerolayer.store import keyspace

from tests.gateway.conftest import Gateway, GatewayFactory
from tests.gateway.test_api import CHAT, assert_openai_error


def _key(gw: Gateway, plan: str = "pro", name: str = "", tenant: str | None = None) -> dict:
    body: dict[str, Any] = {"plan": plan, "name": name}
    if tenant is not None:
        body["tenant"] = tenant
    r = gw.client.post("/admin/keys", headers=gw.admin, json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def _bearer(made: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {made['key']}"}


def test_a_tenant_lists_its_own_keys_and_no_others(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    tenant = gw.record().owner
    sibling = _key(gw, name="ci runner", tenant=tenant)
    stranger = _key(gw, name="someone else")
    r = gw.client.get("/v1/keys", headers=gw.auth)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [k["key_id"] for k in data] == [gw.key_id, sibling["key_id"]]  # oldest first
    assert [k["current"] for k in data] == [True, False]
    assert data[1]["name"] == "ci runner" and all(k["tenant"] == tenant for k in data)
    assert all("key" not in k for k in data)  # never a secret
    # the stranger sees only its own
    mine = gw.client.get("/v1/keys", headers=_bearer(stranger)).json()["data"]
    assert [k["key_id"] for k in mine] == [stranger["key_id"]]
    assert_openai_error(gw.client.get("/v1/keys"), 401, "authentication_error")


def test_relabel_own_keys_only_and_never_the_plan(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    sibling = _key(gw, name="old", tenant=gw.record().owner)
    stranger = _key(gw, name="theirs")
    r = gw.client.patch(f"/v1/keys/{sibling['key_id']}", headers=gw.auth, json={"name": "new"})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "new" and r.json()["current"] is False
    listed = gw.client.get(f"/admin/keys/{sibling['key_id']}", headers=gw.admin).json()
    assert listed["name"] == "new"
    # another tenant's key answers like an unknown one, and keeps its label
    err = assert_openai_error(
        gw.client.patch(f"/v1/keys/{stranger['key_id']}", headers=gw.auth, json={"name": "x"}),
        404,
    )
    assert err["code"] == "key_not_found"
    assert gw.client.get(f"/admin/keys/{stranger['key_id']}", headers=gw.admin).json()["name"] == (
        "theirs"
    )
    # a plan is the operator's to change: refused with the parameter named, nothing changed
    err = assert_openai_error(
        gw.client.patch(
            f"/v1/keys/{gw.key_id}", headers=gw.auth, json={"name": "a", "plan": "enterprise"}
        ),
        400,
    )
    assert err["param"] == "plan"
    assert gw.record().plan == "pro" and gw.record().name != "a"
    err = assert_openai_error(
        gw.client.patch(f"/v1/keys/{gw.key_id}", headers=gw.auth, json={"name": "x" * 201}), 400
    )
    assert err["param"] == "name"
    assert_openai_error(gw.client.patch(f"/v1/keys/{gw.key_id}", headers=gw.auth, json={}), 400)


def test_revoke_a_sibling_key_refuses_it_at_once(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    sibling = _key(gw, tenant=gw.record().owner)
    stranger = _key(gw)
    ok = gw.client.post("/v1/chat/completions", headers=_bearer(sibling), json=CHAT)
    assert ok.status_code == 200
    r = gw.client.delete(f"/v1/keys/{sibling['key_id']}", headers=gw.auth)
    assert r.status_code == 200, r.text
    assert r.json()["revoked"] is True and r.json()["traffic_deleted"] == 0
    assert_openai_error(
        gw.client.post("/v1/chat/completions", headers=_bearer(sibling), json=CHAT), 401
    )
    listed = gw.client.get("/v1/keys", headers=gw.auth).json()["data"]
    assert [k["revoked"] for k in listed] == [False, True]
    # another tenant's key cannot be revoked from here, and still works
    err = assert_openai_error(
        gw.client.delete(f"/v1/keys/{stranger['key_id']}", headers=gw.auth), 404
    )
    assert err["code"] == "key_not_found"
    r = gw.client.post("/v1/chat/completions", headers=_bearer(stranger), json=CHAT)
    assert r.status_code == 200
    assert_openai_error(gw.client.delete("/v1/keys/000000000000", headers=gw.auth), 404)


def test_the_operator_labels_keys_and_lists_tenants(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    tenant = gw.record().owner
    second = _key(gw, plan="free", tenant=tenant)
    r = gw.client.patch(f"/admin/keys/{second['key_id']}", headers=gw.admin, json={"name": "ci"})
    assert r.status_code == 200 and r.json()["name"] == "ci" and r.json()["plan"] == "free"
    assert gw.client.delete(f"/admin/keys/{second['key_id']}", headers=gw.admin).status_code == 200
    assert gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT).status_code == 200
    gw.billed()
    invoice = gw.client.get(
        f"/admin/tenants/{tenant}/invoices/{time.strftime('%Y-%m', time.gmtime())}",
        headers=gw.admin,
    ).json()
    r = gw.client.get("/admin/tenants", headers=gw.admin)
    assert r.status_code == 200, r.text
    row = next(t for t in r.json()["data"] if t["tenant"] == tenant)
    assert row["keys"] == 2 and row["active_keys"] == 1
    assert row["plans"] == ["pro"]  # the revoked key's plan is not counted
    assert row["month_total_usd"] == invoice["total_usd"]  # rounded to cents, as billed
    assert invoice["subtotal_nanos"] > 0
    assert_openai_error(gw.client.get("/admin/tenants", headers=gw.auth), 401)


def test_operations_counts_requests_per_tier_and_lists_alerts(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(live=True)
    tier = "smollm2-135m:baseline"

    def ops() -> dict[str, Any]:
        r = gw.client.get("/admin/operations", headers=gw.admin)
        assert r.status_code == 200, r.text
        return dict(r.json())

    before = {t["tier"]: t for t in ops()["tiers"]}
    assert tier in before and before[tier]["state"] == "ready"
    for _ in range(3):
        body = {**CHAT, "model": tier}
        assert gw.client.post("/v1/chat/completions", headers=gw.auth, json=body).status_code == 200
    gw.settled()
    after = {t["tier"]: t for t in ops()["tiers"]}
    row = after[tier]
    assert row["requests"] - before[tier]["requests"] == 3
    assert row["finished"]["ok"] - before[tier]["finished"].get("ok", 0) == 3
    assert row["ttft_s"] is not None and row["ttft_s"] >= 0
    assert row["queue_wait_s"] >= 0 and row["completion_tokens"] > 0
    # a canary result over its limit becomes an alert of that tier
    key = keyspace.canary(tier)
    gw.redis.hset(key, mapping={"kl": "0.9", "limit": "0.05", "at": time.time(), "positions": 8})
    try:
        got = ops()
    finally:
        gw.redis.delete(key)
    mine = [a for a in got["alerts"] if a["tier"] == tier]
    assert [a["signal"] for a in mine] == ["canary_kl"]
    assert mine[0]["value"] == 0.9 and "0.05" in mine[0]["message"]
    assert next(t for t in got["tiers"] if t["tier"] == tier)["alerts"] == 1
    assert_openai_error(gw.client.get("/admin/operations", headers=gw.auth), 401)


def test_alerts_name_each_signal_over_its_limit() -> None:
    calm = {"drift_flag": False, "drift_max_points": 1.0, "skip_flag": False}
    assert alerts_of("m:t", calm, 3.0) == []
    loud = {
        "drift_flag": True,
        "drift_max_points": 30.0,
        "skip_flag": True,
        "skip_rate": 0.8,
        "skip_band": [0.4, 0.5],
        "canary": {"kl": 0.01, "limit": 0.05, "flag": False},
    }
    got = alerts_of("m:t", loud, 3.0)
    assert [a["signal"] for a in got] == ["activation_drift", "skip_rate"]
    assert got[0]["value"] == 30.0 and got[0]["limit"] == 3.0
    assert "80.0%" in got[1]["message"] and "40.0%-50.0%" in got[1]["message"]
