"""The ledger: usage aggregates per tenant, key, model, tier and day, the month's events, and the
monthly invoices, in Redis; and the server-side script that counts a batch of usage events into
them and acknowledges them in the same step (billing.consumer runs it).

Counting is idempotent by event id (a marker per counted event, set by the same script), so an
event delivered twice (written twice, or claimed from a consumer that died after counting it) is
counted once. Every amount is an integer number of nano-dollars; dollars are exact decimals.

A month closes `billing.close_after_s` after it ends (UTC): its invoice is computed once from
its aggregates and kept as it is. An event billed to a closed month is counted on the day it
arrives, in the next open month, on a line of its own marked with the month it belongs to
(`late_from`).

Redis keys (zerolayer.store.keyspace; hash-tagged by tenant): bill:{t}:day:<YYYY-MM-DD> (hash:
"<cell>|<measure>" -> integer, a cell being key id|plan|model|tier|prices|late month),
bill:{t}:events:<YYYY-MM> (list of the month's events, for export), bill:{t}:months (set of months
with usage), bill:{t}:applied:<day> (set of the ids counted, by the events' day),
bill:{t}:closed:<YYYY-MM> (when it closed), bill:{t}:invoice:<YYYY-MM> (the closed invoice's JSON);
bill:tenants (set), and bill:rejected (events that could not be read, kept for an operator)."""

from __future__ import annotations

import calendar
import csv
import io
import json
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import redis.asyncio as aioredis

from zerolayer.billing.events import STATUSES, rfc3339
from zerolayer.config import nanos_usd, usd_text
from zerolayer.errors import InvalidRequest, ObjectNotFound
from zerolayer.store import keyspace
from zerolayer.store.signing import Signer

__all__ = [
    "APPLY_LUA",
    "READ_LUA",
    "GROUPS",
    "REQUEST_COLUMNS",
    "Ledger",
    "Totals",
    "invoice_csv",
    "month_bounds",
    "parse_day",
    "parse_month",
    "request_row",
]

TENANTS = keyspace.bill_tenants()
REJECTED = keyspace.bill_rejected()
MEASURES = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "cost_nanos")
GROUPS = ("day", "key", "model", "tier")
MAX_DAYS = 400  # the longest range /v1/usage reads at once
SCAN_MOST = 5000  # the most events one page of the request log reads

# count(stream, group, dedupe ttl, today (YYYY-MM-DD), entries, dedupe): count a batch of stream
# entries ({id, event json, summary line} triples, see billing.events; an empty json is an entry
# that is gone: acknowledged only) and acknowledge them; how many were counted. Increments are
# summed per aggregate cell over the batch and written once per cell and measure. With `dedupe`
# (entries delivered outside this script: claimed ones), an id counted before is skipped
# (bill:{t}:applied:<day>, the ids counted that way); entries the read script takes are
# counted and acknowledged in the same step as their read, so they are never seen twice.
COUNT_LUA = """
local MEASURES = {'prompt_tokens', 'cached_prompt_tokens', 'completion_tokens', 'cost_nanos'}
local FIELDS = {'id', 'tenant', 'key_id', 'plan', 'model', 'tier', 'sig', 'status', 'day',
  'prompt_tokens', 'cached_prompt_tokens', 'completion_tokens', 'cost_nanos'}

-- what counting needs of an event: from its summary line when it has one (no JSON to decode),
-- else from its JSON; nil if it cannot be read
local function read(text, line)
  if line ~= '' then
    local d, at, n = {}, 1, 0
    while true do
      local j = string.find(line, '\\31', at, true)
      n = n + 1
      d[FIELDS[n] or n] = string.sub(line, at, (j or 0) - 1)
      if not j then break end
      at = j + 1
    end
    if n == #FIELDS then return d end
  end
  local ok, e = pcall(cjson.decode, text)
  local d = ok and type(e) == 'table' and e.data
  if type(d) ~= 'table' or type(d.tenant) ~= 'string' or type(d.day) ~= 'string'
      or type(e.id) ~= 'string' then
    return nil
  end
  d.id, d.sig = e.id, ''
  local p = d.prices
  if type(p) == 'table' then
    d.sig = p.prompt_per_1k .. '/' .. p.cached_prompt_per_1k .. '/' .. p.completion_per_1k
  end
  return d
end

local function count(stream, group, ttl, today, entries, dedupe)
  local cells, corder = {}, {}        -- "hash\\0cell" -> sums, in first-seen order
  local lists, lorder = {}, {}        -- month list -> events
  local closed, sets, tenants, months = {}, {}, {}, {}
  local ids = {}
  local counted = 0
  for _, entry in ipairs(entries) do
    local text = entry[2]
    ids[#ids + 1] = entry[1]
    local d = text ~= '' and read(text, entry[3] or '')
    if text ~= '' and not d then
      redis.call('RPUSH', '@REJECTED@', text)
    elseif d then
      local base = '@BILL@{' .. d.tenant .. '}:'
      local new = true
      if dedupe then
        local seen = base .. 'applied:' .. d.day
        sets[seen] = true
        new = redis.call('SADD', seen, d.id) == 1
      end
      if new then
        local day, late = d.day, ''
        local month = string.sub(day, 1, 7)
        local ck = base .. 'closed:' .. month
        if closed[ck] == nil then closed[ck] = redis.call('EXISTS', ck) == 1 end
        if closed[ck] then
          late, day, month = month, today, string.sub(today, 1, 7)
          local at = string.find(text, '"data":{', 1, true)
          if at then
            local mark = '"late_from":"' .. late .. '","billed_day":"' .. today .. '",'
            text = string.sub(text, 1, at + 7) .. mark .. string.sub(text, at + 8)
          end
        end
        local key = base .. 'day:' .. day .. '\\0' .. d.key_id .. '|' .. d.plan .. '|' .. d.model
          .. '|' .. d.tier .. '|' .. d.sig .. '|' .. late .. '|'
        local c = cells[key]
        if not c then
          c = {requests = 0, prompt_tokens = 0, cached_prompt_tokens = 0, completion_tokens = 0,
            cost_nanos = 0}
          cells[key] = c
          corder[#corder + 1] = key
        end
        c.requests = c.requests + 1
        c[d.status] = (c[d.status] or 0) + 1
        for _, m in ipairs(MEASURES) do c[m] = c[m] + (tonumber(d[m]) or 0) end
        local lname = base .. 'events:' .. month
        local l = lists[lname]
        if not l then l = {}; lists[lname] = l; lorder[#lorder + 1] = lname end
        l[#l + 1] = text
        tenants[d.tenant] = true
        local mname = base .. 'months'
        months[mname] = months[mname] or {}
        months[mname][month] = true
        counted = counted + 1
      end
    end
  end
  for _, key in ipairs(corder) do
    local z = string.find(key, '\\0', 1, true)
    local h, cell = string.sub(key, 1, z - 1), string.sub(key, z + 1)
    for f, v in pairs(cells[key]) do
      if v ~= 0 then redis.call('HINCRBY', h, cell .. f, v) end
    end
  end
  for _, name in ipairs(lorder) do
    local l = lists[name]
    for i = 1, #l, 4000 do redis.call('RPUSH', name, unpack(l, i, math.min(i + 3999, #l))) end
  end
  for name in pairs(sets) do redis.call('EXPIRE', name, ttl) end
  for t in pairs(tenants) do redis.call('SADD', '@TENANTS@', t) end
  for name, m in pairs(months) do
    for month in pairs(m) do redis.call('SADD', name, month) end
  end
  if dedupe then  -- delivered entries: acknowledged (the read script moves the group instead)
    for i = 1, #ids, 4000 do
      redis.call('XACK', stream, group, unpack(ids, i, math.min(i + 3999, #ids)))
    end
  end
  return counted
end
"""
# the script's key names (it derives a tenant's from the prefix, as _base below does)
COUNT_LUA = (
    COUNT_LUA.replace("@BILL@", keyspace.bill_prefix())
    .replace("@TENANTS@", keyspace.bill_tenants())
    .replace("@REJECTED@", keyspace.bill_rejected())
)

# ARGV: stream, group, dedupe ttl, today, then (entry id, event json, summary line) triples
APPLY_LUA = (
    COUNT_LUA
    + """
local entries = {}
for i = 5, #ARGV, 3 do entries[#entries + 1] = {ARGV[i], ARGV[i + 1], ARGV[i + 2]} end
return count(ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], entries, true)
"""
)

# ARGV: stream, group, dedupe ttl, today, most: the group's next `most` entries, counted, and
# the group's position (its last delivered id and entries read) moved past them, in one step:
# that move is their acknowledgement, so no entry is ever delivered and left uncounted, and
# nothing enters the pending list. {counted, read, the last id read, or the stream's last id}
READ_LUA = (
    COUNT_LUA
    + """
local stream, group = ARGV[1], ARGV[2]
local last, done
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  if f['name'] == group then last, done = f['last-delivered-id'], f['entries-read'] end
end
if not last then return redis.error_reply('NOGROUP no consumer group ' .. group) end
local got = redis.call('XRANGE', stream, '(' .. last, '+', 'COUNT', tonumber(ARGV[5]))
if #got == 0 then
  local tail = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  return {0, 0, tail[1] and tail[1][1] or ''}
end
local entries = {}
for _, e in ipairs(got) do
  local text, line = '', ''
  for j = 1, #e[2], 2 do
    if e[2][j] == 'e' then text = e[2][j + 1] elseif e[2][j] == 'a' then line = e[2][j + 1] end
  end
  entries[#entries + 1] = {e[1], text, line}
end
local n = count(stream, group, tonumber(ARGV[3]), ARGV[4], entries, false)
local upto = got[#got][1]
if type(done) == 'number' then
  redis.call('XGROUP', 'SETID', stream, group, upto, 'ENTRIESREAD', done + #got)
else
  redis.call('XGROUP', 'SETID', stream, group, upto)
end
return {n, #got, upto}
"""
)


_text = keyspace.text


def parse_day(value: str, param: str) -> date:
    """A YYYY-MM-DD query parameter (400 naming it otherwise)."""
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise InvalidRequest(
            f"{param} must be a date, YYYY-MM-DD (got {value!r})", param=param
        ) from exc


def parse_month(value: str) -> str:
    """A YYYY-MM path parameter (400 otherwise)."""
    try:
        datetime.strptime(value, "%Y-%m")
    except ValueError as exc:
        raise InvalidRequest(f"a month is YYYY-MM (got {value!r})", param="month") from exc
    if len(value) != 7:
        raise InvalidRequest(f"a month is YYYY-MM (got {value!r})", param="month")
    return value


def month_bounds(month: str) -> tuple[float, float]:
    """Start and end (exclusive) of a UTC month, as times."""
    y, m = int(month[:4]), int(month[5:])
    start = datetime(y, m, 1, tzinfo=timezone.utc)
    end = datetime(y + (m == 12), m % 12 + 1, 1, tzinfo=timezone.utc)
    return start.timestamp(), end.timestamp()


def _days(first: date, last: date) -> list[str]:
    return [(first + timedelta(n)).isoformat() for n in range((last - first).days + 1)]


def _month_days(month: str) -> list[str]:
    y, m = int(month[:4]), int(month[5:])
    return _days(date(y, m, 1), date(y, m, calendar.monthrange(y, m)[1]))


@dataclass
class Totals:
    """Requests by status and tokens and cost of a set of cells."""

    requests: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_nanos: int = 0

    def add(self, measure: str, value: int) -> None:
        if measure == "requests":
            self.requests += value
        elif measure in MEASURES:
            setattr(self, measure, getattr(self, measure) + value)
        elif measure in STATUSES:
            self.statuses[measure] = self.statuses.get(measure, 0) + value

    def body(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "statuses": dict(sorted(self.statuses.items())),
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "cost_usd": usd_text(self.cost_nanos),
        }


@dataclass(frozen=True)
class Cell:
    """One aggregate cell of a day: whose, which tier, at which prices, late from which month."""

    day: str
    key_id: str
    plan: str
    model: str
    tier: str
    prices: str  # "prompt/cached/completion" USD per 1K, "" for a free call
    late_from: str


def _cells(day: str, raw: dict[Any, Any]) -> Iterable[tuple[Cell, str, int]]:
    for name, value in raw.items():
        parts = _text(name).split("|")
        if len(parts) != 7:
            continue
        key_id, plan, model, tier, prices, late, measure = parts
        yield Cell(day, key_id, plan, model, tier, prices, late), measure, int(value)


def _prices(sig: str) -> dict[str, str] | None:
    if not sig:
        return None
    prompt, cached, completion = sig.split("/")
    return {
        "prompt_per_1k": prompt,
        "cached_prompt_per_1k": cached,
        "completion_per_1k": completion,
    }


def _cents(nanos: int) -> str:
    return str(nanos_usd(nanos).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def invoice_csv(invoice: dict[str, Any]) -> str:
    """An invoice's line items as CSV (one row per line, then a total row)."""
    out = io.StringIO()
    names = [
        "month",
        "model",
        "tier",
        "plan",
        "late_from",
        "prompt_per_1k",
        "cached_prompt_per_1k",
        "completion_per_1k",
        "requests",
        "prompt_tokens",
        "cached_prompt_tokens",
        "completion_tokens",
        "amount_usd",
    ]
    w = csv.DictWriter(out, names, lineterminator="\n")
    w.writeheader()
    for line in invoice["lines"]:
        prices = line["prices"] or {}
        w.writerow(
            {
                "month": invoice["month"],
                **{k: line[k] for k in ("model", "tier", "plan", "requests")},
                "late_from": line.get("late_from") or "",
                **{k: prices.get(k, "0") for k in names[5:8]},
                **{k: line[k] for k in names[9:12]},
                "amount_usd": line["amount_usd"],
            }
        )
    w.writerow({"month": invoice["month"], "model": "total", "amount_usd": invoice["total_usd"]})
    return out.getvalue()


EVENT_COLUMNS = (
    "id",
    "time",
    "tenant",
    "key_id",
    "plan",
    "model",
    "tier",
    "endpoint",
    "status",
    "day",
    "started_at",
    "ended_at",
    "prompt_tokens",
    "cached_prompt_tokens",
    "completion_tokens",
    "model_calls",
    "cost_usd",
    "late_from",
    "billed_day",
)


REQUEST_COLUMNS = (
    "id",
    "time",
    "key_id",
    "model",
    "tier",
    "endpoint",
    "status",
    "prompt_tokens",
    "cached_prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_ms",
)


def request_row(event: dict[str, Any]) -> dict[str, Any]:
    """One usage event as a line of the request log."""
    d = event.get("data") or {}
    return {
        "id": event.get("id"),
        "time": event.get("time"),
        **{k: d.get(k) for k in REQUEST_COLUMNS[2:-1]},
        "latency_ms": d.get("duration_ms"),
    }


def _month_of(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m")


def _previous_month(month: str) -> str:
    y, m = int(month[:4]), int(month[5:7])
    return f"{y - (m == 1):04d}-{(m - 2) % 12 + 1:02d}"


def _epoch(text: str) -> float:
    try:
        return (
            datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
            .replace(tzinfo=timezone.utc)
            .timestamp()
        )
    except ValueError:
        return 0.0


def _cursor(text: str) -> tuple[str, int]:
    month, _, at = text.partition(":")
    try:
        parse_month(month)
        position = int(at)
    except (InvalidRequest, ValueError):
        position = -2
    if position < -1:
        raise InvalidRequest(
            f"cursor {text!r} is not one a page of the request log gave", param="cursor"
        )
    return month, position


def request_log_scope(tenant: str, key_id: str | None) -> str:
    """What a request log cursor is signed for: the tenant and the key filter of its list."""
    return f"requests\0{tenant}\0{key_id or ''}"


def event_row(text: str) -> dict[str, Any]:
    """One exported event as a flat CSV row."""
    e = json.loads(text)
    d = e.get("data") or {}
    return {
        "id": e.get("id"),
        "time": e.get("time"),
        **{k: d.get(k, "") for k in EVENT_COLUMNS[2:]},
    }


class Ledger:
    """Reads (and closes) what the billing consumer counted: usage, invoices, events."""

    def __init__(self, client: aioredis.Redis, close_after_s: int = 3600):
        self.client = client
        self.close_after_s = close_after_s
        self.signer = Signer(client)  # the request log's page cursors

    @staticmethod
    def _base(tenant: str) -> str:
        return keyspace.bill_tenant(tenant)

    async def _read(self, tenant: str, days: list[str]) -> list[tuple[Cell, str, int]]:
        base = self._base(tenant)
        async with self.client.pipeline(transaction=False) as pipe:
            for d in days:
                pipe.hgetall(f"{base}day:{d}")
            got = await pipe.execute()
        return [c for d, raw in zip(days, got, strict=True) for c in _cells(d, raw)]

    async def usage(
        self,
        tenant: str,
        first: date,
        last: date,
        group_by: list[str],
        key_id: str | None = None,
    ) -> dict[str, Any]:
        """Usage of a tenant between two days (both included), grouped."""
        if last < first:
            raise InvalidRequest("end is before start", param="end")
        if (last - first).days >= MAX_DAYS:
            raise InvalidRequest(f"at most {MAX_DAYS} days at once", param="start")
        wrong = [g for g in group_by if g not in GROUPS]
        if wrong:
            raise InvalidRequest(
                f"group_by takes {', '.join(GROUPS)} (got {', '.join(wrong)})", param="group_by"
            )
        rows: dict[tuple[str, ...], Totals] = {}
        total = Totals()
        for cell, measure, value in await self._read(tenant, _days(first, last)):
            if key_id is not None and cell.key_id != key_id:
                continue
            fields = {"day": cell.day, "key": cell.key_id, "model": cell.model, "tier": cell.tier}
            group = tuple(fields[g] for g in group_by)
            rows.setdefault(group, Totals()).add(measure, value)
            total.add(measure, value)
        data = [
            {**dict(zip(group_by, group, strict=True)), **t.body()}
            for group, t in sorted(rows.items())
        ]
        return {
            "object": "usage",
            "tenant": tenant,
            "start": first.isoformat(),
            "end": last.isoformat(),
            "group_by": group_by,
            "data": data,
            "totals": total.body(),
        }

    async def months(self, tenant: str) -> list[str]:
        return sorted(_text(m) for m in await self.client.smembers(self._base(tenant) + "months"))

    async def tenants(self) -> list[str]:
        return sorted(_text(t) for t in await self.client.smembers(TENANTS))

    def closes_at(self, month: str) -> float:
        return month_bounds(month)[1] + self.close_after_s

    async def invoice(self, tenant: str, month: str, now: float | None = None) -> dict[str, Any]:
        """A month's invoice: closed (kept as it was when it closed) or open (so far)."""
        base = self._base(tenant)
        kept = await self.client.get(base + "invoice:" + month)
        if kept is not None:
            return dict(json.loads(kept))
        closed = await self.client.get(base + "closed:" + month)
        current = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
        if (
            closed is None
            and month != current.strftime("%Y-%m")  # this month's is there from its start
            and month not in await self.months(tenant)
        ):
            raise ObjectNotFound(f"no invoice for {month}", param="month")
        inv = await self._compute(tenant, month, closed)
        if closed is not None:  # closed, but not kept yet (the closer stopped in between)
            await self.client.set(base + "invoice:" + month, json.dumps(inv), nx=True)
        return inv

    async def _compute(self, tenant: str, month: str, closed: Any) -> dict[str, Any]:
        lines: dict[tuple[str, ...], Totals] = {}
        for cell, measure, value in await self._read(tenant, _month_days(month)):
            key = (cell.model, cell.tier, cell.plan, cell.prices, cell.late_from)
            lines.setdefault(key, Totals()).add(measure, value)
        items = []
        subtotal = 0
        for (model, tier, plan, prices, late), t in sorted(lines.items()):
            subtotal += t.cost_nanos
            items.append(
                {
                    "model": model,
                    "tier": tier,
                    "plan": plan,
                    "prices": _prices(prices),
                    "late_from": late or None,
                    "requests": t.requests,
                    "statuses": dict(sorted(t.statuses.items())),
                    "prompt_tokens": t.prompt_tokens,
                    "cached_prompt_tokens": t.cached_prompt_tokens,
                    "completion_tokens": t.completion_tokens,
                    "amount_usd": usd_text(t.cost_nanos),
                }
            )
        start, end = month_bounds(month)
        return {
            "object": "invoice",
            "id": f"inv_{tenant}_{month}",
            "tenant": tenant,
            "month": month,
            "period": {"start": rfc3339(start), "end": rfc3339(end)},
            "status": "closed" if closed is not None else "open",
            "closed_at": rfc3339(float(closed)) if closed is not None else None,
            "closes_at": rfc3339(self.closes_at(month)),
            "currency": "usd",
            "lines": items,
            "subtotal_usd": usd_text(subtotal),
            "total_usd": _cents(subtotal),  # what is due: the exact subtotal to the cent
            "subtotal_nanos": subtotal,
        }

    async def invoices(self, tenant: str) -> list[dict[str, Any]]:
        """Every month with usage, its status and total (newest first)."""
        out = []
        for month in reversed(await self.months(tenant)):
            inv = await self.invoice(tenant, month)
            out.append(
                {
                    "object": "invoice",
                    "id": inv["id"],
                    "month": month,
                    "status": inv["status"],
                    "total_usd": inv["total_usd"],
                }
            )
        return out

    async def close_due(self, now: float | None = None) -> list[tuple[str, str]]:
        """Close every month whose time has come; the (tenant, month) pairs closed now."""
        now = time.time() if now is None else now
        done = []
        for tenant in await self.tenants():
            for month in await self.months(tenant):
                if now >= self.closes_at(month) and await self.close(tenant, month, now):
                    done.append((tenant, month))
        return done

    async def close(self, tenant: str, month: str, now: float | None = None) -> bool:
        """Close a month: from now on its events go to the next one. True if it closed now."""
        base = self._base(tenant)
        now = time.time() if now is None else now
        if not await self.client.set(base + "closed:" + month, repr(now), nx=True):
            return False
        await self.invoice(tenant, month)  # computed and kept once
        return True

    async def recent(
        self,
        tenant: str,
        now: float,
        days: int,
        limit: int,
        cursor: str | None = None,
        key_id: str | None = None,
        page: int = 200,
        most: int = SCAN_MOST,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The request log: the tenant's events of the last `days` days, newest first, as
        rows (REQUEST_COLUMNS), `limit` at most, after `cursor` (the previous page's
        next_cursor: a token signed for this tenant and key filter; anything else is a 400);
        and the next page's cursor (None: no more). Events are listed in the order they were
        counted, close to the order they ended; the walk back stops at the first one a day
        older than the range. One call reads at most `most` events: a page filtered by key
        may come back shorter than `limit`, with a cursor, when they were not the key's."""
        scope = request_log_scope(tenant, key_id)
        cutoff = now - days * 86400
        first_month, this_month = _month_of(cutoff), _month_of(now)
        month: str
        at: int | None
        if cursor is None:
            month, at = this_month, None
        else:
            month, at = _cursor(await self.signer.open(scope, cursor))
            month = min(month, this_month)
        rows: list[dict[str, Any]] = []
        read = 0

        async def next_page() -> str | None:
            more = (at is not None and at >= 0) or month > first_month
            return await self.signer.sign(scope, f"{month}:{at}") if more else None

        while True:
            name = self._base(tenant) + "events:" + month
            last = await self.client.llen(name) - 1
            at = last if at is None else min(at, last)
            while at >= 0:
                got = await self.client.lrange(name, max(0, at - page + 1), at)
                if not got:  # the list shrank meanwhile: nothing older in this month
                    break
                for text in reversed(got):
                    e = json.loads(text)
                    ended = _epoch(e.get("time", ""))
                    if ended < cutoff - 86400:
                        return rows, None
                    at -= 1
                    read += 1
                    data = e.get("data") or {}
                    if ended >= cutoff and (key_id is None or data.get("key_id") == key_id):
                        rows.append(request_row(e))
                    if len(rows) == limit or read >= most:
                        return rows, await next_page()
            if month <= first_month:
                return rows, None
            month, at = _previous_month(month), None

    async def events(self, tenant: str, month: str, page: int = 1000) -> AsyncIterator[str]:
        """The month's events as they were counted (JSON text), oldest first."""
        name = self._base(tenant) + "events:" + month
        at = 0
        while True:
            got = await self.client.lrange(name, at, at + page - 1)
            for text in got:
                yield _text(text)
            if len(got) < page:
                return
            at += page
