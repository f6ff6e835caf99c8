"""Invoices: a month's line items per model, tier and price, exact to the nano-dollar."""

from __future__ import annotations

from decimal import Decimal

from .._models import BaseModel

__all__ = ["InvoicePrices", "InvoiceLine", "InvoicePeriod", "Invoice", "InvoiceSummary"]


class InvoicePrices(BaseModel):
    """USD per 1K tokens of a line."""

    prompt_per_1k: Decimal
    cached_prompt_per_1k: Decimal | None = None
    completion_per_1k: Decimal


class InvoiceLine(BaseModel):
    """Requests of one model, tier, plan and price (late_from: events of a closed month)."""

    model: str
    tier: str
    plan: str | None = None
    prices: InvoicePrices | None = None
    late_from: str | None = None
    requests: int = 0
    statuses: dict[str, int] = {}
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    amount_usd: Decimal = Decimal(0)


class InvoicePeriod(BaseModel):
    """The month's bounds (RFC 3339, UTC)."""

    start: str
    end: str


class Invoice(BaseModel):
    """A month's invoice: open (so far) or closed (final)."""

    object: str = "invoice"
    id: str
    tenant: str | None = None
    month: str
    period: InvoicePeriod | None = None
    status: str
    closed_at: str | None = None
    closes_at: str | None = None
    currency: str = "usd"
    lines: list[InvoiceLine] = []
    subtotal_usd: Decimal = Decimal(0)
    total_usd: Decimal = Decimal(0)
    subtotal_nanos: int = 0


class InvoiceSummary(BaseModel):
    """A month with usage: its invoice's status and total."""

    object: str = "invoice"
    id: str
    month: str
    status: str
    total_usd: Decimal = Decimal(0)
