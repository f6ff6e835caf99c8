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

from typing import Any

from fastapi import APIRouter, Depends, Request

from zerolayer.errors import InvalidRequest
from zerolayer.gateway.admin import KeyNotFound, key_call, revoke_and_purge
from zerolayer.gateway.deps import CurrentKey
from zerolayer.gateway.http import read_json
from zerolayer.gateway.openapi import body_schema
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.schemas import RenameKeyRequest
from zerolayer.store.keys import ApiKeyRecord, KeyStore

__all__ = ["keys_router"]


def keys_router(parts: GatewayParts) -> APIRouter:
    """The routes of /v1/keys (400 when the gateway has no key store)."""
    router = APIRouter(prefix="/v1/keys")
    cfg = parts.config
    max_bytes, timeout = cfg.gateway.max_body_bytes, cfg.gateway.body_timeout_s

    def store() -> KeyStore:
        if parts.keys is None:
            raise InvalidRequest("this gateway keeps no keys")
        return parts.keys

    def view(record: ApiKeyRecord, caller: ApiKeyRecord) -> dict[str, Any]:
        return {**record.public(), "current": record.key_id == caller.key_id}

    async def own(caller: CurrentKey, key_id: str) -> ApiKeyRecord:
        """The caller's record, once key_id is one of its tenant's keys (404 for any other)."""
        if (await key_call(store().get, key_id)).owner != caller.owner:
            raise KeyNotFound(f"no API key with id {key_id!r}")
        return caller

    @router.get("")
    async def list_keys(caller: CurrentKey) -> dict[str, Any]:
        records = await key_call(store().tenant_keys, caller.owner)
        return {"object": "list", "data": [view(r, caller) for r in records]}

    # a closure's dependency goes in the default: FastAPI resolves string annotations in the
    # module's globals only
    @router.patch("/{key_id}", openapi_extra=body_schema(RenameKeyRequest))
    async def rename_key(
        request: Request, key_id: str, caller: ApiKeyRecord = Depends(own)
    ) -> dict[str, Any]:
        body = await read_json(request, RenameKeyRequest, max_bytes, timeout)
        return view(await key_call(store().set_name, key_id, body.name), caller)

    @router.delete("/{key_id}")
    async def revoke_key(key_id: str, caller: ApiKeyRecord = Depends(own)) -> dict[str, Any]:
        revoked = await revoke_and_purge(parts, store(), key_id)
        return {**revoked, "current": key_id == caller.key_id}

    return router
