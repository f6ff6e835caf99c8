"""The admin API under /admin: create, list, label, revoke and re-plan API keys, opt them in or
out of traffic sampling and delete what was kept of them; the tenants; a tenant's keys and
stored objects, and deleting all of those objects (a data deletion request); the tenants
billed and the billing backlog; run the canary now. Any tenant's usage, invoices and usage
events are gateway.routes.usage's. Guarded by the admin key (its SHA-256 is in the gateway
config; the key itself never is): every route here takes it before anything else."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from zerolayer.errors import InvalidRequest
from zerolayer.gateway.admin import key_call, revoke_and_purge
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import AdminKeys, LedgerDep, Parts, admin_keys
from zerolayer.gateway.limits import month_of
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.replies import (
    AdminAccount,
    Billing,
    CanaryRun,
    Deleted,
    KeyRecordList,
    KeyView,
    NewKey,
    PlainList,
    TenantObjects,
    json_reply,
)
from zerolayer.gateway.schemas import ChangePlanRequest, CreateKeyRequest

__all__ = ["billing_router", "router"]

router = APIRouter(prefix="/admin", dependencies=[Depends(admin_keys)], route_class=BodyRoute)
# mounted where the gateway keeps a ledger
billing_router = APIRouter(
    prefix="/admin", dependencies=[Depends(admin_keys)], route_class=BodyRoute
)


def _plan_of(parts: GatewayParts, name: str) -> str:
    if name not in parts.config.plans:
        raise InvalidRequest(
            f"unknown plan {name!r}; plans: {', '.join(parts.config.plans)}", param="plan"
        )
    return name


def _purge(parts: GatewayParts, key_id: str) -> int:
    return parts.traffic_admin.purge(key_id) if parts.traffic_admin is not None else 0


@router.get("/account", responses=json_reply(AdminAccount))
async def admin_account(parts: Parts) -> dict[str, Any]:
    """200 for the admin key alone (the console tells an operator from a customer by it)."""
    return {"object": "account", "admin": True, "plans": list(parts.config.plans)}


@router.post("/keys", status_code=201, responses={201: {"model": NewKey}})
async def create_key(body: CreateKeyRequest, store: AdminKeys, parts: Parts) -> JSONResponse:
    """A new API key on a plan, of a new tenant or of a given one; the key is shown once."""
    key, record = await key_call(store.create, _plan_of(parts, body.plan), body.name, body.tenant)
    return JSONResponse({"key": key, **record.public()}, status_code=201)


@router.get("/keys", responses=json_reply(KeyRecordList))
async def list_keys(store: AdminKeys) -> dict[str, Any]:
    """Every key's record."""
    return {"object": "list", "data": [r.public() for r in await key_call(store.list)]}


@router.get("/keys/{key_id}", responses=json_reply(KeyView))
async def get_key(store: AdminKeys, key_id: str) -> dict[str, Any]:
    """One key's record (never the key)."""
    return (await key_call(store.get, key_id)).public()


@router.delete("/keys/{key_id}", responses=json_reply(KeyView))
async def revoke_key(store: AdminKeys, key_id: str, parts: Parts) -> dict[str, Any]:
    """Revoke a key and delete the prompts kept of it."""
    return await revoke_and_purge(parts, store, key_id)


@router.patch("/keys/{key_id}", responses=json_reply(KeyView))
async def change_key(
    body: ChangePlanRequest, store: AdminKeys, key_id: str, parts: Parts
) -> dict[str, Any]:
    """A new plan, label and/or traffic sampling; opting out deletes what was kept."""
    given = body.model_fields_set & {"plan", "name", "sample_traffic"}
    if not given or ("plan" in given and body.plan is None):
        raise InvalidRequest("give a plan, name, sample_traffic, or any of them", param="plan")
    record = await key_call(store.get, key_id)
    out: dict[str, Any] = {}
    if body.name is not None:
        record = await key_call(store.set_name, key_id, body.name)
    if body.plan is not None:
        record = await key_call(store.set_plan, key_id, _plan_of(parts, body.plan))
    if "sample_traffic" in given:
        record = await key_call(store.set_sampling, key_id, body.sample_traffic)
        if body.sample_traffic is False:
            out["traffic_deleted"] = await key_call(_purge, parts, key_id)
    return {**record.public(), **out}


@router.get("/keys/{key_id}/traffic", responses=json_reply(PlainList))
async def key_traffic(store: AdminKeys, key_id: str, parts: Parts) -> dict[str, Any]:
    """The prompts kept of a key (within the retention window), oldest first."""
    await key_call(store.get, key_id)  # 404 for an unknown id
    if parts.traffic_admin is None:
        return {"object": "list", "data": []}
    entries = await key_call(parts.traffic_admin.entries, key_id)
    return {"object": "list", "data": [e.public() for e in entries]}


@router.delete("/keys/{key_id}/traffic", responses=json_reply(Deleted))
async def delete_key_traffic(store: AdminKeys, key_id: str, parts: Parts) -> dict[str, Any]:
    """Delete every prompt kept of a key (its sampling setting stays as it is)."""
    await key_call(store.get, key_id)
    return {"key_id": key_id, "deleted": await key_call(_purge, parts, key_id)}


@router.get("/tenants", responses=json_reply(PlainList))
async def tenants(store: AdminKeys, parts: Parts) -> dict[str, Any]:
    """Every tenant (an account: the keys made for it), with its keys, active keys, plans
    and, with billing on, this month's invoice total so far."""
    records = await key_call(store.list)
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


@router.get("/tenants/{tenant}", responses=json_reply(TenantObjects))
async def tenant_objects(store: AdminKeys, tenant: str, parts: Parts) -> dict[str, Any]:
    """A tenant's keys and its stored responses and conversations (ids, never content)."""
    keys = await key_call(store.tenant_keys, tenant)
    objects = (
        [] if parts.conversations is None else await parts.conversations.tenant_objects(tenant)
    )
    return {
        "tenant": tenant,
        "keys": [k.public() for k in keys],
        "objects": {"object": "list", "data": objects},
    }


@router.delete("/tenants/{tenant}/objects", responses=json_reply(Deleted))
async def delete_tenant_objects(store: AdminKeys, tenant: str, parts: Parts) -> dict[str, Any]:
    """Delete every stored response, conversation and file of a tenant (its keys stay)."""
    await key_call(store.tenant_keys, tenant)
    deleted = (
        {"response": 0, "conversation": 0}
        if parts.conversations is None
        else await parts.conversations.purge_tenant(tenant)
    )
    if parts.files is not None:
        deleted["file"] = await parts.files.purge_tenant(tenant)
    return {"tenant": tenant, "deleted": deleted}


@router.post("/canary", responses=json_reply(CanaryRun))
async def run_canary(parts: Parts) -> dict[str, Any]:
    """Run the canary now (it also runs every monitoring.canary_interval_s): per ready
    tier, its KL against the baseline tier, the limit and whether it is over."""
    if parts.canary is None:
        raise InvalidRequest("this gateway runs no canary")
    return {"object": "canary", "tiers": await parts.canary.run()}


@billing_router.get("/billing", responses=json_reply(Billing))
async def billing(parts: Parts, ledger: LedgerDep) -> dict[str, Any]:
    """The tenants with usage, and the usage stream's backlog (unread, pending)."""
    stats = await parts.billing_stats() if parts.billing_stats is not None else None
    return {"object": "billing", "tenants": await ledger.tenants(), "stream": stats}
