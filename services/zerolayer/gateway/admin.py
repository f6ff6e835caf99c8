"""The admin API under /admin: create, list, label, revoke and re-plan API keys, opt them in or
out of traffic sampling and delete what was kept of them; the tenants; a tenant's keys and
stored objects, and deleting all of those objects (a data deletion request); any tenant's
usage, invoices and usage events (gateway.usage), the tenants billed and the billing
backlog; run the canary now. Guarded by the admin key (its SHA-256 is in the gateway config;
the key itself never is)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from zerolayer.errors import APIError, InvalidRequest
from zerolayer.gateway.deps import AdminKeys, admin_keys
from zerolayer.gateway.http import read_json
from zerolayer.gateway.limits import month_of
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.schemas import ChangePlanRequest, CreateKeyRequest
from zerolayer.gateway.usage import add_billing_routes
from zerolayer.store.keys import KeyStore, UnknownKey, UnknownTenant

__all__ = ["admin_router", "KeyNotFound", "key_call", "revoke_and_purge"]


class KeyNotFound(APIError):
    """No API key has the given id."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "key_not_found"


class TenantNotFound(APIError):
    """No key was ever made for the given tenant."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "tenant_not_found"


async def key_call(fn: Any, *args: Any) -> Any:
    """A key-store call off the event loop, its look-up errors as the API's 404s."""
    try:
        return await asyncio.to_thread(fn, *args)
    except UnknownKey as exc:
        raise KeyNotFound(str(exc)) from exc
    except UnknownTenant as exc:
        raise TenantNotFound(str(exc), param="tenant") from exc


async def revoke_and_purge(parts: GatewayParts, store: KeyStore, key_id: str) -> dict[str, Any]:
    """Revoke a key and delete the prompts kept of it (the record first: a sample being written
    at the same moment sees the revocation and keeps nothing); the record and how many went."""
    record = await key_call(store.revoke, key_id)
    admin = parts.traffic_admin
    deleted = await key_call(admin.purge, key_id) if admin is not None else 0
    return {**record.public(), "traffic_deleted": deleted}


def admin_router(parts: GatewayParts) -> APIRouter:
    """Routes of the admin API."""
    # the admin key, before anything else; routes that use the key store declare AdminKeys
    router = APIRouter(prefix="/admin", dependencies=[Depends(admin_keys)])
    cfg = parts.config
    max_bytes, timeout = cfg.gateway.max_body_bytes, cfg.gateway.body_timeout_s
    call = key_call

    def plan_of(name: str) -> str:
        if name not in cfg.plans:
            raise InvalidRequest(
                f"unknown plan {name!r}; plans: {', '.join(cfg.plans)}", param="plan"
            )
        return name

    @router.get("/account")
    async def admin_account() -> dict[str, Any]:
        return {"object": "account", "admin": True, "plans": list(cfg.plans)}

    @router.post("/keys", status_code=201, openapi_extra=body_schema(CreateKeyRequest))
    async def create_key(request: Request, store: AdminKeys) -> JSONResponse:
        body = await read_json(request, CreateKeyRequest, max_bytes, timeout)
        key, record = await call(store.create, plan_of(body.plan), body.name, body.tenant)
        return JSONResponse({"key": key, **record.public()}, status_code=201)

    @router.get("/keys")
    async def list_keys(store: AdminKeys) -> dict[str, Any]:
        return {"object": "list", "data": [r.public() for r in await call(store.list)]}

    @router.get("/keys/{key_id}")
    async def get_key(store: AdminKeys, key_id: str) -> dict[str, Any]:
        return (await call(store.get, key_id)).public()

    def purge(key_id: str) -> int:
        return parts.traffic_admin.purge(key_id) if parts.traffic_admin is not None else 0

    @router.delete("/keys/{key_id}")
    async def revoke_key(store: AdminKeys, key_id: str) -> dict[str, Any]:
        """Revoke a key and delete the prompts kept of it."""
        return await revoke_and_purge(parts, store, key_id)

    @router.patch("/keys/{key_id}", openapi_extra=body_schema(ChangePlanRequest))
    async def change_key(request: Request, store: AdminKeys, key_id: str) -> dict[str, Any]:
        """A new plan, label and/or traffic sampling; opting out deletes what was kept."""
        body = await read_json(request, ChangePlanRequest, max_bytes, timeout)
        given = body.model_fields_set & {"plan", "name", "sample_traffic"}
        if not given or ("plan" in given and body.plan is None):
            raise InvalidRequest("give a plan, name, sample_traffic, or any of them", param="plan")
        record = await call(store.get, key_id)
        out: dict[str, Any] = {}
        if body.name is not None:
            record = await call(store.set_name, key_id, body.name)
        if body.plan is not None:
            record = await call(store.set_plan, key_id, plan_of(body.plan))
        if "sample_traffic" in given:
            record = await call(store.set_sampling, key_id, body.sample_traffic)
            if body.sample_traffic is False:
                out["traffic_deleted"] = await call(purge, key_id)
        return {**record.public(), **out}

    @router.get("/keys/{key_id}/traffic")
    async def key_traffic(store: AdminKeys, key_id: str) -> dict[str, Any]:
        """The prompts kept of a key (within the retention window), oldest first."""
        await call(store.get, key_id)  # 404 for an unknown id
        if parts.traffic_admin is None:
            return {"object": "list", "data": []}
        entries = await call(parts.traffic_admin.entries, key_id)
        return {"object": "list", "data": [e.public() for e in entries]}

    @router.delete("/keys/{key_id}/traffic")
    async def delete_key_traffic(store: AdminKeys, key_id: str) -> dict[str, Any]:
        """Delete every prompt kept of a key (its sampling setting stays as it is)."""
        await call(store.get, key_id)
        return {"key_id": key_id, "deleted": await call(purge, key_id)}

    @router.get("/tenants")
    async def tenants(store: AdminKeys) -> dict[str, Any]:
        """Every tenant (an account: the keys made for it), with its keys, active keys, plans
        and, with billing on, this month's invoice total so far."""
        records = await call(store.list)
        by: dict[str, list[Any]] = {}
        for r in records:
            by.setdefault(r.owner, []).append(r)
        month, _ = month_of(parts.limiter.now())
        data = []
        for tenant, keys in sorted(by.items(), key=lambda kv: kv[1][0].created):
            row: dict[str, Any] = {
                "tenant": tenant,
                "created": int(keys[0].created),
                "keys": len(keys),
                "active_keys": sum(not k.revoked for k in keys),
                "plans": sorted({k.plan for k in keys if not k.revoked}),
                "month": month,
                "month_total_usd": None,
            }
            if parts.ledger is not None:
                row["month_total_usd"] = (await parts.ledger.invoice(tenant, month))["total_usd"]
            data.append(row)
        return {"object": "list", "data": data}

    @router.get("/tenants/{tenant}")
    async def tenant_objects(store: AdminKeys, tenant: str) -> dict[str, Any]:
        """A tenant's keys and its stored responses and conversations (ids, never content)."""
        keys = await call(store.tenant_keys, tenant)
        objects = (
            [] if parts.conversations is None else await parts.conversations.tenant_objects(tenant)
        )
        return {
            "tenant": tenant,
            "keys": [k.public() for k in keys],
            "objects": {"object": "list", "data": objects},
        }

    @router.delete("/tenants/{tenant}/objects")
    async def delete_tenant_objects(store: AdminKeys, tenant: str) -> dict[str, Any]:
        """Delete every stored response and conversation of a tenant (its keys stay)."""
        await call(store.tenant_keys, tenant)
        deleted = (
            {"response": 0, "conversation": 0}
            if parts.conversations is None
            else await parts.conversations.purge_tenant(tenant)
        )
        return {"tenant": tenant, "deleted": deleted}

    if parts.ledger is not None:
        ledger = parts.ledger

        async def tenant_of(store: AdminKeys, tenant: str) -> str:
            await call(store.tenant_keys, tenant)
            return str(tenant)

        add_billing_routes(router, "/tenants/{tenant}", tenant_of, ledger)

        @router.get("/billing")
        async def billing() -> dict[str, Any]:
            """The tenants with usage, and the usage stream's backlog (unread, pending)."""
            stats = await parts.billing_stats() if parts.billing_stats is not None else None
            return {"object": "billing", "tenants": await ledger.tenants(), "stream": stats}

    @router.post("/canary")
    async def run_canary() -> dict[str, Any]:
        """Run the canary now (it also runs every monitoring.canary_interval_s): per ready
        tier, its KL against the baseline tier, the limit and whether it is over."""
        if parts.canary is None:
            raise InvalidRequest("this gateway runs no canary")
        return {"object": "canary", "tiers": await parts.canary.run()}

    return router
