"""What the key routes share (the admin API's, gateway.routes.admin, and a tenant's own,
gateway.routes.keys): the key store's calls off the event loop with their 404s, and revoking
a key with the prompts kept of it."""

from __future__ import annotations

import asyncio
from typing import Any

from zerolayer.errors import APIError
from zerolayer.gateway.parts import GatewayParts
from zerolayer.store.keys import KeyStore, UnknownKey, UnknownTenant

__all__ = ["KeyNotFound", "TenantNotFound", "key_call", "revoke_and_purge"]


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
