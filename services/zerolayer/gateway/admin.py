"""The admin API under /admin: create, list, revoke and re-plan API keys; run the canary now.
Guarded by the admin key (its SHA-256 is in the gateway config; the key itself never is)."""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from zerolayer.errors import APIError, AuthenticationFailed, InvalidRequest, PermissionDenied
from zerolayer.gateway.http import read_json
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.schemas import ChangePlanRequest, CreateKeyRequest
from zerolayer.store.keys import KeyStore, UnknownKey, hash_key

__all__ = ["admin_router"]


class KeyNotFound(APIError):
    """No API key has the given id."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "key_not_found"


def admin_router(parts: GatewayParts) -> APIRouter:
    """Routes of the admin API."""
    router = APIRouter(prefix="/admin")
    cfg = parts.config
    max_bytes, timeout = cfg.gateway.max_body_bytes, cfg.gateway.body_timeout_s

    def guard(request: Request) -> KeyStore:
        expected = cfg.gateway.admin_key_sha256
        if expected is None or parts.keys is None:
            raise PermissionDenied(
                "the admin API is disabled: start the platform with ZEROLAYER_ADMIN_KEY set "
                "(or let `zerolayer up` make <cache>/admin-key)",
                code="admin_disabled",
            )
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(hash_key(key.strip()), expected):
            raise AuthenticationFailed(
                "the admin key is missing or wrong", code="invalid_admin_key"
            )
        return parts.keys

    def plan_of(name: str) -> str:
        if name not in cfg.plans:
            raise InvalidRequest(
                f"unknown plan {name!r}; plans: {', '.join(cfg.plans)}", param="plan"
            )
        return name

    async def call(fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except UnknownKey as exc:
            raise KeyNotFound(str(exc)) from exc

    @router.post("/keys", status_code=201, openapi_extra=body_schema(CreateKeyRequest))
    async def create_key(request: Request) -> JSONResponse:
        store = guard(request)
        body = await read_json(request, CreateKeyRequest, max_bytes, timeout)
        key, record = await call(store.create, plan_of(body.plan), body.name)
        return JSONResponse({"key": key, **record.public()}, status_code=201)

    @router.get("/keys")
    async def list_keys(request: Request) -> dict[str, Any]:
        store = guard(request)
        return {"object": "list", "data": [r.public() for r in await call(store.list)]}

    @router.get("/keys/{key_id}")
    async def get_key(request: Request, key_id: str) -> dict[str, Any]:
        return (await call(guard(request).get, key_id)).public()

    @router.delete("/keys/{key_id}")
    async def revoke_key(request: Request, key_id: str) -> dict[str, Any]:
        return (await call(guard(request).revoke, key_id)).public()

    @router.patch("/keys/{key_id}", openapi_extra=body_schema(ChangePlanRequest))
    async def change_plan(request: Request, key_id: str) -> dict[str, Any]:
        store = guard(request)
        body = await read_json(request, ChangePlanRequest, max_bytes, timeout)
        return (await call(store.set_plan, key_id, plan_of(body.plan))).public()

    @router.post("/canary")
    async def run_canary(request: Request) -> dict[str, Any]:
        """Run the canary now (it also runs every monitoring.canary_interval_s): per ready
        tier, its KL against the baseline tier, the limit and whether it is over."""
        guard(request)
        if parts.canary is None:
            raise InvalidRequest("this gateway runs no canary")
        return {"object": "canary", "tiers": await parts.canary.run()}

    return router
