"""Every route says who may call it through a dependency (zerolayer.gateway.deps): walked over
the app's own route table, each route answers a request without a key, or with a wrong one,
with 401 in the OpenAI format, before it reads a body or a parameter; the few public routes
are named here."""

from __future__ import annotations

import inspect
import re
from typing import Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from zerolayer.gateway.bodies import BodyRoute

from tests.gateway.conftest import Gateway
from tests.gateway.test_api import assert_openai_error

PUBLIC = {"/healthz", "/metrics", "/console", "/console/", "/console/{name}", "/openapi.json"}


def _routes(gateway: Gateway) -> list[tuple[str, str]]:
    out = []
    for route in gateway.app.routes:
        if isinstance(route, APIRoute) and route.path not in PUBLIC:
            path = re.sub(r"\{(layer|channel)\}", "1", route.path)
            path = re.sub(r"\{[^}]+\}", "x", path)
            out += [(method, path) for method in sorted(route.methods)]
    return out


def unguarded(gateway: Gateway) -> list[tuple[str, str]]:
    """The routes that do not answer a request without a key (and a body that is not JSON)
    with the OpenAI format's 401."""
    out = []
    for method, path in _routes(gateway):
        r = gateway.client.request(method, path, content=b"not json")
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        kind = (body.get("error") or {}).get("type") if isinstance(body, dict) else None
        if r.status_code != 401 or kind != "authentication_error":
            out.append((method, path))
    return out


def test_every_route_refuses_a_request_without_a_key(gateway: Gateway) -> None:
    assert len(_routes(gateway)) > 40
    assert unguarded(gateway) == []


def test_the_walk_finds_a_planted_route_without_a_dependency(gateway: Gateway) -> None:
    async def planted() -> dict[str, bool]:
        return {"open": True}

    gateway.app.add_api_route("/v1/planted", planted, methods=["GET"])
    assert unguarded(gateway) == [("GET", "/v1/planted")]


def test_every_route_refuses_a_wrong_key(gateway: Gateway) -> None:
    for method, path in _routes(gateway):
        bad = {"Authorization": "Bearer zl-not-a-key"}
        r = gateway.client.request(method, path, headers=bad, params={"limit": "oops"})
        assert_openai_error(r, 401)


def test_admin_routes_refuse_an_api_key(gateway: Gateway) -> None:
    admin = [(m, p) for m, p in _routes(gateway) if p.startswith("/admin")]
    assert len(admin) > 15
    for method, path in admin:
        err = assert_openai_error(gateway.client.request(method, path, headers=gateway.auth), 401)
        assert err["code"] == "invalid_admin_key", (method, path)


def test_every_route_decodes_its_body_one_way(gateway: Gateway) -> None:
    # a router made without route_class=BodyRoute would answer a bad body in FastAPI's own words
    plain = [
        r.path
        for r in gateway.app.routes
        if isinstance(r, APIRoute) and not isinstance(r, BodyRoute)
    ]
    assert plain == []


def _sync_dependencies(dependant: Any, seen: set[str]) -> None:
    for dep in dependant.dependencies:
        call = dep.call
        if call is not None and not inspect.iscoroutinefunction(call):
            seen.add(getattr(call, "__qualname__", repr(call)))
        _sync_dependencies(dep, seen)


def sync_dependencies(routes: list[Any]) -> set[str]:
    """The dependencies of these routes that are plain functions (FastAPI runs each in a
    worker thread, a hand-off per request)."""
    seen: set[str] = set()
    for route in routes:
        if isinstance(route, APIRoute):
            _sync_dependencies(route.dependant, seen)
    return seen


def test_every_dependency_runs_on_the_event_loop(gateway: Gateway) -> None:
    assert sync_dependencies(gateway.app.routes) == set()

    def plain(request: Request) -> int:
        return 1

    gateway.app.add_api_route("/v1/planted", lambda x=Depends(plain): x, methods=["GET"])
    assert sync_dependencies(gateway.app.routes) == {
        "test_every_dependency_runs_on_the_event_loop.<locals>.plain"
    }
