"""client.usage and client.invoices: the caller's tenant's metered usage, its invoices and the
month's usage events for export. The admin API reads any tenant's through the same calls
(client.admin.tenants)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any, Literal, cast

import httpx

from .._base_client import Call, json_as
from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.invoices import Invoice, InvoiceSummary
from ..types.usage import UsageReport

__all__ = [
    "Usage",
    "AsyncUsage",
    "Invoices",
    "AsyncInvoices",
    "usage_call",
    "invoice_call",
    "export_call",
]

GroupBy = str | Sequence[Literal["day", "key", "model", "tier"]]


def _where(tenant: str | None) -> tuple[str, dict[str, Any]]:
    """The base path of a tenant's billing routes and the call's flags: the caller's (under
    /v1) or, with the admin key, any tenant's (/admin/tenants/T)."""
    if tenant is None:
        return "", {}
    return f"/admin/tenants/{tenant}", {"admin": True, "root": True}


def usage_call(
    tenant: str | None,
    start: date | str | None,
    end: date | str | None,
    group_by: GroupBy | None,
    key_id: str | None,
) -> Call:
    """GET .../usage."""
    prefix, flags = _where(tenant)
    groups = group_by if group_by is None or isinstance(group_by, str) else ",".join(group_by)
    params = {
        "start": str(start) if start is not None else None,
        "end": str(end) if end is not None else None,
        "group_by": groups,
        "key_id": key_id,
    }
    return Call("GET", prefix + "/usage", parse=json_as(UsageReport), params=params, **flags)


def invoice_call(tenant: str | None, month: str) -> Call:
    """GET .../invoices/{month}."""
    prefix, flags = _where(tenant)
    return Call("GET", f"{prefix}/invoices/{month}", parse=json_as(Invoice), **flags)


def export_call(tenant: str | None, month: str, format: str) -> Call:
    """GET .../invoices/{month}/events?format=: the month's usage events as text."""
    prefix, flags = _where(tenant)

    def text(response: httpx.Response) -> str:
        return response.text

    path = f"{prefix}/invoices/{month}/events"
    return Call("GET", path, parse=text, params={"format": format}, **flags)


def invoices_path(tenant: str | None) -> tuple[str, dict[str, Any]]:
    """GET .../invoices: its path and call flags."""
    prefix, flags = _where(tenant)
    return prefix + "/invoices", flags


class Usage(SyncAPIResource):
    """client.usage"""

    def retrieve(
        self,
        *,
        start: date | str | None = None,
        end: date | str | None = None,
        group_by: GroupBy | None = None,
        key_id: str | None = None,
    ) -> UsageReport:
        """Usage and cost of the key's tenant between two days (default: this month so far),
        grouped by day (default), key, model and/or tier; key_id: one key's only."""
        return cast("UsageReport", self._send(usage_call(None, start, end, group_by, key_id)))


class AsyncUsage(AsyncAPIResource):
    """client.usage (async)"""

    async def retrieve(
        self,
        *,
        start: date | str | None = None,
        end: date | str | None = None,
        group_by: GroupBy | None = None,
        key_id: str | None = None,
    ) -> UsageReport:
        """Usage and cost of the key's tenant (see Usage.retrieve)."""
        return cast("UsageReport", await self._send(usage_call(None, start, end, group_by, key_id)))


class Invoices(SyncAPIResource):
    """client.invoices"""

    def list(self) -> Page[InvoiceSummary]:
        """Every month with usage, newest first: its status (open, closed) and total."""
        path, flags = invoices_path(None)
        return self._list(path, InvoiceSummary, **flags)

    def retrieve(self, month: str) -> Invoice:
        """A month's invoice (YYYY-MM) with its line items."""
        return cast("Invoice", self._send(invoice_call(None, month)))

    def export(self, month: str, *, format: Literal["jsonl", "csv"] = "jsonl") -> str:
        """The month's usage events, one per request, for an external billing system."""
        return cast("str", self._send(export_call(None, month, format)))


class AsyncInvoices(AsyncAPIResource):
    """client.invoices (async)"""

    def list(self) -> AsyncPaginator[InvoiceSummary]:
        """Every month with usage (see Invoices.list)."""
        path, flags = invoices_path(None)
        return self._list(path, InvoiceSummary, **flags)

    async def retrieve(self, month: str) -> Invoice:
        """A month's invoice (YYYY-MM) with its line items."""
        return cast("Invoice", await self._send(invoice_call(None, month)))

    async def export(self, month: str, *, format: Literal["jsonl", "csv"] = "jsonl") -> str:
        """The month's usage events, one per request, for an external billing system."""
        return cast("str", await self._send(export_call(None, month, format)))
