"""POST /v1/responses/compact through the official openai package over real HTTP (the scripted
engine behind the gateway, a real Redis): the output is the user's messages and one sealed
compaction item, which a later response reads as the summary; a tampered item, or one of
another tenant, is a 400 naming it; the compaction is billed as a request of its own."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.gateway.conftest import SCRIPT, Gateway, GatewayFactory
from tests.gateway.openresponses import check
from tests.gateway.test_api import assert_openai_error
from tests.gateway.test_responses import client

MODEL = "smollm2-135m"
ANSWER = "".join(SCRIPT)  # the scripted engine's answer: here, every summary
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "My name is Alice."},
    {"role": "assistant", "content": "Hello Alice!"},
    {"role": "user", "content": "I live in Lyon."},
]


def post(gw: Gateway, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    return httpx.post(
        gw.http() + "/responses/compact",
        headers={"Authorization": f"Bearer {key or gw.key}"},
        json=body,
        timeout=30,
    )


def test_a_compaction_keeps_the_users_messages_and_a_summary_the_next_turn_reads(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    oc = client(gw)
    done = oc.responses.compact(model=MODEL, input=HISTORY)  # type: ignore[arg-type]
    check("CompactResource", done.to_dict(warnings=False))  # the package types user items loosely
    kinds = [(it.type, getattr(it, "role", None)) for it in done.output]
    assert kinds == [("message", "user"), ("message", "user"), ("compaction", None)]
    sealed = done.output[-1].encrypted_content  # type: ignore[union-attr]
    assert "Hello" not in sealed and "Alice" not in sealed  # sealed, not readable
    assert done.usage.output_tokens == len(SCRIPT)
    # the next turn: the compacted output, then a new message
    following = [it.to_dict(warnings=False) for it in done.output] + [
        {"role": "user", "content": "Where?"}
    ]
    nxt = oc.responses.create(model=MODEL, input=following)  # type: ignore[arg-type]
    expected = gw.prompts.chat(
        [
            {"role": "user", "content": "My name is Alice."},
            {"role": "user", "content": "I live in Lyon."},
            {"role": "system", "content": "Summary of the earlier conversation:\n" + ANSWER},
            {"role": "user", "content": "Where?"},
        ]
    )
    assert nxt.usage is not None and nxt.usage.input_tokens == len(expected)
    # the compaction item is stored as given, and read again when the chain goes on
    items = oc.responses.input_items.list(nxt.id, order="asc").data
    assert [it.type for it in items][2] == "compaction"
    again = oc.responses.create(model=MODEL, input="And?", previous_response_id=nxt.id)
    assert again.usage is not None and again.usage.input_tokens > len(expected)
    gw.billed()  # billed as a request of its own
    ev = gw.event(done.id)["data"]
    assert ev["endpoint"] == "responses.compact" and ev["status"] == "ok"
    assert (ev["prompt_tokens"], ev["completion_tokens"]) == (
        done.usage.input_tokens,
        done.usage.output_tokens,
    )


def test_a_stored_chain_is_compacted_by_previous_response_id(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    oc = client(gw)
    first = oc.responses.create(model=MODEL, input="Remember: papaya.")
    r = post(gw, {"model": MODEL, "previous_response_id": first.id, "input": "What word?"})
    assert r.status_code == 200, r.text
    out = r.json()["output"]
    texts = [it["content"][0]["text"] for it in out if it["type"] == "message"]
    assert texts == ["Remember: papaya.", "What word?"] and out[-1]["type"] == "compaction"
    # a compaction of a compacted output keeps its users' messages and makes one summary
    twice = post(gw, {"model": MODEL, "input": out + [{"role": "user", "content": "More"}]})
    assert twice.status_code == 200, twice.text
    assert [it["type"] for it in twice.json()["output"]] == ["message"] * 3 + ["compaction"]


def _sealed(gw: Gateway) -> dict[str, Any]:
    r = post(gw, {"model": MODEL, "input": HISTORY})
    assert r.status_code == 200, r.text
    item: dict[str, Any] = r.json()["output"][-1]
    return item


def test_a_tampered_or_foreign_compaction_item_is_a_400_naming_it(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    item = _sealed(gw)
    text = item["encrypted_content"]
    flipped = text[:20] + ("A" if text[20] != "A" else "B") + text[21:]
    for bad in (flipped, "not sealed", text[:-4]):
        given = [{"role": "user", "content": "x"}, {**item, "encrypted_content": bad}]
        r = httpx.post(
            gw.http() + "/responses", headers=gw.auth, json={"model": MODEL, "input": given}
        )
        assert assert_openai_error(r, 400)["param"] == "input[1].encrypted_content"
    other = gw.client.post("/admin/keys", headers=gw.admin, json={"plan": "pro"}).json()
    r = post(gw, {"model": MODEL, "input": [item]}, key=other["key"])
    err = assert_openai_error(r, 400)
    assert err["param"] == "input[0].encrypted_content" and "this account" in err["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "input": "x", "store": True}, "store"),
        ({"model": MODEL, "input": "x", "service_tier": "flex"}, "service_tier"),
        ({"model": MODEL, "input": [{"type": "compaction"}]}, "input[0].encrypted_content"),
        ({"model": MODEL, "previous_response_id": "resp_none"}, "previous_response_id"),
        ({"input": "x"}, "model"),
    ],
)
def test_bad_compactions_are_4xx_naming_the_field(
    make_gateway: GatewayFactory, body: dict[str, Any], param: str
) -> None:
    gw = make_gateway()
    r = post(gw, body)
    assert r.status_code in (400, 404), r.text
    assert r.json()["error"]["param"] == param
