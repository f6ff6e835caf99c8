"""Usage and invoices over HTTP, read from the billing ledger: under /v1 for the caller's tenant,
and under /admin/tenants/{tenant} for any tenant (the admin key).

  GET .../usage?start=YYYY-MM-DD&end=YYYY-MM-DD&group_by=day,tier&key_id=
      (defaults: the current month so far, by day; group_by takes day, key, model, tier)
  GET .../invoices                          every month with usage: status and total
  GET .../invoices/{YYYY-MM}[?format=csv]   line items per model, tier and prices, totals
  GET .../invoices/{YYYY-MM}/events?format=jsonl|csv   the month's usage events, for export
  GET .../requests?days=7&limit=50&cursor=&key_id=&format=json|csv
      the request log: the last days' requests, newest first (time, model, tier, status,
      tokens, cost, latency), a page at a time; as CSV, the whole range
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import date, datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from zerolayer.billing.ledger import (
    EVENT_COLUMNS,
    REQUEST_COLUMNS,
    event_row,
    invoice_csv,
    parse_day,
    parse_month,
)
from zerolayer.errors import InvalidRequest
from zerolayer.gateway.admin import key_call
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import AdminKeys, LedgerDep, current_tenant
from zerolayer.gateway.http import query_value
from zerolayer.gateway.replies import (
    Invoice,
    InvoiceList,
    RequestLog,
    UsageReport,
    json_reply,
    streamed_reply,
)

__all__ = ["Who", "admin_router", "router"]

# who: a dependency giving the tenant whose usage a request may read (raises when it may read
# none): the caller's own tenant, or for the admin key the path's
Who = Callable[..., Awaitable[str]]


def _format(request: Request, allowed: tuple[str, ...]) -> str:
    fmt = request.query_params.get("format", allowed[0])
    if fmt not in allowed:
        raise InvalidRequest(f"format takes {', '.join(allowed)} (got {fmt!r})", param="format")
    return fmt


def _range(request: Request, now: float) -> tuple[date, date]:
    q = request.query_params
    today = datetime.fromtimestamp(now, tz=timezone.utc).date()
    first = parse_day(q["start"], "start") if "start" in q else today.replace(day=1)
    last = parse_day(q["end"], "end") if "end" in q else today
    return first, last


async def _csv_events(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    out = io.StringIO()
    w = csv.DictWriter(out, EVENT_COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    async for text in lines:
        w.writerow(event_row(text))
        yield out.getvalue().encode()
        out.seek(0)
        out.truncate()
    yield out.getvalue().encode()


async def _jsonl(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    async for text in lines:
        yield text.encode() + b"\n"


def _bounded(request: Request, name: str, default: int, low: int, high: int) -> int:
    return query_value(request, name, default, int, lambda v: low <= v <= high, f"{low} to {high}")


LOG_DAYS = 90  # how far back the request log reads
LOG_CSV_ROWS = 100_000  # the most rows one CSV export of it holds


def _billing_routes(base: str, who: Who) -> APIRouter:
    """The usage and invoice routes under `base`, for the tenant `who` gives."""
    router = APIRouter(route_class=BodyRoute)
    clock = time.time

    @router.get(base + "/usage", responses=json_reply(UsageReport))
    async def usage(
        request: Request, *, tenant: str = Depends(who), ledger: LedgerDep
    ) -> dict[str, Any]:
        first, last = _range(request, clock())
        groups = [g for g in request.query_params.get("group_by", "day").split(",") if g]
        key_id = request.query_params.get("key_id") or None
        return await ledger.usage(tenant, first, last, groups, key_id)

    @router.get(
        base + "/requests",
        responses=streamed_reply(RequestLog, "the log as CSV (?format=csv)", "text/csv"),
    )
    async def requests_log(
        request: Request, *, tenant: str = Depends(who), ledger: LedgerDep
    ) -> Response:
        fmt = _format(request, ("json", "csv"))
        days = _bounded(request, "days", 7, 1, LOG_DAYS)
        key_id = request.query_params.get("key_id") or None
        now = clock()
        if fmt == "json":
            limit = _bounded(request, "limit", 50, 1, 500)
            cursor = request.query_params.get("cursor") or None
            rows, more = await ledger.recent(tenant, now, days, limit, cursor, key_id)
            body = {"object": "list", "data": rows, "has_more": more is not None}
            return Response(
                json.dumps({**body, "next_cursor": more}), media_type="application/json"
            )

        async def lines() -> AsyncIterator[bytes]:
            out = io.StringIO()
            w = csv.DictWriter(out, REQUEST_COLUMNS, lineterminator="\n")
            w.writeheader()
            cursor, sent = None, 0
            while sent < LOG_CSV_ROWS:
                rows, cursor = await ledger.recent(tenant, now, days, 1000, cursor, key_id)
                w.writerows(rows)
                sent += len(rows)
                yield out.getvalue().encode()
                out.seek(0)
                out.truncate()
                if cursor is None:
                    break

        return StreamingResponse(
            lines(),
            media_type="text/csv",
            headers={"content-disposition": f'attachment; filename="requests-{days}d.csv"'},
        )

    @router.get(base + "/invoices", responses=json_reply(InvoiceList))
    async def invoices(*, tenant: str = Depends(who), ledger: LedgerDep) -> dict[str, Any]:
        return {"object": "list", "data": await ledger.invoices(tenant)}

    @router.get(
        base + "/invoices/{month}",
        responses=streamed_reply(Invoice, "the invoice as CSV (?format=csv)", "text/csv"),
    )
    async def invoice(
        request: Request, month: str, *, tenant: str = Depends(who), ledger: LedgerDep
    ) -> Response:
        fmt = _format(request, ("json", "csv"))
        inv = await ledger.invoice(tenant, parse_month(month), clock())
        if fmt == "csv":
            return PlainTextResponse(
                invoice_csv(inv),
                media_type="text/csv",
                headers={"content-disposition": f'attachment; filename="invoice-{month}.csv"'},
            )
        return Response(json.dumps(inv), media_type="application/json")

    @router.get(base + "/invoices/{month}/events")
    async def events(
        request: Request, month: str, *, tenant: str = Depends(who), ledger: LedgerDep
    ) -> Response:
        fmt = _format(request, ("jsonl", "csv"))
        await ledger.invoice(tenant, parse_month(month), clock())  # 404 for a month without one
        lines = ledger.events(tenant, month)
        if fmt == "csv":
            return StreamingResponse(
                _csv_events(lines),
                media_type="text/csv",
                headers={"content-disposition": f'attachment; filename="usage-{month}.csv"'},
            )
        return StreamingResponse(
            _jsonl(lines),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="usage-{month}.jsonl"'},
        )

    return router


async def _admin_tenant(store: AdminKeys, tenant: str) -> str:
    """The path's tenant, for the admin key (404 for a tenant without keys)."""
    await key_call(store.tenant_keys, tenant)
    return tenant


# the caller's own tenant under /v1; any tenant under /admin/tenants/{tenant}, for the admin key
router = _billing_routes("/v1", current_tenant)
admin_router = _billing_routes("/admin/tenants/{tenant}", _admin_tenant)
