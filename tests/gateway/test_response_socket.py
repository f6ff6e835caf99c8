"""The WebSocket mode of the Responses API, through the official openai package's
`responses.connect()` and a plain WebSocket client over real HTTP (uvicorn), the scripted
engine behind the gateway and a real Redis. Every event is validated against the Open Responses
specification."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from zerolayer.engines.fake import FakeEngine
from zerolayer.errors import RateLimited
from zerolayer.gateway import response_socket

from tests.gateway.conftest import SCRIPT, Gateway, GatewayFactory
from tests.gateway.openresponses import check, check_event
from tests.gateway.test_responses import client, raw

MODEL = "smollm2-135m"
ANSWER = "".join(SCRIPT)
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


def socket(gw: Gateway, key: str | None = None) -> ClientConnection:
    url = gw.http().replace("http://", "ws://") + "/responses"
    return connect(url, additional_headers={"Authorization": f"Bearer {key or gw.key}"})


def turn(ws: ClientConnection, event: dict[str, Any]) -> list[dict[str, Any]]:
    """Send one client event; the events that answer it, up to its terminal or error event."""
    ws.send(json.dumps(event))
    out: list[dict[str, Any]] = []
    while True:
        ev = json.loads(ws.recv(timeout=30))
        out.append(ev)
        if ev["type"] in TERMINAL or ev["type"] == "error":
            return out


def test_turns_over_one_socket_continue_an_unstored_chain_with_the_openai_package(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    oc = client(gw)
    with oc.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Capital of France?", store=False)
        first = [ev.to_dict() for ev in _until_terminal(conn)]
        rid = first[-1]["response"]["id"]
        # nothing of it is stored, yet the connection continues it (only the new input sent)
        assert raw(gw, f"/responses/{rid}").status_code == 404
        conn.response.create(
            model=MODEL, input="And of Spain?", previous_response_id=rid, store=False
        )
        second = [ev.to_dict() for ev in _until_terminal(conn)]
    for ev in first + second:
        check_event(ev)
    assert [ev["sequence_number"] for ev in second] == list(range(len(second)))
    done = second[-1]["response"]
    assert second[-1]["type"] == "response.completed" and done["previous_response_id"] == rid
    assert done["output"][0]["content"][0]["text"] == ANSWER
    expected = gw.prompts.chat(
        [
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": ANSWER},
            {"role": "user", "content": "And of Spain?"},
        ]
    )
    assert done["usage"]["input_tokens"] == len(expected)
    gw.billed()  # each turn is billed as the same request over HTTP would be
    for resp in (first[-1]["response"], done):
        ev = gw.event(resp["id"])["data"]
        assert (ev["prompt_tokens"], ev["completion_tokens"]) == (
            resp["usage"]["input_tokens"],
            resp["usage"]["output_tokens"],
        )


def _until_terminal(conn: Any) -> list[Any]:
    out = []
    for ev in conn:
        out.append(ev)
        if ev.type in TERMINAL or ev.type == "error":
            return out
    raise AssertionError("the connection closed before the turn ended")


def test_a_stored_turn_over_the_socket_is_the_same_response_as_over_http(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    with socket(gw) as ws:
        events = turn(ws, {"type": "response.create", "model": MODEL, "input": "Hi"})
        assert "[DONE]" not in json.dumps(events)  # a server-sent frame only
        kept = events[-1]["response"]
        # a later turn continues it from the store, on the same or another connection
        again = turn(
            ws,
            {
                "type": "response.create",
                "model": MODEL,
                "input": "More",
                "previous_response_id": kept["id"],
            },
        )
    stored = raw(gw, f"/responses/{kept['id']}").json()
    check("ResponseResource", stored)
    assert stored["output"] == kept["output"] and stored["status"] == "completed"
    second = raw(gw, f"/responses/{again[-1]['response']['id']}").json()
    assert second["previous_response_id"] == kept["id"]
    kinds = [ev["type"] for ev in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"


def create(**fields: Any) -> dict[str, Any]:
    return {"type": "response.create", "model": MODEL, "input": "x", **fields}


@pytest.mark.parametrize(
    ("event", "param", "says"),
    [
        ({"type": "response.cancel"}, "type", "unknown client event type"),
        ({"model": MODEL, "input": "x"}, "type", "unknown client event type"),
        (create(stream=True), "stream", "implicit"),
        (create(generate=False), "generate", "not served"),
        (create(input=3), "input", ""),
        (create(colour=1), "colour", "Unrecognized"),
        (create(stream_id=7), "stream_id", ""),
        (create(previous_response_id="resp_none"), "previous_response_id", ""),
    ],
)
def test_a_bad_event_is_an_error_event_and_the_connection_goes_on(
    make_gateway: GatewayFactory, event: dict[str, Any], param: str, says: str
) -> None:
    gw = make_gateway()
    with socket(gw) as ws:
        bad = turn(ws, event)
        assert len(bad) == 1 and bad[0]["type"] == "error", bad
        err = bad[0]["error"]
        assert bad[0]["status"] in (400, 404) and err["param"] == param and says in err["message"]
        ws.send("not json")
        assert json.loads(ws.recv(timeout=30))["error"]["message"].startswith("the event is not")
        ok = turn(ws, {"type": "response.create", "model": MODEL, "input": "x", "stream_id": "a"})
    assert ok[-1]["type"] == "response.completed"
    assert {ev["stream_id"] for ev in ok} == {"a"}  # the lane is echoed on each event


def test_an_unknown_key_is_refused_at_the_handshake(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    with pytest.raises(InvalidStatus) as refused:
        socket(gw, key="zl-not-a-key").close()
    reply = refused.value.response
    assert reply.status_code == 401
    assert "unknown or revoked" in json.loads(reply.body)["error"]["message"]


def test_a_client_that_leaves_mid_turn_is_billed_what_was_delivered(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT * 50, delay_s=0.02))
    with socket(gw) as ws:
        ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "Q"}))
        rid = json.loads(ws.recv(timeout=30))["response"]["id"]
        while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
    deadline = time.monotonic() + 30  # the gateway sees the client gone at its next send
    while raw(gw, f"/responses/{rid}").status_code == 404:
        assert time.monotonic() < deadline, "the response was not kept"
        time.sleep(0.05)
    gw.billed()
    stored = client(gw).responses.retrieve(rid)
    assert stored.status == "incomplete"
    assert stored.incomplete_details is not None
    assert stored.incomplete_details.reason == "client_disconnected"
    billed = gw.event(rid)["data"]["completion_tokens"]
    assert billed >= 1  # some tokens were delivered
    assert billed < len(SCRIPT) * 50  # not the whole answer
    assert stored.usage is not None
    assert stored.usage.output_tokens == billed


def test_a_connection_ends_at_its_time_limit(
    make_gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = make_gateway()
    monkeypatch.setattr(response_socket, "MAX_CONNECTION_S", 0.5)
    with socket(gw) as ws:
        ev = json.loads(ws.recv(timeout=30))
        assert ev["type"] == "error"
        assert ev["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosedOK) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_http_get_of_the_socket_path_is_not_a_response(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    r = httpx.get(gw.http() + "/responses", headers=gw.auth)
    assert r.status_code in (404, 405) and "error" in r.json()


def test_sockets_are_capped_per_replica_and_per_key(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    gw.app.state.sockets = response_socket.Sockets(1)  # a replica that takes one socket
    with socket(gw) as ws:
        with pytest.raises(InvalidStatus) as refused:
            socket(gw).close()
        assert refused.value.response.status_code == 503
        assert json.loads(refused.value.response.body)["error"]["code"] == "too_many_sockets"
        assert turn(ws, create())[-1]["type"] == "response.completed"  # the open one serves
    # closed: its slot is free again
    with socket(gw) as ws:
        assert turn(ws, create())[-1]["type"] == "response.completed"
    # per key: the plan's concurrent_requests
    sockets = response_socket.Sockets(10)
    record = gw.record()
    sockets.take(record, 2)
    sockets.take(record, 2)
    with pytest.raises(RateLimited) as over:
        sockets.take(record, 2)
    assert over.value.code == "concurrent_sockets" and over.value.status_code == 429
    sockets.give(record)
    sockets.take(record, 2)
    assert sockets.open == {record.key_id: 2}
