"""The admin API: API keys and tenants."""

from __future__ import annotations

from decimal import Decimal

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
    "TenantSummary",
    "TierOperations",
    "Alert",
    "Operations",
]


class KeyCreateParams(RequestModel):
    """The body of POST /admin/keys."""

    plan: str
    name: str | None = None
    tenant: str | None = None


class KeyUpdateParams(RequestModel):
    """The body of PATCH /admin/keys/{id}: a new plan, label, traffic sampling (null: the
    plan's setting), or any of them."""

    plan: str | None = None
    name: str | None = None
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
    current: bool | None = None  # client.keys: whether this is the key making the call


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


class TenantSummary(BaseModel):
    """A tenant in the list of tenants: its keys, plans, and this month's invoice so far."""

    tenant: str
    created: int = 0
    keys: int = 0
    active_keys: int = 0
    plans: list[str] = []
    month: str | None = None
    month_total_usd: Decimal | None = None


class TierOperations(BaseModel):
    """A served tier's live figures (since the counters began, over every gateway replica;
    queue_wait_s is the answering replica's now)."""

    tier: str
    state: str
    requests: int = 0
    shed: int = 0
    finished: dict[str, int] = {}
    error_rate: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    queue_wait_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    alerts: int = 0


class Alert(BaseModel):
    """A live signal of a tier over its limit (activation_drift, skip_rate, canary_kl)."""

    tier: str
    signal: str
    value: float
    limit: float | list[float]
    message: str


class Operations(BaseModel):
    """GET /admin/operations."""

    object: str = "operations"
    at: int = 0
    tiers: list[TierOperations] = []
    alerts: list[Alert] = []
