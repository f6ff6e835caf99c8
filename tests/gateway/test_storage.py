"""What a tenant stores, over real HTTP on a real Redis server: a previous_response_id chain
stores each turn once (bytes stored per byte sent stay bounded however long the chain), its
history is read back from the responses that stored it, and the plan's storage quota (bytes
and objects per tenant) refuses a write past it with a 403, nothing written."""

from __future__ import annotations

from typing import Any

import httpx

from tests.gateway.conftest import SCRIPT, Gateway, GatewayFactory, plan
from tests.gateway.test_api import assert_openai_error

MODEL = "smollm2-135m"
ANSWER = "".join(SCRIPT)
MONTH = 30 * 86400


def post(gw: Gateway, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gw.http() + path, headers=gw.auth, json=body, timeout=60)


def respond(gw: Gateway, **body: Any) -> dict[str, Any]:
    r = post(gw, "/responses", {"model": MODEL, **body})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def chat_tokens(gw: Gateway, *inputs: str) -> int:
    """The prompt tokens of these user turns, each but the last answered with the script."""
    turns: list[dict[str, str]] = []
    for text in inputs[:-1]:
        turns += [{"role": "user", "content": text}, {"role": "assistant", "content": ANSWER}]
    return len(gw.prompts.chat(turns + [{"role": "user", "content": inputs[-1]}]))


def stored_bytes(gw: Gateway, ids: list[str]) -> int:
    """Every byte of these stored responses' fields and of the lines of ids they began, read
    from Redis itself."""
    total = 0
    for rid in ids:
        key = f"zl:resp:{{{rid}}}"
        total += sum(gw.redis.hstrlen(key, f) for f in gw.redis.hkeys(key))
        total += sum(len(i) for i in gw.redis.lrange(f"zl:line:{{{rid}}}", 0, -1))
    return total


def test_a_chain_stores_each_turn_once(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    sent, prev, ids = 0, None, []
    for turn in range(12):
        text = f"turn {turn}: " + "the quick brown fox jumps over the lazy dog. " * 30
        body: dict[str, Any] = {"input": text, "truncation": "auto", "max_output_tokens": 16}
        if prev:
            body["previous_response_id"] = prev
        sent += len(text)
        prev = respond(a, **body)["id"]
        ids.append(prev)
    stored = stored_bytes(a, ids)
    # each turn's input once (JSON-quoted), and its object with its answer (under 2 KB): not
    # the history again (a stored context per response made this 3.5x for these twelve turns,
    # and it grows with each)
    assert stored < 1.1 * sent + 12 * 2048, (stored, sent)
    totals = a.redis.hmget(f"zl:tenant:{{{a.record().owner}}}:stored", "#bytes", "#objects")
    assert int(totals[1]) == 12
    assert stored <= int(totals[0]) <= stored + 12 * 64  # the quota counts what is stored


def test_a_follow_up_reads_its_history_from_the_chain_and_renews_it(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway()
    first = respond(a, input="Capital of France?")
    second = respond(a, input="And of Spain?", previous_response_id=first["id"])
    a.redis.expire(f"zl:resp:{{{first['id']}}}", 100)
    third = respond(a, input="Thanks", previous_response_id=second["id"])
    expected = chat_tokens(a, "Capital of France?", "And of Spain?", "Thanks")
    assert third["usage"]["input_tokens"] == expected
    # storing a follow-up renews the responses its history is read from
    assert MONTH - 60 < a.redis.ttl(f"zl:resp:{{{first['id']}}}") <= MONTH
    # the first one deleted: a follow-up of the third has lost part of its history
    assert httpx.delete(f"{a.http()}/responses/{first['id']}", headers=a.auth).status_code == 200
    r = post(a, "/responses", {"model": MODEL, "input": "x", "previous_response_id": third["id"]})
    err = assert_openai_error(r, 404, "invalid_request_error")
    assert err["code"] == "previous_response_not_found"
    assert first["id"] in err["message"] and err["param"] == "previous_response_id"
    # the second still continues (its history, the first, is gone too)
    r = post(a, "/responses", {"model": MODEL, "input": "x", "previous_response_id": second["id"]})
    assert r.status_code == 404


def test_a_follow_up_of_a_conversation_response_continues_from_that_point(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway()
    conv = post(a, "/conversations", {"items": [{"role": "user", "content": "Hello"}]}).json()
    on = respond(a, input="Q0", conversation=conv["id"])
    later = post(
        a, f"/conversations/{conv['id']}/items", {"items": [{"role": "user", "content": "Later"}]}
    )
    assert later.status_code == 200
    follow = respond(a, input="Q1", previous_response_id=on["id"])
    expected = a.prompts.chat(
        [
            {"role": "user", "content": "Hello"},
            {"role": "user", "content": "Q0"},
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": "Q1"},
        ]
    )
    assert follow["usage"]["input_tokens"] == len(expected)  # not the item added later
    assert httpx.delete(f"{a.http()}/conversations/{conv['id']}", headers=a.auth).status_code == 200
    r = post(a, "/responses", {"model": MODEL, "input": "x", "previous_response_id": on["id"]})
    assert assert_openai_error(r, 404, "invalid_request_error")["code"] == (
        "previous_response_not_found"
    )


def test_the_objects_quota_refuses_the_write_past_it(make_gateway: GatewayFactory) -> None:
    a = make_gateway(plans={"small": plan(stored_objects=2)}, key_plan="small")
    conv = post(a, "/conversations", {"metadata": {"k": "v"}})
    assert conv.status_code == 200, conv.text
    kept = respond(a, input="one")
    requests = a.engine.requests
    for path, body in (
        ("/responses", {"model": MODEL, "input": "two"}),
        ("/responses", {"model": MODEL, "input": "two", "previous_response_id": kept["id"]}),
        ("/conversations", {}),
    ):
        err = assert_openai_error(post(a, path, body), 403, "insufficient_quota")
        assert err["code"] == "storage_quota_exceeded" and "2 stored objects" in err["message"]
    assert a.engine.requests == requests  # refused before it ran
    storage = a.client.get("/v1/account", headers=a.auth).json()["storage"]
    assert storage["objects"] == 2 and storage["max_objects"] == 2 and storage["bytes"] > 0
    # store: false keeps nothing, so it is not refused
    assert respond(a, input="three", store=False)["store"] is False
    # deleting makes room
    assert httpx.delete(f"{a.http()}/responses/{kept['id']}", headers=a.auth).status_code == 200
    assert post(a, "/conversations", {}).status_code == 200


def test_the_bytes_quota_refuses_items_past_it_and_counts_expiry(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway(plans={"small": plan(stored_bytes=20_000)}, key_plan="small")
    big = [{"role": "user", "content": "x" * 8000} for _ in range(3)]
    owner = a.record().owner
    err = assert_openai_error(post(a, "/conversations", {"items": big}), 403, "insufficient_quota")
    assert err["code"] == "storage_quota_exceeded" and "20000 bytes" in err["message"]
    # nothing of it was kept
    listed = a.client.get(f"/admin/tenants/{owner}", headers=a.admin).json()
    assert listed["objects"]["data"] == []
    assert int(a.redis.hget(f"zl:tenant:{{{owner}}}:stored", "#bytes") or 0) == 0
    conv = post(a, "/conversations", {"items": big[:2]}).json()
    more = post(a, f"/conversations/{conv['id']}/items", {"items": big[:1]})
    assert assert_openai_error(more, 403, "insufficient_quota")["code"] == "storage_quota_exceeded"
    items = httpx.get(f"{a.http()}/conversations/{conv['id']}/items", headers=a.auth).json()
    assert len(items["data"]) == 2  # nothing added
    # deleting an item makes room for one
    gone = items["data"][0]["id"]
    r = httpx.delete(f"{a.http()}/conversations/{conv['id']}/items/{gone}", headers=a.auth)
    assert r.status_code == 200
    assert post(a, f"/conversations/{conv['id']}/items", {"items": big[:1]}).status_code == 200
    # a conversation that expired no longer counts
    for suffix in ("", ":order", ":items"):
        a.redis.delete(f"zl:conv:{{{conv['id']}}}{suffix}")
    assert post(a, "/conversations", {"items": big[:2]}).status_code == 200


def test_branches_of_a_chain_each_continue_their_own_history(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway()
    first = respond(a, input="A")
    second = respond(a, input="B", previous_response_id=first["id"])
    third = respond(a, input="C", previous_response_id=second["id"])
    # a second follow-up of the second (a branch off the middle of the line), and of the first
    branch = respond(a, input="D", previous_response_id=second["id"])
    early = respond(a, input="E", previous_response_id=first["id"])
    again = respond(a, input="F", previous_response_id=branch["id"])

    def tokens(*inputs: str) -> int:
        return chat_tokens(a, *inputs)

    assert third["usage"]["input_tokens"] == tokens("A", "B", "C")
    assert branch["usage"]["input_tokens"] == tokens("A", "B", "D")
    assert early["usage"]["input_tokens"] == tokens("A", "E")
    assert again["usage"]["input_tokens"] == tokens("A", "B", "D", "F")
    after = respond(a, input="G", previous_response_id=third["id"])
    assert after["usage"]["input_tokens"] == tokens("A", "B", "C", "G")
