"""The gateway's edge: the middleware Ray Serve puts around its own HTTP handling, tested with Ray's
own request-id middleware inside it, as a replica runs them."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from ray.serve._private.http_util import RequestIdMiddleware
from starlette.responses import PlainTextResponse
from zerolayer.gateway.edge import EdgeMiddleware

from tests.gateway.conftest import GatewayFactory
from tests.gateway.test_api import CHAT


def _edge(app: Any) -> TestClient:
    return TestClient(EdgeMiddleware(RequestIdMiddleware(app)))


def _ray(app: Any) -> Any:
    """Ray's request-id middleware around an app, for HTTP (Ray sends it no lifespan events)."""
    with_id = RequestIdMiddleware(app)

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        await (with_id if scope["type"] == "http" else app)(scope, receive, send)

    return asgi


def test_one_request_id_per_answer_the_gateways_own(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(wrap=lambda app: EdgeMiddleware(_ray(app)))
    client = gateway.client
    sent = {**gateway.auth, "x-request-id": "client-chose-this"}
    r = client.post("/v1/chat/completions", headers=sent, json=CHAT)
    assert r.status_code == 200
    ids = r.headers.get_list("x-request-id")
    assert ids == [r.json()["id"]], ids  # one header: the completion's id
    health = client.get("/healthz", headers={"x-request-id": "abc"})
    assert health.headers.get_list("x-request-id") == ["abc"]  # Ray's, where the app sets none
    # without the edge, Ray's middleware adds its id after the app's
    bare = make_gateway(wrap=_ray, key=(gateway.key, gateway.key_id))
    both = bare.client.post("/v1/chat/completions", headers=sent, json=CHAT).headers
    assert len(both.get_list("x-request-id")) == 2


def test_the_request_timeout_header_is_dropped() -> None:
    seen: list[list[tuple[bytes, bytes]]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(list(scope["headers"]))
        await PlainTextResponse("ok")(scope, receive, send)

    client = _edge(app)
    r = client.get("/", headers={"x-request-timeout-seconds": "0.001", "x-other": "1"})
    assert r.status_code == 200
    names = {k for k, _ in seen[0]}
    assert b"x-request-timeout-seconds" not in names and b"x-other" in names


def test_rays_own_plain_text_errors_become_openai_errors() -> None:
    async def ray_timeout(scope: Any, receive: Any, send: Any) -> None:
        # what a Ray Serve replica sends when a request times out before the app answers
        await PlainTextResponse("Request abc timed out after 0.001s.", status_code=408)(
            scope, receive, send
        )

    r = _edge(ray_timeout).get("/")
    assert r.status_code == 408 and r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] == "request_timeout" and "timed out" in err["message"]
    assert len(r.headers.get_list("x-request-id")) == 1
