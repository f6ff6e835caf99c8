"""The reply bodies the customer-facing routes declare (zerolayer.gateway.replies) are what they
send: each route's real reply validates against the model its OpenAPI document names for 200,
and every such route (OpenAI's, and zerolayer's own chunks, account, keys, usage, request log
and invoices) names one."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError, create_model
from zerolayer.gateway.replies import ChatCompletion

from tests.gateway.conftest import Gateway

MODEL = "smollm2-135m"
# routes that answer no JSON object: health, Prometheus text, the console's files, the events
# export (a JSON-lines or CSV file), a file's content
NOT_JSON = ("/healthz", "/metrics", "/console", "/openapi.json", "/events", "/content")


def declared(gateway: Gateway, method: str, path: str) -> type[BaseModel]:
    """The model a route declares for its success."""
    for route in gateway.app.routes:
        if isinstance(route, APIRoute) and route.path == path and method in route.methods:
            model: type[BaseModel] = route.responses[route.status_code or 200]["model"]
            return model
    raise AssertionError(f"no route {method} {path}")


def undeclared(routes: list[Any]) -> list[str]:
    """The routes answering JSON that declare no reply model for their success."""
    out = []
    for route in routes:
        if not isinstance(route, APIRoute) or any(m in route.path for m in NOT_JSON):
            continue
        if "model" not in route.responses.get(route.status_code or 200, {}):
            out += [f"{m} {route.path}" for m in sorted(route.methods)]
    return out


def check(
    gateway: Gateway,
    method: str,
    path: str,
    route: str | None = None,
    admin: bool = False,
    **kw: Any,
) -> Any:
    """Call a route; its success validated against the model it declares."""
    headers = gateway.admin if admin else gateway.auth
    r = gateway.client.request(method, path, headers=headers, **kw)
    assert r.status_code in (200, 201), r.text
    declared(gateway, method, route or path).model_validate(r.json())
    return r.json()


def test_every_json_route_declares_its_reply(gateway: Gateway) -> None:
    assert undeclared(gateway.app.routes) == []
    doc = gateway.app.openapi()["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]
    assert doc["content"]["application/json"]["schema"]["$ref"].endswith("/ChatCompletion")

    async def planted() -> dict[str, bool]:
        return {"open": True}

    gateway.app.add_api_route("/v1/planted", planted, methods=["GET"])
    assert undeclared(gateway.app.routes) == ["GET /v1/planted"]


def test_completions_and_models_reply_as_declared(gateway: Gateway) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    check(gateway, "POST", "/v1/chat/completions", json=chat)
    check(gateway, "POST", "/v1/completions", json={"model": MODEL, "prompt": "Hi"})
    listed = check(gateway, "GET", "/v1/models")
    assert any(m["id"] == f"{MODEL}:baseline" for m in listed["data"])


def test_responses_and_conversations_reply_as_declared(gateway: Gateway) -> None:
    conv = check(gateway, "POST", "/v1/conversations", json={"metadata": {"a": "b"}})
    cid = f"/v1/conversations/{conv['id']}"
    c = "/v1/conversations/{conversation_id}"
    check(gateway, "GET", cid, c)
    check(gateway, "POST", cid, c, json={"metadata": {"a": "c"}})
    added = check(
        gateway,
        "POST",
        cid + "/items",
        c + "/items",
        json={"items": [{"role": "user", "content": "Hi"}]},
    )
    item = added["data"][0]["id"]
    check(gateway, "GET", cid + "/items", c + "/items")
    check(gateway, "GET", f"{cid}/items/{item}", c + "/items/{item_id}")
    body = {"model": MODEL, "input": "Hello", "conversation": conv["id"], "max_output_tokens": 3}
    resp = check(gateway, "POST", "/v1/responses", json=body)
    rid, r = f"/v1/responses/{resp['id']}", "/v1/responses/{response_id}"
    check(gateway, "GET", rid, r)
    check(gateway, "GET", rid + "/input_items", r + "/input_items")
    check(gateway, "DELETE", rid, r)
    check(gateway, "DELETE", f"{cid}/items/{item}", c + "/items/{item_id}")
    check(gateway, "DELETE", cid, c)


def test_a_declared_field_the_reply_lacks_fails(gateway: Gateway) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=chat)
    stricter = create_model("Stricter", __base__=ChatCompletion, system_fingerprint=(str, ...))
    with pytest.raises(ValidationError, match="system_fingerprint"):
        stricter.model_validate(r.json())


def test_own_customer_routes_reply_as_declared(gateway: Gateway) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    check(gateway, "POST", "/v1/chat/completions", json=chat)
    gateway.billed()
    check(gateway, "POST", "/v1/chunks", json={"model": MODEL, "input": ["one text", "two"]})
    check(gateway, "GET", "/v1/account")
    keys = check(gateway, "GET", "/v1/keys")
    k = "/v1/keys/{key_id}"
    check(gateway, "PATCH", f"/v1/keys/{gateway.key_id}", k, json={"name": "renamed"})
    check(gateway, "GET", "/v1/usage", params={"group_by": "day,tier"})
    check(gateway, "GET", "/v1/requests")
    months = check(gateway, "GET", "/v1/invoices")["data"]
    assert months, "the completion above is on an invoice"
    check(gateway, "GET", f"/v1/invoices/{months[0]['month']}", "/v1/invoices/{month}")
    check(gateway, "DELETE", f"/v1/keys/{keys['data'][0]['key_id']}", k)


def test_the_operators_routes_reply_as_declared(gateway: Gateway) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    check(gateway, "POST", "/v1/chat/completions", json=chat)
    gateway.billed()
    tenant = check(gateway, "GET", "/v1/account")["key"]["tenant"]
    check(gateway, "GET", "/admin/account", admin=True)
    new = check(gateway, "POST", "/admin/keys", admin=True, json={"plan": "pro", "tenant": tenant})
    k, kid = "/admin/keys/{key_id}", f"/admin/keys/{new['key_id']}"
    check(gateway, "GET", "/admin/keys", admin=True)
    check(gateway, "GET", kid, k, admin=True)
    check(gateway, "PATCH", kid, k, admin=True, json={"name": "ops"})
    check(gateway, "GET", kid + "/traffic", k + "/traffic", admin=True)
    check(gateway, "DELETE", kid + "/traffic", k + "/traffic", admin=True)
    check(gateway, "DELETE", kid, k, admin=True)
    t = "/admin/tenants/{tenant}"
    check(gateway, "GET", "/admin/tenants", admin=True)
    check(gateway, "GET", f"/admin/tenants/{tenant}", t, admin=True)
    check(gateway, "DELETE", f"/admin/tenants/{tenant}/objects", t + "/objects", admin=True)
    check(gateway, "GET", "/admin/billing", admin=True)
    check(gateway, "GET", "/admin/operations", admin=True)
    check(gateway, "GET", f"/admin/tenants/{tenant}/usage", t + "/usage", admin=True)
