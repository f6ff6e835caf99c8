"""The admin API: API keys and tenants."""

from __future__ import annotations

from .._models import BaseModel, RequestModel

__all__ = [
    "KeyCreateParams",
    "KeyUpdateParams",
    "ApiKey",
    "CreatedKey",
    "TenantObject",
    "TenantObjects",
    "Tenant",
    "TenantObjectsDeleted",
]


class KeyCreateParams(RequestModel):
    """The body of POST /admin/keys."""

    plan: str
    name: str | None = None
    tenant: str | None = None


class KeyUpdateParams(RequestModel):
    """The body of PATCH /admin/keys/{id}: a new plan, traffic sampling (null: the plan's
    setting), or both."""

    plan: str | None = None
    sample_traffic: bool | None = None


class ApiKey(BaseModel):
    """An API key's record (never the key itself)."""

    key_id: str
    plan: str
    name: str = ""
    created: int = 0
    revoked: bool = False
    sample_traffic: bool | None = None
    tenant: str | None = None
    traffic_deleted: int | None = None  # prompts deleted by this call (revoke, opt-out)


class CreatedKey(ApiKey):
    """A new key: `key` is shown this once."""

    key: str


class TenantObject(BaseModel):
    """A stored response or conversation of a tenant (ids, never content)."""

    object: str
    id: str
    created_at: int = 0


class TenantObjects(BaseModel):
    """A tenant's stored objects."""

    object: str = "list"
    data: list[TenantObject] = []


class Tenant(BaseModel):
    """A tenant: its keys and stored objects."""

    tenant: str
    keys: list[ApiKey] = []
    objects: TenantObjects = TenantObjects()


class TenantObjectsDeleted(BaseModel):
    """What deleting a tenant's objects removed, by kind."""

    tenant: str
    deleted: dict[str, int] = {}
