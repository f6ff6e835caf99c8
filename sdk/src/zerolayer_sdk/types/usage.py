"""GET /v1/usage: metered usage and cost from the billing ledger."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from .._models import BaseModel

__all__ = ["UsageTotals", "UsageRow", "UsageReport"]


class UsageTotals(BaseModel):
    """Requests by status, tokens and exact cost of a set of requests."""

    requests: int = 0
    statuses: dict[str, int] = {}
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: Decimal = Decimal(0)


class UsageRow(UsageTotals):
    """One group of a usage report: the group's fields (day, key, model, tier) as asked."""

    day: str | None = None
    key: str | None = None
    model: str | None = None
    tier: str | None = None


class UsageReport(BaseModel):
    """Usage of the caller's tenant between two days (both included), grouped."""

    object: str = "usage"
    tenant: str
    start: date
    end: date
    group_by: list[str] = []
    data: list[UsageRow] = []
    totals: UsageTotals
