"""How a route says who may call it: FastAPI dependencies for the current API key's record, its
tenant, the admin key (the key store it unlocks), and either kind of key for the catalogue's
readers. A route declares one as a parameter (`record: CurrentKey`) and never authorises by
hand. They read the replica's parts from `app.state.parts`, which create_app sets."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from zerolayer.errors import AuthenticationFailed, PermissionDenied
from zerolayer.gateway.http import authorise, authorise_reader, is_admin
from zerolayer.gateway.parts import GatewayParts
from zerolayer.store.keys import ApiKeyRecord, KeyStore

__all__ = [
    "AdminKeys",
    "CurrentKey",
    "Reader",
    "Tenant",
    "admin_guard",
    "admin_keys",
    "current_key",
    "current_tenant",
    "parts_of",
    "reader",
]


def parts_of(request: Request) -> GatewayParts:
    """The parts of the gateway replica answering the request."""
    parts: GatewayParts = request.app.state.parts
    return parts


async def current_key(request: Request) -> ApiKeyRecord:
    """The record of the request's bearer key; 401 when missing, unknown or revoked."""
    return await authorise(request, parts_of(request).lookup_key)


async def current_tenant(request: Request) -> str:
    """The tenant of the request's bearer key (what its stored objects and usage belong to)."""
    return (await current_key(request)).owner


def admin_guard(parts: GatewayParts, request: Request) -> KeyStore:
    """The key store, for a request made with the admin key; 403 when the admin API is off,
    401 for any other key."""
    expected = parts.config.gateway.admin_key_sha256
    if expected is None or parts.keys is None:
        raise PermissionDenied(
            "the admin API is disabled: start the platform with ZEROLAYER_ADMIN_KEY set "
            "(or let `zerolayer up` make <cache>/admin-key)",
            code="admin_disabled",
        )
    if not is_admin(request, expected):
        raise AuthenticationFailed("the admin key is missing or wrong", code="invalid_admin_key")
    return parts.keys


def admin_keys(request: Request) -> KeyStore:
    """The admin key's dependency: the key store it unlocks."""
    return admin_guard(parts_of(request), request)


async def reader(request: Request) -> ApiKeyRecord | None:
    """For the routes that read the catalogue: an API key's record, or None for the admin
    key."""
    parts = parts_of(request)
    return await authorise_reader(request, parts.lookup_key, parts.config.gateway.admin_key_sha256)


CurrentKey = Annotated[ApiKeyRecord, Depends(current_key)]
Tenant = Annotated[str, Depends(current_tenant)]
AdminKeys = Annotated[KeyStore, Depends(admin_keys)]
Reader = Annotated[ApiKeyRecord | None, Depends(reader)]
