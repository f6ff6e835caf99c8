"""The admin API: keys created, listed, re-planned and revoked over HTTP, guarded by the admin
key; a revoked key is refused at once by every gateway replica."""

from __future__ import annotations

from tests.gateway.conftest import GatewayFactory
from tests.gateway.test_api import CHAT, assert_openai_error


def test_create_list_get_change_plan_and_revoke(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    r = gw.client.post("/admin/keys", headers=gw.admin, json={"plan": "free", "name": "ci"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["key"].startswith("zl-") and made["plan"] == "free" and not made["revoked"]
    kid, key = made["key_id"], made["key"]
    listed = gw.client.get("/admin/keys", headers=gw.admin).json()["data"]
    assert any(k["key_id"] == kid and k["name"] == "ci" for k in listed)
    assert all("key" not in k for k in listed)  # never the secret
    assert gw.client.get(f"/admin/keys/{kid}", headers=gw.admin).json()["plan"] == "free"

    user = {"Authorization": f"Bearer {key}"}
    baseline = {**CHAT, "model": "smollm2-135m:baseline"}
    assert gw.client.post("/v1/chat/completions", headers=user, json=baseline).status_code == 403
    r = gw.client.patch(f"/admin/keys/{kid}", headers=gw.admin, json={"plan": "pro"})
    assert r.status_code == 200 and r.json()["plan"] == "pro"
    assert gw.client.post("/v1/chat/completions", headers=user, json=baseline).status_code == 200

    r = gw.client.delete(f"/admin/keys/{kid}", headers=gw.admin)
    assert r.status_code == 200 and r.json()["revoked"] is True
    assert_openai_error(
        gw.client.post("/v1/chat/completions", headers=user, json=CHAT), 401, "authentication_error"
    )


def test_revoked_key_is_refused_at_once_on_another_replica(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    b = make_gateway(key=(a.key, a.key_id))
    assert b.client.post("/v1/chat/completions", headers=b.auth, json=CHAT).status_code == 200
    assert a.client.delete(f"/admin/keys/{a.key_id}", headers=a.admin).status_code == 200
    r = b.client.post("/v1/chat/completions", headers=b.auth, json=CHAT)
    assert_openai_error(r, 401, "authentication_error")


def test_admin_errors(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    err = assert_openai_error(gw.client.get("/admin/keys", headers=gw.auth), 401)
    assert err["code"] == "invalid_admin_key"  # a customer key is not an admin key
    assert_openai_error(gw.client.get("/admin/keys"), 401)
    err = assert_openai_error(
        gw.client.post("/admin/keys", headers=gw.admin, json={"plan": "gold"}), 400
    )
    assert err["param"] == "plan" and "free" in err["message"]
    err = assert_openai_error(gw.client.delete("/admin/keys/000000000000", headers=gw.admin), 404)
    assert err["code"] == "key_not_found"
    assert_openai_error(gw.client.post("/admin/keys", headers=gw.admin, content=b"{"), 400)


def test_admin_api_is_closed_without_an_admin_key(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(gateway={"admin_key_sha256": None})
    err = assert_openai_error(gw.client.get("/admin/keys", headers=gw.admin), 403)
    assert err["code"] == "admin_disabled"
