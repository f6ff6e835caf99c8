"""The request log (GET /v1/requests): the last days' requests of the caller's tenant, newest
first, a page at a time or as CSV, read from the usage events billing counted."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from zerolayer.billing.ledger import REQUEST_COLUMNS

from tests.gateway.conftest import ADMIN_KEY, GatewayFactory
from tests.gateway.test_api import CHAT, assert_openai_error


def _page(gw: Any, **params: Any) -> dict[str, Any]:
    r = gw.client.get("/v1/requests", headers=gw.auth, params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_pages_walk_every_request_once_newest_first(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    sent = []
    for n in (2, 3, 4, 5, 6):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "max_tokens": n})
        assert r.status_code == 200
        sent.append(r.json()["usage"]["completion_tokens"])
    gw.billed()
    rows, cursor, pages = [], None, 0
    while True:
        page = _page(gw, limit=2, **({"cursor": cursor} if cursor else {}))
        rows += page["data"]
        pages += 1
        assert page["has_more"] == (page["next_cursor"] is not None)
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert pages == 3 and len(rows) == 5 and len({r["id"] for r in rows}) == 5
    assert [r["completion_tokens"] for r in rows] == sent[::-1]  # newest first
    assert [r["time"] for r in rows] == sorted((r["time"] for r in rows), reverse=True)
    for r in rows:
        assert set(r) == set(REQUEST_COLUMNS)
        assert r["status"] == "ok" and r["key_id"] == gw.key_id and r["tier"]
        assert float(r["cost_usd"]) > 0 and r["latency_ms"] >= 0
    # the same rows as CSV, in one download
    got = gw.client.get("/v1/requests", headers=gw.auth, params={"format": "csv"})
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(got.text)))
    assert [t["id"] for t in table] == [r["id"] for r in rows]
    assert list(table[0]) == list(REQUEST_COLUMNS)


def test_a_tenant_sees_its_own_requests_alone(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    b = make_gateway()
    assert a.client.post("/v1/chat/completions", headers=a.auth, json=CHAT).status_code == 200
    a.billed()
    assert len(_page(a)["data"]) == 1
    assert _page(b)["data"] == []
    # an operator reads any tenant's with the admin key
    tenant = a.record().owner
    r = a.client.get(
        f"/admin/tenants/{tenant}/requests", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert r.status_code == 200 and [x["key_id"] for x in r.json()["data"]] == [a.key_id]


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"days": "0"}, "days"),
        ({"days": "many"}, "days"),
        ({"limit": "501"}, "limit"),
        ({"cursor": "yesterday"}, "cursor"),
        ({"cursor": "2026-13:4"}, "cursor"),
        ({"format": "xml"}, "format"),
    ],
)
def test_bad_parameters_are_400s_naming_them(
    make_gateway: GatewayFactory, params: dict[str, str], param: str
) -> None:
    gw = make_gateway()
    r = gw.client.get("/v1/requests", headers=gw.auth, params=params)
    assert assert_openai_error(r, 400)["param"] == param


def test_a_cursor_is_signed_for_its_tenant_and_filter(make_gateway: GatewayFactory) -> None:
    import base64

    a, b = make_gateway(), make_gateway()
    for _ in range(3):
        assert a.client.post("/v1/chat/completions", headers=a.auth, json=CHAT).status_code == 200
    a.billed()
    token = _page(a, limit=1)["next_cursor"]
    assert token and len(_page(a, limit=5, cursor=token)["data"]) == 2

    def refused(gw: Any, **params: str) -> None:
        r = gw.client.get("/v1/requests", headers=gw.auth, params=params)
        assert assert_openai_error(r, 400)["param"] == "cursor"

    refused(b, cursor=token)  # another tenant's
    refused(a, cursor=token, key_id=a.key_id)  # the same tenant's, another filter
    payload, tag = token.split(".")
    month = base64.urlsafe_b64decode(payload + "==").decode().split(":")[0]
    # positions made up by hand, which made the log re-read the same rows or loop for ever
    for raw in (f"{month}:100000", "2099-01:5", f"{month}:105"):
        refused(a, cursor=raw)
        forged = base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()
        refused(a, cursor=f"{forged}.{tag}")  # a real tag on another payload
