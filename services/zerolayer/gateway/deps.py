"""What a route is given: FastAPI dependencies for who may call it (the current API key's record,
its tenant, the admin key and the key store it unlocks, either kind of key for the catalogue's
readers) and for the replica's parts it works with (the request path, the catalogue, the
stores). A route declares them as parameters (`record: CurrentKey`, `pipeline: PipelineDep`)
and never authorises by hand. They read the replica's parts from `app.state`, which create_app
sets. Bodies are the routes' pydantic parameters (zerolayer.gateway.bodies). Every dependency
is a coroutine function: FastAPI runs a plain function's dependency in a worker thread, a
hand-off per request that costs more than the dependency."""

from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import Depends, Request
from pydantic import BaseModel
from redis.exceptions import OutOfMemoryError

from zerolayer.billing.ledger import Ledger
from zerolayer.conversations import ConversationStore, Quota
from zerolayer.errors import AuthenticationFailed, InvalidRequest, PermissionDenied
from zerolayer.gateway.bodies import parse
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.http import authorise, is_admin
from zerolayer.gateway.meter import Meter
from zerolayer.gateway.parts import GatewayParts
from zerolayer.gateway.pipeline import Pipeline
from zerolayer.gateway.responses import Responder
from zerolayer.gateway.silence import SilenceMaps
from zerolayer.store.keys import ApiKeyRecord, KeyStore

M = TypeVar("M", bound=BaseModel)

__all__ = [
    "AdminKeys",
    "CatalogDep",
    "ConversationsDep",
    "CurrentKey",
    "PipelineDep",
    "LedgerDep",
    "MeterDep",
    "ModelKey",
    "Parts",
    "Reader",
    "ResponderDep",
    "SilenceDep",
    "StorageQuota",
    "Tenant",
    "admin_guard",
    "admin_keys",
    "body_of",
    "current_key",
    "current_tenant",
    "model_key",
    "parts_dep",
    "parts_of",
    "reader",
    "storage_quota",
]


def parts_of(request: Request) -> GatewayParts:
    """The parts of the gateway replica answering the request."""
    parts: GatewayParts = request.app.state.parts
    return parts


async def model_key(request: Request) -> ApiKeyRecord:
    """The record of the request's bearer key, for the model calls (whose requests the request
    path counts against the plan's limits); 401 when missing, unknown or revoked."""
    return await authorise(request, parts_of(request).lookup_key)


async def current_key(request: Request) -> ApiKeyRecord:
    """The record of the request's bearer key, for every other route: 401 when missing,
    unknown or revoked, 429 past the plan's api_requests_per_minute (one count per request:
    FastAPI solves a dependency once per request however many others use it)."""
    parts = parts_of(request)
    record = await authorise(request, parts.lookup_key)
    plan = parts.config.plans.get(record.plan)
    if plan is not None:
        try:
            await parts.limiter.api_request(record.key_id, record.plan, plan)
        except OutOfMemoryError:
            pass  # Redis is full and refuses the count: reads still work, writes say store_full
    return record


async def current_tenant(record: ApiKeyRecord = Depends(current_key)) -> str:
    """The tenant of the request's bearer key (what its stored objects and usage belong to)."""
    return record.owner


def quota_of(parts: GatewayParts, record: ApiKeyRecord) -> Quota:
    """The storage quota of a key's tenant, from the key's plan (none for an unknown plan)."""
    plan = parts.config.plans.get(record.plan)
    return Quota.of(plan.limits if plan is not None else None)


async def storage_quota(request: Request, record: ApiKeyRecord = Depends(current_key)) -> Quota:
    """The storage quota a write of the request's key is checked against."""
    return quota_of(parts_of(request), record)


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


async def admin_keys(request: Request) -> KeyStore:
    """The admin key's dependency: the key store it unlocks."""
    return admin_guard(parts_of(request), request)


async def reader(request: Request) -> ApiKeyRecord | None:
    """For the routes that read the catalogue: an API key's record (counted as current_key
    counts), or None for the admin key."""
    parts = parts_of(request)
    if is_admin(request, parts.config.gateway.admin_key_sha256):
        return None
    return await current_key(request)


CurrentKey = Annotated[ApiKeyRecord, Depends(current_key)]
ModelKey = Annotated[ApiKeyRecord, Depends(model_key)]
Tenant = Annotated[str, Depends(current_tenant)]
StorageQuota = Annotated[Quota, Depends(storage_quota)]
AdminKeys = Annotated[KeyStore, Depends(admin_keys)]
Reader = Annotated[ApiKeyRecord | None, Depends(reader)]


async def body_of(request: Request, model: type[M]) -> M:
    """The JSON body of a route that reads its body by hand (one that also takes a stream), as
    `model`: 400 otherwise. (Its size and time limits: BodyLimits, around the app.)"""
    return parse(await request.body(), request.headers.get("content-type"), model)


async def pipeline_of(request: Request) -> Pipeline:
    """The replica's request path (limits, admission, dispatch, settlement)."""
    pipeline: Pipeline = request.app.state.pipeline
    return pipeline


async def meter_of(request: Request) -> Meter:
    """The replica's meter (limits, leases, settlement, usage events)."""
    meter: Meter = request.app.state.meter
    return meter


async def catalog_of(request: Request) -> Catalog:
    """The replica's catalogue of models and tiers."""
    catalog: Catalog = request.app.state.catalog
    return catalog


async def responder_of(request: Request) -> Responder:
    """The replica's Responses API runner (only where conversations are kept)."""
    responder: Responder = request.app.state.responder
    return responder


async def silence_of(request: Request) -> SilenceMaps:
    """The replica's silence maps."""
    maps: SilenceMaps = request.app.state.silence
    return maps


async def conversations_of(request: Request) -> ConversationStore:
    """The conversation store (its routes are mounted only where one is configured)."""
    store = parts_of(request).conversations
    if store is None:
        raise InvalidRequest("this gateway keeps no conversations")
    return store


async def ledger_of(request: Request) -> Ledger:
    """The billing ledger (its routes are mounted only where one is configured)."""
    ledger = parts_of(request).ledger
    if ledger is None:
        raise InvalidRequest("this gateway keeps no ledger")
    return ledger


async def parts_dep(request: Request) -> GatewayParts:
    """parts_of, as a dependency."""
    return parts_of(request)


Parts = Annotated[GatewayParts, Depends(parts_dep)]
PipelineDep = Annotated[Pipeline, Depends(pipeline_of)]
MeterDep = Annotated[Meter, Depends(meter_of)]
CatalogDep = Annotated[Catalog, Depends(catalog_of)]
ResponderDep = Annotated[Responder, Depends(responder_of)]
SilenceDep = Annotated[SilenceMaps, Depends(silence_of)]
ConversationsDep = Annotated[ConversationStore, Depends(conversations_of)]
LedgerDep = Annotated[Ledger, Depends(ledger_of)]
