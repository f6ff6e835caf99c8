"""Events counted once into aggregates, invoices and exports, on a real redis-server."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
import redis.asyncio as aioredis
from zerolayer.billing.events import STREAM, EventWriter
from zerolayer.billing.ledger import Ledger, invoice_csv
from zerolayer.errors import InvalidRequest, ObjectNotFound

from tests.billing.conftest import DAY_S, DEC_02, NOV_30, PRICE, biller, drain, event, tenant


def test_an_event_is_cloudevents_shaped_with_exact_money() -> None:
    ev = event("t", prompt=1000, cached=400, completion=500).cloudevent()
    assert ev["specversion"] == "1.0" and ev["type"] == "ai.zerolayer.usage.v1"
    assert ev["subject"] == "t" and ev["time"].endswith("Z") and ev["id"].startswith("chatcmpl-")
    d = ev["data"]
    # 600 fresh prompt tokens at 0.10, 400 cached at 0.05, 500 completion at 0.30 per 1K
    assert d["cost_usd"] == "0.23" and d["cost_nanos"] == 230_000_000
    assert d["prices"] == {
        "prompt_per_1k": "0.10",
        "cached_prompt_per_1k": "0.05",
        "completion_per_1k": "0.30",
    }
    refused = event("t", status="rate_limited").cloudevent()["data"]
    assert refused["cost_nanos"] == 0 and refused["cost_usd"] == "0.00"


def test_the_same_event_written_ten_times_at_once_and_after_a_restart_counts_once(
    run: Any, redis_url: str
) -> None:
    t = tenant()
    ev = event(t)

    async def body(client: aioredis.Redis, writer: EventWriter) -> None:
        writers = [EventWriter(aioredis.from_url(redis_url), 3600) for _ in range(10)]
        added = await asyncio.gather(*(w.write(ev) for w in writers))
        assert sorted(added) == [0] * 9 + [1]
        b = biller(client)
        await drain(b)
        # a new consumer (a billing restart), and the event written again ten times at once
        again = await asyncio.gather(*(w.write(ev) for w in writers))
        assert again == [0] * 10  # its marker refuses every copy
        await drain(biller(client))
        usage = await Ledger(client).usage(t, date(2025, 11, 30), date(2025, 11, 30), ["day"])
        assert usage["totals"]["requests"] == 1
        assert usage["totals"]["cost_usd"] == "0.025"  # 100 x 0.10 + 50 x 0.30 per 1K
        events = [e async for e in Ledger(client).events(t, "2025-11")]
        assert len(events) == 1 and json.loads(events[0])["id"] == ev.id
        # one pending entry claimed by two consumers in turn (the first slow past the claim
        # time): the claim path counts it once
        other = event(t, completion=7)
        entry = [(b"0-1", {b"e": other.json().encode(), b"a": other.line().encode()})]
        slow, fast = biller(client), biller(client)
        assert await fast.count(entry) == 1 and await slow.count(entry) == 0
        usage = await Ledger(client).usage(t, date(2025, 11, 30), date(2025, 11, 30), ["day"])
        assert usage["totals"]["requests"] == 2 and usage["totals"]["completion_tokens"] == 57
        for w in writers:
            await w.client.aclose()

    run(body)


def test_usage_groups_by_day_key_model_and_tier_and_keeps_tenants_apart(run: Any) -> None:
    a, b = tenant(), tenant()

    async def body(client: aioredis.Redis, writer: EventWriter) -> None:
        await writer.write(
            event(a, NOV_30, key_id="k1", tier="baseline"),
            event(a, NOV_30, key_id="k2", tier="masked", completion=10),
            event(a, NOV_30 + DAY_S, key_id="k1", tier="baseline", status="client_disconnect"),
            event(a, NOV_30, key_id="k1", status="rate_limited", prompt=0, completion=0),
            event(b, NOV_30, key_id="k9"),
        )
        await drain(biller(client))
        ledger = Ledger(client)
        first, last = date(2025, 11, 1), date(2025, 12, 31)
        by_day = await ledger.usage(a, first, last, ["day"])
        assert [r["day"] for r in by_day["data"]] == ["2025-11-30", "2025-12-01"]
        assert by_day["data"][0]["requests"] == 3
        assert by_day["data"][0]["statuses"] == {"ok": 2, "rate_limited": 1}
        assert by_day["totals"]["requests"] == 4
        by_tier = await ledger.usage(a, first, last, ["tier"])
        masked = next(r for r in by_tier["data"] if r["tier"] == "masked")
        assert masked["completion_tokens"] == 10 and masked["prompt_tokens"] == 100
        by_key = await ledger.usage(a, first, last, ["key", "day"])
        assert {(r["key"], r["day"]) for r in by_key["data"]} == {
            ("k1", "2025-11-30"),
            ("k2", "2025-11-30"),
            ("k1", "2025-12-01"),
        }
        only = await ledger.usage(a, first, last, ["model"], key_id="k2")
        assert only["totals"]["requests"] == 1
        other = await ledger.usage(b, first, last, ["key"])
        assert [r["key"] for r in other["data"]] == ["k9"]  # none of a's
        with pytest.raises(InvalidRequest):
            await ledger.usage(a, first, last, ["colour"])
        with pytest.raises(InvalidRequest):
            await ledger.usage(a, last, first, ["day"])

    run(body)


def test_an_invoice_lists_lines_per_model_tier_and_price_and_closes_for_good(run: Any) -> None:
    t = tenant()

    async def body(client: aioredis.Redis, writer: EventWriter) -> None:
        await writer.write(
            event(t, NOV_30, prompt=1000, completion=1000),
            event(t, NOV_30, prompt=1000, completion=1000, key_id="k2"),
            event(t, NOV_30, tier="masked", prompt=3, completion=7),
        )
        await drain(biller(client))
        ledger = Ledger(client, close_after_s=3600)
        inv = await ledger.invoice(t, "2025-11", now=NOV_30)
        assert inv["status"] == "open"
        base = next(line for line in inv["lines"] if line["tier"] == "baseline")
        assert base["requests"] == 2 and base["amount_usd"] == "0.80"
        assert base["prices"]["completion_per_1k"] == "0.30"
        masked = next(line for line in inv["lines"] if line["tier"] == "masked")
        assert masked["amount_usd"] == "0.0024"  # 3 x 0.10 + 7 x 0.30 per 1K, exact
        assert inv["subtotal_usd"] == "0.8024" and inv["total_usd"] == "0.80"
        # not yet due an hour after the month: still open; then closed, for good
        assert await ledger.close_due(NOV_30 + DAY_S / 2 + 1800) == []
        assert (t, "2025-11") in await ledger.close_due(NOV_30 + DAY_S / 2 + 3600)
        closed = await ledger.invoice(t, "2025-11")
        assert closed["status"] == "closed" and closed["lines"] == inv["lines"]
        # a late event of November goes to December, marked, and November does not change
        late = event(t, NOV_30 + 3600, prompt=1000, completion=0)
        await writer.write(late)
        await drain(biller(client, clock=DEC_02))
        assert await ledger.invoice(t, "2025-11") == closed
        dec = await ledger.invoice(t, "2025-12", now=DEC_02)
        assert [(line["late_from"], line["amount_usd"]) for line in dec["lines"]] == [
            ("2025-11", "0.10")
        ]
        exported = [json.loads(e) async for e in ledger.events(t, "2025-12")]
        assert exported[0]["id"] == late.id
        assert exported[0]["data"]["late_from"] == "2025-11"
        assert exported[0]["data"]["billed_day"] == "2025-12-02"
        listing = await ledger.invoices(t)
        assert [(i["month"], i["status"]) for i in listing] == [
            ("2025-12", "open"),
            ("2025-11", "closed"),
        ]
        rows = list(csv.DictReader(io.StringIO(invoice_csv(closed))))
        assert rows[-1]["model"] == "total" and rows[-1]["amount_usd"] == "0.80"
        assert sum(Decimal(r["amount_usd"]) for r in rows[:-1]) == Decimal("0.8024")
        with pytest.raises(ObjectNotFound):
            await ledger.invoice(t, "2024-01", now=DEC_02)

    run(body)


def test_a_consumer_that_died_holding_events_has_them_claimed_and_counted_once(run: Any) -> None:
    t = tenant()

    async def body(client: aioredis.Redis, writer: EventWriter) -> None:
        events = [event(t) for _ in range(30)]
        await writer.write(*events)
        dead = biller(client)
        await dead.setup()
        # it read every entry (they are pending on it) and died before counting them
        while await client.xreadgroup("billing", dead.name, {STREAM: ">"}, count=1000):
            pass
        alive = biller(client, claim_idle_s=0.2)
        await asyncio.sleep(0.3)
        await drain(alive)
        usage = await Ledger(client).usage(t, date(2025, 11, 30), date(2025, 11, 30), ["day"])
        assert usage["totals"]["requests"] == 30
        # the dead one comes back under its name: its pending entries were counted already
        await drain(dead)
        usage = await Ledger(client).usage(t, date(2025, 11, 30), date(2025, 11, 30), ["day"])
        assert usage["totals"]["requests"] == 30

    run(body)


def test_counted_events_older_than_the_retention_are_trimmed_from_the_stream(run: Any) -> None:
    async def body(client: aioredis.Redis, writer: EventWriter) -> None:
        await writer.write(event(tenant()))
        b = biller(client, stream_retention_s=60)
        await drain(b)
        assert await client.xlen(STREAM) >= 1
        assert await b.trim(NOV_30) == 0  # nothing counted is older than a minute then
        # 'now' far ahead: every counted entry is past the retention, none is pending or unread
        await b.trim(10**10)
        assert await client.xlen(STREAM) == 0

    run(body)


def test_prices_are_exact_decimals_and_refuse_sub_nano_precision() -> None:
    from zerolayer.config import TierPrice

    p = TierPrice(prompt_per_1k=0.1, completion_per_1k="0.000150")
    assert p.prompt_per_1k == Decimal("0.1") and p.nanos(3, 1) == 3 * 100_000 + 150
    assert sum(p.nanos(1, 0) for _ in range(10)) == p.nanos(10, 0)  # no float drift
    with pytest.raises(ValueError, match="nano-dollars per token"):
        TierPrice(prompt_per_1k="0.0000001", completion_per_1k=0)
    assert PRICE.cached == Decimal("0.05")


def test_the_request_log_reads_bounded_pages_and_never_repeats_a_row(run: Any) -> None:
    from zerolayer.billing.ledger import request_log_scope

    t = tenant()

    async def body(client: aioredis.Redis, writer: EventWriter) -> None:
        for i in range(7):
            await writer.write(event(t, NOV_30 + i, key_id="a" if i % 3 == 0 else "b"))
        await drain(biller(client))
        ledger, now = Ledger(client), NOV_30 + 3600
        # filtered by key, a page reads at most `most` events: shorter pages, each with a
        # cursor, and every one of the key's rows exactly once
        seen: list[str] = []
        cursor, pages = None, 0
        while True:
            rows, cursor = await ledger.recent(t, now, 7, 10, cursor, key_id="a", most=2)
            seen += [r["id"] for r in rows]
            pages += 1
            if cursor is None:
                break
        assert len(seen) == 3 == len(set(seen)) and pages == 4
        # a signed position past the list's end (a list that shrank) starts at its end
        far = await ledger.signer.sign(request_log_scope(t, None), "2025-11:100000")
        rows, more = await ledger.recent(t, now, 7, 500, far)
        assert len(rows) == 7 == len({r["id"] for r in rows}) and more is None
        # a later month than now's is read as now's (from position 5 back: six rows)
        later = await ledger.signer.sign(request_log_scope(t, None), "2099-01:5")
        assert len((await ledger.recent(t, now, 7, 500, later))[0]) == 6

    run(body)
