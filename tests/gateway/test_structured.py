"""Structured outputs and log-probabilities at the gateway, over the scripted engine: what a
request's response_format becomes (the grammar the tier decodes under, and the system turn
that describes it), schemas the grammar cannot honour refused with the path of the keyword,
and logprobs in OpenAI's shapes, whole and streamed, on chat and text completions. The real
engines' grammars and log-probabilities are tested in tests/engines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.gateway.conftest import SCRIPT, Gateway
from tests.gateway.test_api import assert_openai_error

CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "A cat, please"}]}
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def sse_data(gw: Gateway, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON data of each server-sent event of a streamed request."""
    out = []
    with gw.client.stream("POST", url, headers=gw.auth, json={**body, "stream": True}) as s:
        for line in s.iter_lines():
            if line.startswith("data: {"):
                out.append(json.loads(line[6:]))
    return out


def _json_schema(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "cat", "schema": schema, "strict": True}}


def test_a_json_schema_becomes_the_tiers_grammar_and_a_billed_system_turn(
    gateway: Gateway,
) -> None:
    plain = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=CHAT)
    body = {**CHAT, "response_format": _json_schema(SCHEMA)}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    spec = gateway.engine.specs[-1]
    assert spec.constraint is not None and spec.constraint.kind == "json_schema"
    assert json.loads(spec.constraint.spec) == SCHEMA
    assert gateway.engine.specs[0].constraint is None
    # the schema is described to the model in the prompt, and counted as prompt tokens
    told = r.json()["usage"]["prompt_tokens"] - plain.json()["usage"]["prompt_tokens"]
    assert told > len(json.dumps(SCHEMA)) // 8, told
    r = gateway.client.post(
        "/v1/chat/completions",
        headers=gateway.auth,
        json={**CHAT, "response_format": {"type": "json_object"}},
    )
    assert r.status_code == 200 and gateway.engine.specs[-1].constraint.kind == "json_object"
    r = gateway.client.post(
        "/v1/chat/completions",
        headers=gateway.auth,
        json={**CHAT, "response_format": {"type": "text"}},
    )
    assert r.status_code == 200 and gateway.engine.specs[-1].constraint is None


@pytest.mark.parametrize(
    ("schema", "param"),
    [
        (
            {"type": "object", "properties": {"a": {"type": "string", "patternProperties": {}}}},
            "response_format.json_schema.schema.properties.a.patternProperties",
        ),
        (
            {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"not": {}}]}}},
            "response_format.json_schema.schema.properties.a.anyOf[1].not",
        ),
        ({"type": "thing"}, "response_format.json_schema.schema.type"),
        ({"type": "object", "required": "a"}, "response_format.json_schema.schema.required"),
        (
            {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
            "response_format.json_schema.schema",
        ),
        ([1, 2], "response_format.json_schema.schema"),
    ],
)
def test_a_schema_the_grammar_cannot_honour_is_a_400_naming_its_path(
    gateway: Gateway, schema: Any, param: str
) -> None:
    body = {**CHAT, "response_format": _json_schema(schema)}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    err = assert_openai_error(r, 400)
    assert err["param"] == param, err
    assert gateway.engine.requests == 0


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ({"type": "json_schema"}, "response_format"),
        ({"type": "xml"}, "response_format.type"),
        (
            {"type": "json_schema", "json_schema": {"name": "has space", "schema": {}}},
            "response_format.json_schema.name",
        ),
    ],
)
def test_a_malformed_response_format_is_a_400(
    gateway: Gateway, response_format: Any, param: str
) -> None:
    body = {**CHAT, "response_format": response_format}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    err = assert_openai_error(r, 400)
    assert err["param"] == param, err


def test_chat_logprobs_whole_and_streamed(gateway: Gateway) -> None:
    body = {**CHAT, "logprobs": True, "top_logprobs": 2}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    assert gateway.engine.specs[-1].logprobs == 2
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == SCRIPT
    assert [c["logprob"] for c in content] == [-(i + 1) / 10 for i in range(len(SCRIPT))]
    assert all(c["bytes"] == list(c["token"].encode()) for c in content)
    assert all([t["token"] for t in c["top_logprobs"]] == ["alt0", "alt1"] for c in content)
    # streamed: each token's frame carries its own entry
    seen: list[dict[str, Any]] = []
    for data in sse_data(gateway, "/v1/chat/completions", body):
        choice = data["choices"][0]
        if choice["logprobs"] is not None:
            seen += choice["logprobs"]["content"]
    assert [c["token"] for c in seen] == SCRIPT
    # not asked: null, and the engine computes none
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=CHAT)
    assert r.json()["choices"][0]["logprobs"] is None and gateway.engine.specs[-1].logprobs is None
    r = gateway.client.post(
        "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "logprobs": True}
    )
    assert all(c["top_logprobs"] == [] for c in r.json()["choices"][0]["logprobs"]["content"])


def test_completion_logprobs_in_the_legacy_shape(gateway: Gateway) -> None:
    body = {"model": "smollm2-135m", "prompt": "The", "logprobs": 3}
    r = gateway.client.post("/v1/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert lp["tokens"] == SCRIPT
    assert lp["token_logprobs"] == [-(i + 1) / 10 for i in range(len(SCRIPT))]
    assert lp["top_logprobs"][0] == {"alt0": -0.1, "alt1": -0.2, "alt2": -0.3}
    text = r.json()["choices"][0]["text"]
    pairs = zip(lp["text_offset"], lp["tokens"], strict=True)
    assert [text[o : o + len(t)] for o, t in pairs] == SCRIPT
    r = gateway.client.post("/v1/completions", headers=gateway.auth, json={**body, "logprobs": 0})
    assert r.json()["choices"][0]["logprobs"]["top_logprobs"] is None


def test_responses_text_format_and_logprobs(gateway: Gateway) -> None:
    fmt = {"type": "json_schema", "name": "cat", "schema": SCHEMA, "strict": True}
    body = {
        "model": "smollm2-135m",
        "input": "A cat, please",
        "text": {"format": fmt},
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 1,
    }
    r = gateway.client.post("/v1/responses", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    obj = r.json()
    spec = gateway.engine.specs[-1]
    assert spec.constraint is not None and json.loads(spec.constraint.spec) == SCHEMA
    assert spec.logprobs == 1
    assert obj["text"]["format"] == {**fmt, "description": None}
    assert obj["top_logprobs"] == 1
    part = obj["output"][0]["content"][0]
    assert [e["token"] for e in part["logprobs"]] == SCRIPT
    assert all(len(e["top_logprobs"]) == 1 for e in part["logprobs"])
    # the stored response keeps them; streamed, each delta carries its tokens' entries
    got = gateway.client.get(f"/v1/responses/{obj['id']}", headers=gateway.auth).json()
    assert got["output"][0]["content"][0]["logprobs"] == part["logprobs"]
    deltas: list[dict[str, Any]] = []
    done: list[dict[str, Any]] = []
    for ev in sse_data(gateway, "/v1/responses", body):
        if ev["type"] == "response.output_text.delta":
            deltas += ev["logprobs"]
        elif ev["type"] == "response.output_text.done":
            done = ev["logprobs"]
    assert [e["token"] for e in deltas] == SCRIPT and done == deltas
    # json_object, and plain text again: no grammar, no logprobs
    body = {"model": "smollm2-135m", "input": "x", "text": {"format": {"type": "json_object"}}}
    r = gateway.client.post("/v1/responses", headers=gateway.auth, json=body)
    assert r.status_code == 200 and gateway.engine.specs[-1].constraint.kind == "json_object"
    r = gateway.client.post(
        "/v1/responses", headers=gateway.auth, json={"model": "smollm2-135m", "input": "x"}
    )
    assert gateway.engine.specs[-1].constraint is None and gateway.engine.specs[-1].logprobs is None
    assert r.json()["output"][0]["content"][0]["logprobs"] == []


def test_a_conversation_keeps_the_answer_without_its_logprobs(gateway: Gateway) -> None:
    conv = gateway.client.post("/v1/conversations", headers=gateway.auth, json={}).json()
    body = {
        "model": "smollm2-135m",
        "input": "Hi",
        "conversation": conv["id"],
        "top_logprobs": 3,
    }
    r = gateway.client.post("/v1/responses", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    assert len(r.json()["output"][0]["content"][0]["logprobs"]) == len(SCRIPT)
    items = gateway.client.get(
        f"/v1/conversations/{conv['id']}/items", headers=gateway.auth
    ).json()["data"]
    answer = next(i for i in items if i.get("role") == "assistant")
    assert answer["content"][0]["text"] == "".join(SCRIPT)
    assert answer["content"][0]["logprobs"] == []


def test_n_choices_whole_and_streamed_with_the_prompt_billed_once(gateway: Gateway) -> None:
    one = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=CHAT).json()
    body = {**CHAT, "n": 3, "seed": 11, "logprobs": True}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert [c["index"] for c in got["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == "".join(SCRIPT) for c in got["choices"])
    assert all(len(c["logprobs"]["content"]) == len(SCRIPT) for c in got["choices"])
    assert got["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert got["usage"]["completion_tokens"] == 3 * len(SCRIPT)
    specs = gateway.engine.specs[-3:]
    assert sorted(s.seed for s in specs) == [11, 12, 13]  # each choice its own, reproducible
    assert len({s.request_id for s in specs}) == 3
    # streamed: each choice's chunks carry its index, each ends, one usage chunk for all
    frames = sse_data(
        gateway,
        "/v1/chat/completions",
        {**CHAT, "n": 2, "stream_options": {"include_usage": True}},
    )
    text = {0: "", 1: ""}
    finished = {}
    for f in frames:
        for c in f["choices"]:
            text[c["index"]] += c["delta"].get("content") or ""
            if c["finish_reason"]:
                finished[c["index"]] = c["finish_reason"]
    assert text == {0: "".join(SCRIPT), 1: "".join(SCRIPT)}
    assert finished == {0: "stop", 1: "stop"}
    assert frames[-1]["usage"]["completion_tokens"] == 2 * len(SCRIPT)
    assert frames[-1]["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    # text completions too
    r = gateway.client.post(
        "/v1/completions",
        headers=gateway.auth,
        json={"model": "smollm2-135m", "prompt": "The", "n": 2},
    )
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]
    assert r.json()["usage"]["completion_tokens"] == 2 * len(SCRIPT)
