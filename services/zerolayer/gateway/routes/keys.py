"""A tenant's own keys under /v1/keys: list them, relabel one, revoke one. Any key of a tenant
manages every key of that tenant (as in providers' project dashboards); another tenant's key ids
answer exactly like unknown ones. Making keys and changing plans stay with the operator (the
admin API): a key carries its own rate limits and monthly budget, so a key a customer made
for themselves would be a second budget, and a plan is what they pay for.

  GET    /v1/keys               the tenant's keys, oldest first (revoked ones too), never a key
  PATCH  /v1/keys/{key_id}      {"name": "..."}: a new label
  DELETE /v1/keys/{key_id}      revoke (refused from its next request; the prompts kept of it
                                for recalibration are deleted)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from zerolayer.errors import InvalidRequest
from zerolayer.gateway.admin import KeyNotFound, key_call, revoke_and_purge
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import CurrentKey, Parts
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.replies import KeyList, TenantKey, json_reply
from zerolayer.gateway.schemas import RenameKeyRequest
from zerolayer.store.keys import ApiKeyRecord, KeyStore

__all__ = ["router"]


router = APIRouter(prefix="/v1/keys", route_class=BodyRoute)


def _store(parts: GatewayParts) -> KeyStore:
    if parts.keys is None:
        raise InvalidRequest("this gateway keeps no keys")
    return parts.keys


def _view(record: ApiKeyRecord, caller: ApiKeyRecord) -> dict[str, Any]:
    return {**record.public(), "current": record.key_id == caller.key_id}


async def own(caller: CurrentKey, parts: Parts, key_id: str) -> ApiKeyRecord:
    """The caller's record, once key_id is one of its tenant's keys (404 for any other)."""
    if (await key_call(_store(parts).get, key_id)).owner != caller.owner:
        raise KeyNotFound(f"no API key with id {key_id!r}")
    return caller


OwnKey = Annotated[ApiKeyRecord, Depends(own)]


@router.get("", responses=json_reply(KeyList))
async def list_keys(caller: CurrentKey, parts: Parts) -> dict[str, Any]:
    """The tenant's keys, oldest first (revoked ones too)."""
    records = await key_call(_store(parts).tenant_keys, caller.owner)
    return {"object": "list", "data": [_view(r, caller) for r in records]}


@router.patch("/{key_id}", responses=json_reply(TenantKey))
async def rename_key(
    body: RenameKeyRequest, key_id: str, caller: OwnKey, parts: Parts
) -> dict[str, Any]:
    """A new label for one of the tenant's keys."""
    return _view(await key_call(_store(parts).set_name, key_id, body.name), caller)


@router.delete("/{key_id}", responses=json_reply(TenantKey))
async def revoke_key(key_id: str, caller: OwnKey, parts: Parts) -> dict[str, Any]:
    """Revoke one of the tenant's keys (and delete the prompts kept of it)."""
    revoked = await revoke_and_purge(parts, _store(parts), key_id)
    return {**revoked, "current": key_id == caller.key_id}
