"""The promises of the Open Responses specification, checked on the started platform (the real
model, Ray Serve, HAProxy, Redis) over plain HTTP and a plain WebSocket, as any client of the
specification would see them: every response body and stream event validates against the
specification's schemas (tests/data/openresponses), streams end with `data: [DONE]`, tools and
the function-call round trip, `previous_response_id`, compaction, the WebSocket mode; and image
and file inputs keep their documented 400. (The specification's own TypeScript suite is
published on no package registry; these cases are this repository's.)"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect
from zerolayer.serve.launcher import Platform

from tests.gateway.openresponses import check, check_event

pytestmark = pytest.mark.integration

MODEL = "smollm2-135m"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "maxLength": 40}},
        "required": ["location"],
    },
}
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def _post(platform: Platform, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        platform.base_url + path,
        headers={"Authorization": f"Bearer {platform.key}"},
        json={"max_output_tokens": 24, "temperature": 0, **body},
        timeout=120,
    )


def _created(platform: Platform, body: dict[str, Any]) -> dict[str, Any]:
    r = _post(platform, "/responses", body)
    assert r.status_code == 200, r.text
    obj: dict[str, Any] = r.json()
    check("ResponseResource", obj)
    assert obj["output"] and obj["status"] in ("completed", "incomplete"), obj
    return obj


def _streamed(platform: Platform, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = _post(platform, "/responses", {**body, "stream": True})
    assert r.status_code == 200, r.text
    blocks = r.text.strip().split("\n\n")
    assert blocks[-1] == "data: [DONE]", blocks[-3:]  # the terminal frame, after the last event
    events = []
    for block in blocks[:-1]:
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        event = json.loads(fields["data"])
        assert fields["event"] == event["type"]
        check_event(event)
        events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] in TERMINAL
    check("ResponseResource", events[-1]["response"])
    return events


MESSAGES = {
    "basic": [{"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}],
    "system": [
        {"type": "message", "role": "system", "content": "You are a pirate."},
        {"type": "message", "role": "user", "content": "Say hello."},
    ],
    "multi-turn": [
        {"type": "message", "role": "user", "content": "My name is Alice."},
        {"type": "message", "role": "assistant", "content": "Hello Alice!"},
        {"type": "message", "role": "user", "content": "What is my name?"},
    ],
}


@pytest.mark.parametrize("case", sorted(MESSAGES))
def test_text_responses_whole_and_streamed(platform: Platform, case: str) -> None:
    _created(platform, {"model": MODEL, "input": MESSAGES[case]})
    kinds = [e["type"] for e in _streamed(platform, {"model": MODEL, "input": MESSAGES[case]})]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds and "response.output_text.done" in kinds


def test_tool_calls_whole_streamed_and_round_tripped(platform: Platform) -> None:
    ask = "What's the weather like in San Francisco?"
    first = _created(platform, {"model": MODEL, "input": ask, "tools": [WEATHER]})
    assert first["output"]  # auto: the small model may answer or call
    events = _streamed(
        platform,
        {
            "model": MODEL,
            "input": ask,
            "tools": [WEATHER],
            "tool_choice": "required",
            "max_output_tokens": 60,
        },
    )
    kinds = [e["type"] for e in events]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added and added[0]["item"]["type"] == "function_call"
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    named = _created(
        platform,
        {
            "model": MODEL,
            "input": "Use the weather tool for San Francisco.",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "max_output_tokens": 60,  # the whole call
        },
    )
    call = next(o for o in named["output"] if o["type"] == "function_call")
    assert call["name"] == "get_weather" and "location" in json.loads(call["arguments"])
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "18 C"}
    after = _created(
        platform,
        {
            "model": MODEL,
            "previous_response_id": named["id"],
            "input": [result],
            "tools": [WEATHER],
        },
    )
    assert after["previous_response_id"] == named["id"]


def test_previous_response_id_and_compaction(platform: Platform) -> None:
    first = _created(platform, {"model": MODEL, "input": "Remember the word papaya."})
    second = _created(
        platform, {"model": MODEL, "previous_response_id": first["id"], "input": "Which word?"}
    )
    assert second["previous_response_id"] == first["id"]
    r = httpx.post(
        platform.base_url + "/responses/compact",
        headers={"Authorization": f"Bearer {platform.key}"},
        json={"model": MODEL, "previous_response_id": second["id"]},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    compacted = r.json()
    check("CompactResource", compacted)
    assert [o["type"] for o in compacted["output"]] == ["message", "message", "compaction"]
    _created(
        platform,
        {"model": MODEL, "input": compacted["output"] + [{"role": "user", "content": "And?"}]},
    )


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        {
            "type": "input_file",
            "filename": "a.pdf",
            "file_data": "data:application/pdf;base64,JVBE",
        },
    ],
)
def test_image_and_file_inputs_keep_their_documented_400(
    platform: Platform, part: dict[str, Any]
) -> None:
    content = [{"type": "input_text", "text": "What is this?"}, part]
    r = _post(
        platform, "/responses", {"model": MODEL, "input": [{"role": "user", "content": content}]}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "input[0].content[1]"


def test_the_websocket_mode(platform: Platform) -> None:
    url = platform.base_url.replace("http://", "ws://") + "/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {platform.key}"}) as ws:

        def turn(event: dict[str, Any]) -> list[dict[str, Any]]:
            ws.send(json.dumps({"type": "response.create", "max_output_tokens": 16, **event}))
            out = []
            while True:
                ev = json.loads(ws.recv(timeout=120))
                out.append(ev)
                if ev["type"] in TERMINAL or ev["type"] == "error":
                    return out

        first = turn({"model": MODEL, "input": "Hello!", "store": False})
        for ev in first:
            check_event(ev)
        rid = first[-1]["response"]["id"]
        second = turn({"model": MODEL, "input": "Again.", "previous_response_id": rid})
        assert second[-1]["type"] in TERMINAL[:2], second[-1]
        assert (
            second[-1]["response"]["usage"]["input_tokens"]
            > (first[-1]["response"]["usage"]["input_tokens"])
        )
        bad = turn({"model": MODEL, "input": "x", "temperature": "hot"})
        assert bad[-1]["type"] == "error" and bad[-1]["status"] == 400
        assert bad[-1]["error"]["param"] == "temperature"
        tool = turn(
            {
                "model": MODEL,
                "input": "Weather in Rome?",
                "tools": [WEATHER],
                "tool_choice": "required",
                "max_output_tokens": 60,  # the whole call
            }
        )
        assert any(e["type"] == "response.function_call_arguments.done" for e in tool)
