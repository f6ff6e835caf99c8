"""GET /v1/account (a key's record, plan, prices, limits and the month's spend), GET
/v1/requests (the request log) and /v1/keys (a tenant's own keys)."""

from __future__ import annotations

from decimal import Decimal

from .._models import BaseModel, RequestModel
from .admin import ApiKey

__all__ = [
    "PlanPrices",
    "PlanLimits",
    "Plan",
    "Account",
    "RequestLogEntry",
    "KeyRenameParams",
]


class PlanPrices(BaseModel):
    """A tier's prices under a plan now, USD per 1K and per 1M tokens; `basis`: "hand", "auto"
    (measured cost x the plan's margin) or "unmeasured"."""

    prompt_per_1k: Decimal
    cached_prompt_per_1k: Decimal
    completion_per_1k: Decimal
    prompt_per_1m: Decimal | None = None
    cached_prompt_per_1m: Decimal | None = None
    completion_per_1m: Decimal | None = None
    basis: str | None = None


class PlanLimits(BaseModel):
    """A plan's per-key limits (None: no limit)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    monthly_budget_usd: Decimal | None = None


class Plan(BaseModel):
    """A plan as its keys see it."""

    name: str
    description: str = ""
    tiers: list[str] = []
    default_tier: str = ""
    margin: Decimal | None = None  # what `auto` prices are, times the measured cost
    prices: dict[str, PlanPrices | None] = {}  # None: a tier not priced yet
    limits: PlanLimits = PlanLimits()


class Account(BaseModel):
    """The calling key's record, its plan, and this month's spend against its budget."""

    object: str = "account"
    key: ApiKey
    plan: Plan
    month: str
    spent_usd: Decimal
    budget_usd: Decimal | None = None
    remaining_usd: Decimal | None = None


class RequestLogEntry(BaseModel):
    """One request of the log: when it ended, what it used, what it cost, how long it took."""

    id: str
    time: str
    key_id: str | None = None
    model: str | None = None
    tier: str | None = None
    endpoint: str | None = None
    status: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    latency_ms: float | None = None


class KeyRenameParams(RequestModel):
    """The body of PATCH /v1/keys/{id}."""

    name: str
