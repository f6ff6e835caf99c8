"""The Responses and Conversations APIs through the official openai package over real HTTP, on
two gateway replicas sharing one real Redis server (the scripted engine behind them). Every
response body and stream event is validated against the Open Responses specification."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, Gateway, GatewayFactory
from tests.gateway.openresponses import check, check_event
from tests.gateway.test_api import assert_openai_error
from tests.gateway.test_faults import _leave_after

MODEL = "smollm2-135m"
ANSWER = "".join(SCRIPT)


def pair(make_gateway: GatewayFactory, **kwargs: Any) -> tuple[Gateway, Gateway]:
    """Two gateway replicas on one Redis, one key."""
    a = make_gateway(**kwargs)
    b = make_gateway(key=(a.key, a.key_id), **kwargs)
    return a, b


def client(gw: Gateway, key: str | None = None) -> OpenAI:
    return OpenAI(base_url=gw.http(), api_key=key or gw.key, max_retries=0)


def raw(gw: Gateway, path: str, key: str | None = None) -> httpx.Response:
    """GET a path as JSON (to validate what was sent, not what the client parsed)."""
    return httpx.get(gw.http() + path, headers={"Authorization": f"Bearer {key or gw.key}"})


def events_of(text: str) -> list[dict[str, Any]]:
    """The data of each server-sent event; each event's name is its type. A stream that ended
    ends with `data: [DONE]` after its terminal event (not returned); a cut one may lack it."""
    out = []
    blocks = text.strip().split("\n\n")
    if blocks[-1] == "data: [DONE]":
        blocks.pop()
    for block in blocks:
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        out.append(data)
    return out


def stream_raw(gw: Gateway, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = httpx.post(
        gw.http() + "/responses",
        headers={"Authorization": f"Bearer {gw.key}"},
        json={**body, "stream": True},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.text.endswith("\n\ndata: [DONE]\n\n"), r.text[-200:]  # after the terminal event
    events = events_of(r.text)
    assert events[-1]["type"] in {"response.completed", "response.incomplete", "response.failed"}
    for ev in events:
        check_event(ev)
    return events


def stored_items(gw: Gateway, rid: str) -> list[tuple[str, str]]:
    r = raw(gw, f"/responses/{rid}/input_items?order=asc")
    assert r.status_code == 200
    return [(i["role"], i["content"][0]["text"]) for i in r.json()["data"]]


def test_three_turns_by_previous_response_id_on_alternating_replicas(
    make_gateway: GatewayFactory,
) -> None:
    a, b = pair(make_gateway)
    first = client(a).responses.create(model=MODEL, input="Capital of France?")
    assert first.status == "completed" and first.output_text == ANSWER
    assert re.fullmatch(r"resp_[0-9a-f]{48}", first.id)
    # sent the moment the reply arrived, to the other replica: it finds the stored response
    second = client(b).responses.create(
        model=MODEL, input="And of Spain?", previous_response_id=first.id
    )
    third = client(a).responses.create(
        model=MODEL, input="Thanks", previous_response_id=second.id, instructions="Be brief."
    )
    assert third.previous_response_id == second.id
    u1, u3 = first.usage, third.usage
    assert u1 is not None and u3 is not None
    # the third prompt holds both earlier turns: more tokens than the first
    assert u3.input_tokens > u1.input_tokens + 2 * len(SCRIPT)
    expected = len(
        a.prompts.chat(
            [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Capital of France?"},
                {"role": "assistant", "content": ANSWER},
                {"role": "user", "content": "And of Spain?"},
                {"role": "assistant", "content": ANSWER},
                {"role": "user", "content": "Thanks"},
            ]
        )
    )
    assert u3.input_tokens == expected
    assert u3.total_tokens == u3.input_tokens + u3.output_tokens
    assert u3.input_tokens_details.cached_tokens == 0
    assert u3.input_tokens_details.cache_write_tokens == 0  # the openai package's typed field
    for gw, resp in ((b, first), (a, second), (b, third)):
        body = raw(gw, f"/responses/{resp.id}").json()
        check("ResponseResource", body)
        assert body["output"][0]["content"][0]["text"] == ANSWER
    assert stored_items(b, third.id) == [("user", "Thanks")]  # its own input only


def test_three_turns_on_a_conversation_streamed_and_whole_store_the_same_items(
    make_gateway: GatewayFactory,
) -> None:
    a, b = pair(make_gateway)
    runs: dict[bool, list[tuple[str, str]]] = {}
    for streamed in (False, True):
        conv = client(a).conversations.create(
            metadata={"topic": "capitals"}, items=[{"role": "user", "content": "Hello"}]
        )
        assert re.fullmatch(r"conv_[0-9a-f]{48}", conv.id) and conv.metadata == {
            "topic": "capitals"
        }
        for turn, gw in enumerate((b, a, b)):
            if streamed:
                events = stream_raw(
                    gw, {"model": MODEL, "input": f"Q{turn}", "conversation": conv.id}
                )
                assert events[-1]["type"] == "response.completed"
                assert events[-1]["response"]["conversation"] == {"id": conv.id}
            else:
                r = client(gw).responses.create(
                    model=MODEL, input=f"Q{turn}", conversation={"id": conv.id}
                )
                check("ResponseResource", raw(gw, f"/responses/{r.id}").json())
        items = client(a).conversations.items.list(conv.id, order="asc", limit=100)
        runs[streamed] = [(i.role, i.content[0].text) for i in items.data]
    expected = [("user", "Hello")]
    for turn in range(3):
        expected += [("user", f"Q{turn}"), ("assistant", ANSWER)]
    assert runs[False] == runs[True] == expected


def test_stream_events_come_in_the_specified_order(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    events = stream_raw(a, {"model": MODEL, "input": "Hi", "metadata": {"k": "v"}})
    kinds = [e["type"] for e in events]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(deltas),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "".join(d["delta"] for d in deltas) == ANSWER
    final = events[-1]["response"]
    assert final["metadata"] == {"k": "v"} and final["usage"]["output_tokens"] == len(SCRIPT)
    # the stored response is the one the last event carried
    assert raw(a, f"/responses/{final['id']}").json()["output"] == final["output"]
    # and the official client reads the same stream
    with client(a).responses.stream(model=MODEL, input="Hi") as s:
        text = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        done = s.get_final_response()
    assert text == ANSWER and done.status == "completed"


def test_max_output_tokens_makes_an_incomplete_response(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    for cut in (3, None):  # the whole reply's own body, incomplete and completed
        body = {"model": MODEL, "input": "Hi", "max_output_tokens": cut}
        posted = httpx.post(
            a.http() + "/responses",
            headers={"Authorization": f"Bearer {a.key}"},
            json=body,
            timeout=30,
        )
        assert posted.status_code == 200
        check("ResponseResource", posted.json())
    r = client(a).responses.create(model=MODEL, input="Hi", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details is not None
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "".join(SCRIPT[:3])
    events = stream_raw(a, {"model": MODEL, "input": "Hi", "max_output_tokens": 3})
    assert events[-1]["type"] == "response.incomplete"


def test_another_tenant_gets_404_on_every_route(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    mine = client(a)
    conv = mine.conversations.create(items=[{"role": "user", "content": "secret"}])
    resp = mine.responses.create(model=MODEL, input="Q", conversation=conv.id)
    item = mine.conversations.items.list(conv.id).data[0].id
    other = a.client.post("/admin/keys", headers=a.admin, json={"plan": "pro"}).json()
    assert (
        other["tenant"] != a.client.get(f"/admin/keys/{a.key_id}", headers=a.admin).json()["tenant"]
    )
    h = {"Authorization": f"Bearer {other['key']}"}
    base = a.http()
    calls = [
        ("GET", f"/responses/{resp.id}", None),
        ("DELETE", f"/responses/{resp.id}", None),
        ("GET", f"/responses/{resp.id}/input_items", None),
        ("POST", "/responses", {"model": MODEL, "input": "x", "previous_response_id": resp.id}),
        ("POST", "/responses", {"model": MODEL, "input": "x", "conversation": conv.id}),
        ("GET", f"/conversations/{conv.id}", None),
        ("POST", f"/conversations/{conv.id}", {"metadata": {"a": "b"}}),
        ("DELETE", f"/conversations/{conv.id}", None),
        ("POST", f"/conversations/{conv.id}/items", {"items": [{"role": "user", "content": "x"}]}),
        ("GET", f"/conversations/{conv.id}/items", None),
        ("GET", f"/conversations/{conv.id}/items/{item}", None),
        ("DELETE", f"/conversations/{conv.id}/items/{item}", None),
    ]
    for method, path, body in calls:
        r = httpx.request(method, base + path, headers=h, json=body, timeout=30)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and "secret" not in r.text
    # a guessed id of the owner's gets the same answer as the other tenant's real one
    guessed = httpx.get(base + "/responses/resp_" + "0" * 48, headers=h).json()["error"]
    real = httpx.get(base + f"/responses/{resp.id}", headers=h).json()["error"]
    assert guessed["code"] == real["code"] == "not_found"
    # nothing of the owner's changed
    assert mine.responses.retrieve(resp.id).id == resp.id
    assert [i.content[0].text for i in mine.conversations.items.list(conv.id, order="asc")] == [
        "secret",
        "Q",
        ANSWER,
    ]


def test_a_key_of_the_same_tenant_sees_its_objects_and_a_revoked_one_nothing(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway()
    conv = client(a).conversations.create(items=[{"role": "user", "content": "hi"}])
    tenant = a.client.get(f"/admin/keys/{a.key_id}", headers=a.admin).json()["tenant"]
    made = a.client.post(
        "/admin/keys", headers=a.admin, json={"plan": "pro", "tenant": tenant}
    ).json()
    assert made["tenant"] == tenant
    assert client(a, made["key"]).conversations.retrieve(conv.id).id == conv.id
    a.client.delete(f"/admin/keys/{made['key_id']}", headers=a.admin)
    with pytest.raises(openai.AuthenticationError):
        client(a, made["key"]).conversations.retrieve(conv.id)
    unknown = a.client.post(
        "/admin/keys", headers=a.admin, json={"plan": "pro", "tenant": "tenant_nope"}
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "tenant_not_found"


def test_admin_lists_and_deletes_a_tenants_objects(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    c = client(a)
    conv = c.conversations.create()
    r = c.responses.create(model=MODEL, input="Q")
    tenant = a.client.get(f"/admin/keys/{a.key_id}", headers=a.admin).json()["tenant"]
    assert a.client.get(f"/admin/tenants/{tenant}").status_code == 401  # the admin key only
    got = a.client.get(f"/admin/tenants/{tenant}", headers=a.admin).json()
    assert {(o["object"], o["id"]) for o in got["objects"]["data"]} == {
        ("conversation", conv.id),
        ("response", r.id),
    }
    assert [k["key_id"] for k in got["keys"]] == [a.key_id]
    gone = a.client.delete(f"/admin/tenants/{tenant}/objects", headers=a.admin).json()
    assert gone["deleted"] == {"response": 1, "conversation": 1, "file": 0}
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        c.conversations.retrieve(conv.id)
    assert a.client.get("/admin/tenants/tenant_nope", headers=a.admin).status_code == 404


def test_store_false_stores_nothing(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    before = set(a.redis.scan_iter("zl:resp:*"))
    r = client(a).responses.create(model=MODEL, input="Q", store=False)
    assert r.store is False and r.output_text == ANSWER
    events = stream_raw(a, {"model": MODEL, "input": "Q", "store": False})
    a.settled()
    assert set(a.redis.scan_iter("zl:resp:*")) == before
    for rid in (r.id, events[-1]["response"]["id"]):
        with pytest.raises(openai.NotFoundError):
            client(a).responses.retrieve(rid)
    # it may continue a stored response without storing itself
    kept = client(a).responses.create(model=MODEL, input="Q")
    follow = client(a).responses.create(
        model=MODEL, input="more", previous_response_id=kept.id, store=False
    )
    assert follow.usage.input_tokens > kept.usage.input_tokens
    assert set(a.redis.scan_iter("zl:resp:*")) == before | {f"zl:resp:{{{kept.id}}}".encode()}


@pytest.mark.parametrize(
    "body, param",
    [
        (
            {"input": "x", "previous_response_id": "resp_1", "conversation": "conv_1"},
            "conversation",
        ),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice"),
        (
            {
                "input": "x",
                "tools": [{"type": "function", "name": "f"}],
                "text": {"format": {"type": "json_object"}},
            },
            "text.format",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            None,
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]},
            "input[0].call_id",
        ),
        ({"input": [{"type": "custom_tool_call", "call_id": "c"}]}, None),
        ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format"),
        (
            {
                "input": "x",
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "n",
                        "schema": {"type": "object", "properties": {"a": {"not": {}}}},
                    }
                },
            },
            "text.format.schema.properties.a.not",
        ),
        ({"input": "x", "include": ["reasoning.encrypted_content"]}, "include"),
        ({"input": "x", "top_logprobs": 21}, "top_logprobs"),
        ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"input": "x", "user": "u" * 513}, "user"),
        ({"input": "x", "safety_identifier": "s" * 513}, "safety_identifier"),
        ({"input": "x", "prompt_cache_key": "p" * 513}, "prompt_cache_key"),
        ({"input": "x", "store": False, "conversation": "conv_1"}, "store"),
        ({"input": "x", "truncation": "sometimes"}, "truncation"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({}, "input"),
    ],
)
def test_bad_requests_are_clear_400s(
    make_gateway: GatewayFactory, body: dict[str, Any], param: str | None
) -> None:
    a = make_gateway()
    r = a.client.post("/v1/responses", headers=a.auth, json={"model": MODEL, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["message"]
    if param is not None:
        assert param in (err["param"] or ""), err
    assert a.engine.requests == 0


def test_unknown_ids_and_models_are_404s(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    c = client(a)
    with pytest.raises(openai.NotFoundError) as exc:
        c.responses.create(model=MODEL, input="x", previous_response_id="resp_nope")
    assert exc.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model=MODEL, input="x", conversation="conv_nope")
    with pytest.raises(openai.NotFoundError) as exc:
        c.responses.create(model="no-such-model", input="x")
    assert exc.value.body["code"] == "model_not_found"


def _long_conversation(a: Gateway, turns: int) -> tuple[str, list[dict[str, str]]]:
    """A conversation of `turns` long user/assistant pairs, and its messages."""
    c = client(a)
    conv = c.conversations.create()
    messages = []
    for t in range(turns):
        pair_ = [
            {"role": "user", "content": f"turn {t}: " + "tell me more about rivers " * 12},
            {"role": "assistant", "content": f"answer {t}: " + "rivers flow to the sea " * 12},
        ]
        c.conversations.items.create(conv.id, items=pair_)
        messages += pair_
    return conv.id, messages


def test_truncation_auto_keeps_the_instructions_and_the_newest_turns(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway()
    max_len = a.app.state.pipeline.config.models[MODEL].max_model_len
    cid, messages = _long_conversation(a, 16)
    head = [{"role": "system", "content": "Answer in French."}]
    new = {"role": "user", "content": "And now?"}
    assert len(a.prompts.chat(head + messages + [new])) + 16 > max_len  # it does not fit
    # the expected prompt: the longest suffix of the history that fits with the instructions
    kept = next(
        k
        for k in range(len(messages), -1, -1)
        if len(a.prompts.chat(head + messages[len(messages) - k :] + [new])) + 16 <= max_len
    )
    assert 0 < kept < len(messages)
    expected = len(a.prompts.chat(head + messages[len(messages) - kept :] + [new]))
    c = client(a)
    with pytest.raises(openai.BadRequestError) as exc:
        c.responses.create(
            model=MODEL,
            input="And now?",
            conversation=cid,
            instructions="Answer in French.",
            max_output_tokens=16,
        )
    err = exc.value.body
    assert err["code"] == "context_length_exceeded" and str(max_len) in err["message"]
    full = len(a.prompts.chat(head + messages + [new]))
    assert str(full) in err["message"]  # both numbers
    r = c.responses.create(
        model=MODEL,
        input="And now?",
        conversation=cid,
        instructions="Answer in French.",
        max_output_tokens=16,
        truncation="auto",
    )
    assert r.usage.input_tokens == expected and r.truncation == "auto"
    # the conversation keeps every item: truncation only shapes what the model reads
    items = c.conversations.items.list(cid, order="asc", limit=100).data
    assert len(items) == len(messages) + 2


def test_ten_concurrent_responses_on_one_conversation_never_interleave(
    make_gateway: GatewayFactory,
) -> None:
    a, b = pair(make_gateway, engine=FakeEngine(SCRIPT, delay_s=0.03))
    conv = client(a).conversations.create()
    busy = []
    lock = threading.Lock()

    def turn(n: int) -> None:
        gw = (a, b)[n % 2]
        while True:  # retry a 409 as a client would
            r = httpx.post(
                gw.http() + "/responses",
                headers={"Authorization": f"Bearer {a.key}"},
                json={"model": MODEL, "input": f"Q{n}", "conversation": conv.id},
                timeout=60,
            )
            if r.status_code != 409:
                assert r.status_code == 200, r.text
                return
            assert r.json()["error"]["code"] == "conversation_busy"
            assert int(r.headers["retry-after"]) >= 1
            with lock:
                busy.append(n)

    with ThreadPoolExecutor(10) as pool:
        list(pool.map(turn, range(10)))
    items = client(a).conversations.items.list(conv.id, order="asc", limit=100).data
    texts = [(i.role, i.content[0].text) for i in items]
    assert len(texts) == 20
    for k in range(0, 20, 2):  # each question directly followed by its own answer
        assert texts[k][0] == "user" and texts[k + 1] == ("assistant", ANSWER)
    assert sorted(t for r, t in texts if r == "user") == sorted(f"Q{n}" for n in range(10))
    assert busy, "no two responses overlapped: the test did not test concurrency"


def test_a_client_gone_mid_stream_stores_what_was_delivered_and_frees_the_conversation(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.05))
    conv = client(a).conversations.create(items=[{"role": "user", "content": "Hello"}])
    body = json.dumps(
        {"model": MODEL, "input": "Q", "conversation": conv.id, "stream": True}
    ).encode()
    got = _leave_after(a, body, 8, path="/v1/responses")  # the start, 4 opening events, 3 deltas
    frames = b"".join(m.get("body", b"") for m in got).decode()
    rid = events_of(frames)[0]["response"]["id"]
    a.settled()
    stored = client(a).responses.retrieve(rid)
    assert (
        stored.status == "incomplete" and stored.incomplete_details.reason == "client_disconnected"
    )
    delivered = stored.output_text
    assert delivered and ANSWER.startswith(delivered) and delivered != ANSWER
    # nothing was added to the conversation, and it is free for the next response
    items = client(a).conversations.items.list(conv.id, order="asc").data
    assert [i.content[0].text for i in items] == ["Hello"]
    client(a).responses.create(model=MODEL, input="again", conversation=conv.id)
    assert len(client(a).conversations.items.list(conv.id).data) == 3


def test_a_stream_that_fails_is_stored_failed_and_adds_nothing(
    make_gateway: GatewayFactory,
) -> None:
    a = make_gateway(engine=FakeEngine(SCRIPT, fail_after=3))
    conv = client(a).conversations.create()
    events = stream_raw(a, {"model": MODEL, "input": "Q", "conversation": conv.id})
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"]
    assert failed["output"][0]["content"][0]["text"] == "".join(SCRIPT[:3])
    assert client(a).responses.retrieve(failed["id"]).status == "failed"
    assert client(a).conversations.items.list(conv.id).data == []
    with pytest.raises(openai.APIStatusError) as exc:  # whole: an error reply, nothing stored
        client(a).responses.create(model=MODEL, input="Q", conversation=conv.id)
    assert exc.value.status_code == 503
    assert client(a).conversations.items.list(conv.id).data == []


def test_conversation_routes_through_the_client(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    c = client(a)
    conv = c.conversations.create(
        items=[{"role": "user", "content": f"m{n}"} for n in range(20)], metadata={"a": "1"}
    )
    with pytest.raises(openai.BadRequestError):  # 21 first items
        c.conversations.create(items=[{"role": "user", "content": "x"}] * 21)
    assert c.conversations.update(conv.id, metadata={"b": "2"}).metadata == {"b": "2"}
    assert c.conversations.retrieve(conv.id).metadata == {"b": "2"}
    added = c.conversations.items.create(conv.id, items=[{"role": "assistant", "content": "ok"}])
    assert added.data[0].role == "assistant"
    newest = c.conversations.items.list(conv.id, limit=1)  # desc by default
    assert newest.data[0].id == added.data[0].id and newest.has_more
    seen = [i.content[0].text for i in c.conversations.items.list(conv.id, order="asc", limit=7)]
    assert seen == [f"m{n}" for n in range(20)] + ["ok"]  # the client follows the cursor
    one = c.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    assert one.content[0].text == "ok"
    c.conversations.items.delete(added.data[0].id, conversation_id=conv.id)
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    r = c.responses.create(model=MODEL, input="last", conversation=conv.id)
    assert [i.id for i in c.responses.input_items.list(r.id)] == [
        i.id for i in c.conversations.items.list(conv.id, limit=2).data[1:]
    ]
    assert c.responses.delete(r.id) is None
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    assert c.conversations.delete(conv.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.list(conv.id)


def test_a_refused_or_failed_response_gives_its_concurrency_slot_back(
    make_gateway: GatewayFactory,
) -> None:
    from tests.gateway.conftest import plan
    from tests.gateway.test_faults import leases

    a = make_gateway(plans={"one": plan(concurrent_requests=1)}, key_plan="one")
    cases = [
        {"model": MODEL, "input": "x", "previous_response_id": "resp_nope"},
        {"model": MODEL, "input": "x " * 3000},  # over the context
        {"model": MODEL, "input": "x", "conversation": "conv_nope", "stream": True},
    ]
    for body in cases:
        r = a.client.post("/v1/responses", headers=a.auth, json=body)
        assert 400 <= r.status_code < 500, r.text
        a.settled()
        assert leases(a) == 0, body
    ok = a.client.post("/v1/responses", headers=a.auth, json={"model": MODEL, "input": "x"})
    assert ok.status_code == 200  # the one slot is free


def test_identifiers_up_to_512_characters_are_kept(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    ids = {"user": "u" * 512, "safety_identifier": "s" * 512, "prompt_cache_key": "p" * 512}
    r = a.client.post("/v1/responses", headers=a.auth, json={"model": MODEL, "input": "x", **ids})
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ids} == ids


def test_stored_objects_expire_by_default(make_gateway: GatewayFactory) -> None:
    a = make_gateway()
    made = a.client.post("/v1/conversations", headers=a.auth, json={"metadata": {"k": "v"}})
    assert made.status_code == 200, made.text
    cid = made.json()["id"]
    r = a.client.post("/v1/responses", headers=a.auth, json={"model": MODEL, "input": "x"})
    rid = r.json()["id"]
    month = 30 * 86400
    assert month - 60 < a.redis.ttl(f"zl:conv:{{{cid}}}") <= month
    assert month - 60 < a.redis.ttl(f"zl:resp:{{{rid}}}") <= month


@pytest.mark.parametrize("stream", [False, True])
def test_deleting_a_conversation_while_a_response_runs_on_it_is_a_409(
    make_gateway: GatewayFactory, stream: bool
) -> None:
    a = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.05))
    conv = client(a).conversations.create(items=[{"role": "user", "content": "Hello"}])
    body = {"model": MODEL, "input": "Q", "conversation": conv.id, "stream": stream}
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(a.client.post, "/v1/responses", headers=a.auth, json=body)
        deadline = time.monotonic() + 10
        while a.engine.requests == 0:  # the response is being generated
            assert time.monotonic() < deadline
            time.sleep(0.01)
        refused = a.client.delete(f"/v1/conversations/{conv.id}", headers=a.auth)
        done = running.result(timeout=30)
    err = assert_openai_error(refused, 409, "invalid_request_error")
    assert err["code"] == "conversation_busy" and refused.headers["retry-after"]
    assert done.status_code == 200
    final = events_of(done.text)[-1]["response"] if stream else done.json()
    assert final["status"] == "completed"
    # the response's turn is in the conversation, and once it ended the delete goes through
    assert len(client(a).conversations.items.list(conv.id).data) == 3
    assert a.client.delete(f"/v1/conversations/{conv.id}", headers=a.auth).status_code == 200


def test_a_response_that_ends_after_its_tenants_purge_is_not_stored(
    make_gateway: GatewayFactory,
) -> None:
    from tests.gateway.conftest import ADMIN_KEY

    a = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.05))
    tenant = a.record().owner
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"model": MODEL, "input": "Q"}
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(a.client.post, "/v1/responses", headers=a.auth, json=body)
        deadline = time.monotonic() + 10
        while a.engine.requests == 0:  # admitted, and being generated
            assert time.monotonic() < deadline
            time.sleep(0.01)
        purged = a.client.delete(f"/admin/tenants/{tenant}/objects", headers=admin)
        done = running.result(timeout=30)
    assert purged.status_code == 200 and done.status_code == 200
    answer = done.json()
    assert answer["status"] == "completed" and answer["store"] is False  # delivered, not kept
    gone = a.client.get(f"/v1/responses/{answer['id']}", headers=a.auth)
    assert gone.status_code == 404
    listed = a.client.get(f"/admin/tenants/{tenant}", headers=admin).json()
    assert listed["objects"]["data"] == []
    # a response admitted after the purge is stored as usual
    after = a.client.post("/v1/responses", headers=a.auth, json=body).json()
    assert after["store"] is True
    assert a.client.get(f"/v1/responses/{after['id']}", headers=a.auth).status_code == 200
