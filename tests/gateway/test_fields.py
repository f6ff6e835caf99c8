"""Every request field of OpenAI's published OpenAPI document for chat completions, text
completions and the Responses API (tests/data/openai/openapi-subset.json) is either honoured
or refused with a 400 naming it, never ignored: the table below gives each field a value that
asks for something and what the gateway does with it. A field OpenAI adds fails this test
until it is given a row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.test_api import assert_openai_error

SUBSET = Path(__file__).resolve().parents[1] / "data" / "openai" / "openapi-subset.json"
OPENAI = json.loads(SUBSET.read_text())["paths"]
MODEL = "smollm2-135m"
BASE = {
    "/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]},
    "/completions": {"model": MODEL, "prompt": "Hi"},
    "/responses": {"model": MODEL, "input": "Hi"},
}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
FLAT_TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}

# field -> (a value that asks for something, "ok" if it is served else "400")
SHARED: dict[str, tuple[Any, str]] = {
    "model": (MODEL, "ok"),
    "max_tokens": (4, "ok"),
    "temperature": (0.5, "ok"),
    "top_p": (0.9, "ok"),
    "seed": (3, "ok"),
    "stop": (["\\n\\n"], "ok"),
    "stream": (True, "ok"),
    "user": ("u-1", "ok"),
    "n": (2, "ok"),
    "frequency_penalty": (0.5, "400"),
    "presence_penalty": (0.5, "400"),
    "logit_bias": ({"50256": -100}, "400"),
}
TABLE: dict[str, dict[str, tuple[Any, str]]] = {
    "/chat/completions": {
        **SHARED,
        "messages": ([{"role": "user", "content": "Hello"}], "ok"),
        "max_completion_tokens": (4, "ok"),
        "stream_options": ({"include_usage": True}, "ok"),
        "logprobs": (True, "ok"),
        "top_logprobs": (2, "ok"),  # with logprobs (see EXTRA)
        "response_format": (SCHEMA, "ok"),
        "tools": ([TOOL], "ok"),
        "tool_choice": ("required", "ok"),  # with tools
        "parallel_tool_calls": (False, "ok"),
        "safety_identifier": ("s-1", "ok"),
        "prompt_cache_key": ("k-1", "ok"),
        "audio": ({"voice": "alloy", "format": "mp3"}, "400"),
        "modalities": (["text", "audio"], "400"),
        "function_call": ("auto", "400"),
        "functions": ([{"name": "f"}], "400"),
        "metadata": ({"a": "b"}, "400"),
        "store": (True, "400"),
        "moderation": ({"model": "x"}, "400"),
        "prediction": ({"type": "content", "content": "x"}, "400"),
        "prompt_cache_options": ({"x": 1}, "400"),
        "prompt_cache_retention": ("24h", "400"),
        "reasoning_effort": ("high", "400"),
        "service_tier": ("flex", "400"),
        "verbosity": ("low", "400"),
        "web_search_options": ({}, "400"),
    },
    "/completions": {
        **SHARED,
        "prompt": ("Once upon a time", "ok"),
        "stream_options": ({"include_usage": True}, "ok"),
        "logprobs": (2, "ok"),
        "best_of": (2, "400"),
        "echo": (True, "400"),
        "suffix": ("end", "400"),
    },
    "/responses": {
        "model": (MODEL, "ok"),
        "input": ("Hello", "ok"),
        "instructions": ("Be brief.", "ok"),
        "max_output_tokens": (4, "ok"),
        "temperature": (0.5, "ok"),
        "top_p": (0.9, "ok"),
        "stream": (True, "ok"),
        "store": (False, "ok"),
        "metadata": ({"a": "b"}, "ok"),
        "truncation": ("auto", "ok"),
        "user": ("u-1", "ok"),
        "safety_identifier": ("s-1", "ok"),
        "prompt_cache_key": ("k-1", "ok"),
        "include": (["message.output_text.logprobs"], "ok"),
        "top_logprobs": (2, "ok"),
        "text": ({"format": {"type": "json_object"}}, "ok"),
        "tools": ([FLAT_TOOL], "ok"),
        "tool_choice": ("required", "ok"),  # with tools
        "parallel_tool_calls": (False, "ok"),
        "max_tool_calls": (1, "ok"),
        "previous_response_id": ("resp_missing", "404"),
        "conversation": ("conv_missing", "404"),
        "background": (True, "400"),
        "reasoning": ({"effort": "high"}, "400"),
        "context_management": ([{"type": "compaction"}], "400"),
        "moderation": ({"model": "x"}, "400"),
        "prompt": ({"id": "pmpt_1"}, "400"),
        "prompt_cache_options": ({"x": 1}, "400"),
        "prompt_cache_retention": ("24h", "400"),
        "service_tier": ("flex", "400"),
        "stream_options": ({"include_obfuscation": True}, "400"),
    },
}
# what a field needs beside it to be meaningful
EXTRA = {
    ("/chat/completions", "top_logprobs"): {"logprobs": True},
    ("/chat/completions", "tool_choice"): {"tools": [TOOL]},
    ("/responses", "tool_choice"): {"tools": [FLAT_TOOL]},
}
CASES = [(path, field) for path, rows in TABLE.items() for field in rows]


@pytest.mark.parametrize("path", list(TABLE))
def test_every_field_of_openais_document_has_a_row(path: str) -> None:
    theirs = set(OPENAI[path]["post"]["body"]["properties"])
    assert theirs <= set(TABLE[path]), sorted(theirs - set(TABLE[path]))


@pytest.mark.parametrize(("path", "field"), CASES)
def test_a_field_is_honoured_or_refused_by_name(gateway: Gateway, path: str, field: str) -> None:
    value, outcome = TABLE[path][field]
    body = {**BASE[path], **EXTRA.get((path, field), {}), field: value}
    r = gateway.client.post("/v1" + path, headers=gateway.auth, json=body)
    if outcome == "ok":
        assert r.status_code == 200, r.text
        return
    err = assert_openai_error(r, int(outcome))
    assert err["param"] == field, err


@pytest.mark.parametrize("path", list(TABLE))
def test_a_field_no_one_defines_is_refused(gateway: Gateway, path: str) -> None:
    body = {**BASE[path], "temprature": 0.5}
    err = assert_openai_error(
        gateway.client.post("/v1" + path, headers=gateway.auth, json=body), 400
    )
    assert err["param"] == "temprature" and "Unrecognized" in err["message"]


def _unserved() -> list[tuple[str, str]]:
    from zerolayer.gateway.schemas import NOT_SERVED

    return [(p, f) for p, f in CASES if TABLE[p][f][1] == "400" and f in NOT_SERVED]


@pytest.mark.parametrize(("path", "field"), _unserved())
def test_a_refused_field_is_accepted_when_it_asks_for_nothing(
    gateway: Gateway, path: str, field: str
) -> None:
    from zerolayer.gateway.schemas import NOT_SERVED

    for value in NOT_SERVED[field][0]:  # null, 0, false, [], "auto": what SDKs send by default
        body = {**BASE[path], field: value}
        r = gateway.client.post("/v1" + path, headers=gateway.auth, json=body)
        assert r.status_code == 200, (field, value, r.text)
