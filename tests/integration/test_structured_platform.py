"""What customers' applications send, through the official openai package on the started
platform (the real model on both engines, Ray Serve, Redis): on every tier a required tool
call, its result fed back for a text answer, a JSON schema answer parsed into a pydantic model
and logprobs; then auto, named, parallel and streamed calls, and a Responses round trip."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel
from zerolayer.serve.launcher import Platform

pytestmark = pytest.mark.integration

TIERS = ["baseline", "masked", "dynamic", "sparse24"]  # vLLM, vLLM, torch, torch
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time now in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class City(BaseModel):
    name: str
    country: str


def _client(platform: Platform) -> openai.OpenAI:
    return openai.OpenAI(api_key=platform.key, base_url=platform.base_url, max_retries=0)


def _forced(tool: dict) -> dict:
    """A Responses request that must call `tool` once, greedy."""
    return {
        "input": "What is the weather in Paris?",
        "tools": [tool],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 60,
        "temperature": 0,
    }


def _checked(call: object, schema: dict) -> dict:
    args = json.loads(call.function.arguments)  # type: ignore[attr-defined]
    jsonschema.validate(args, schema)
    return args


@pytest.mark.parametrize("tier", TIERS)
def test_tools_json_and_logprobs_on_every_tier(platform: Platform, tier: str) -> None:
    client = _client(platform)
    model = f"smollm2-135m:{tier}"
    first = client.chat.completions.create(
        model=model,
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,  # one call, then the answer ends
        max_tokens=60,
        temperature=0,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    _checked(call, WEATHER["function"]["parameters"])
    # the result goes back: the model answers in text (tool_choice none: no call possible)
    back = client.chat.completions.create(
        model=model,
        messages=[
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"},
        ],
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=30,
        temperature=0,
    )
    assert back.choices[0].message.content and not back.choices[0].message.tool_calls
    # billing: the tools were read as prompt tokens
    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=1)
    assert first.usage.prompt_tokens > plain.usage.prompt_tokens + 40
    parsed = client.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "Name a city in France."}],
        response_format=City,
        max_tokens=60,
        temperature=0,
    )
    assert isinstance(parsed.choices[0].message.parsed, City)
    lp = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=8, logprobs=True, top_logprobs=2, temperature=0
    )
    content = lp.choices[0].logprobs.content
    assert content and all(len(e.top_logprobs) == 2 for e in content)
    assert all(e.logprob <= 0 and e.top_logprobs[0].logprob >= e.logprob - 1e-4 for e in content)
    assert "".join(e.token for e in content) == lp.choices[0].message.content
    several = client.chat.completions.create(
        model=model, messages=ASK, max_tokens=6, n=3, temperature=1.0, seed=1
    )
    assert [c.index for c in several.choices] == [0, 1, 2]
    assert several.usage.prompt_tokens == plain.usage.prompt_tokens
    assert several.usage.completion_tokens >= 3


def test_auto_named_parallel_and_streamed_calls(platform: Platform) -> None:
    client = _client(platform)
    model = "smollm2-135m:sparse24"
    named = client.chat.completions.create(
        model=model,
        messages=ASK,
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=60,
        temperature=0,
    )
    calls = named.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    _checked(calls[0], TIME["function"]["parameters"])
    both = [{"role": "user", "content": "What are the weather and the time in Rome?"}]
    parallel = client.chat.completions.create(
        model=model,
        messages=both,
        tools=[WEATHER, TIME],
        tool_choice="required",
        max_tokens=120,
        temperature=0,
    )
    for c in parallel.choices[0].message.tool_calls:
        assert c.function.name in {"get_weather", "get_time"}
        _checked(c, WEATHER["function"]["parameters"])
    auto = client.chat.completions.create(
        model=model, messages=ASK, tools=[WEATHER], max_tokens=60, temperature=0
    )
    message = auto.choices[0].message
    assert message.content or message.tool_calls  # the model chose; either way it parses
    for c in message.tool_calls or []:
        _checked(c, WEATHER["function"]["parameters"])
    stream = client.chat.completions.create(
        model=model,
        messages=ASK,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=60,
        temperature=0,
        stream=True,
    )
    names, args, finish = [], "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        for d in chunk.choices[0].delta.tool_calls or []:
            if d.function and d.function.name:
                names.append(d.function.name)
            args += (d.function.arguments or "") if d.index == 0 else ""
        finish = chunk.choices[0].finish_reason or finish
    assert names[:1] == ["get_weather"] and finish == "tool_calls"
    jsonschema.validate(json.loads(args), WEATHER["function"]["parameters"])


def test_a_responses_round_trip_with_a_function_and_a_schema(platform: Platform) -> None:
    client = _client(platform)
    model = "smollm2-135m:dynamic"
    tool = {"type": "function", **WEATHER["function"]}
    first = client.responses.create(model=model, **_forced(tool))
    (call,) = [o for o in first.output if o.type == "function_call"][:1]
    jsonschema.validate(json.loads(call.arguments), WEATHER["function"]["parameters"])
    second = client.responses.create(
        model=model,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
        tools=[tool],
        tool_choice="none",
        max_output_tokens=30,
        temperature=0,
    )
    assert second.output_text
    parsed = client.responses.parse(
        model=model,
        input="Name a city in Italy.",
        text_format=City,
        max_output_tokens=60,
        temperature=0,
    )
    assert isinstance(parsed.output_parsed, City)


def test_a_websocket_tool_round_trip_then_a_compaction(platform: Platform) -> None:
    """WebSocket mode through the platform's proxy (HAProxy, Ray Serve's proxy, the gateway):
    a forced call, its output sent back on the same socket continuing an unstored response,
    then the chain compacted and continued from the compacted output."""
    client = _client(platform)
    model = "smollm2-135m:baseline"
    tool = {"type": "function", **WEATHER["function"]}

    def until_done(conn: object) -> list[object]:
        out = []
        for ev in conn:  # type: ignore[attr-defined]
            out.append(ev)
            if ev.type in ("response.completed", "response.incomplete", "response.failed"):
                return out
            assert ev.type != "error", ev
        raise AssertionError("the socket closed before the turn ended")

    with client.responses.connect() as conn:
        conn.response.create(model=model, store=False, **_forced(tool))
        first = until_done(conn)
        kinds = [ev.type for ev in first]  # type: ignore[attr-defined]
        assert "response.function_call_arguments.delta" in kinds
        done = first[-1].response  # type: ignore[attr-defined]
        (call,) = [o for o in done.output if o.type == "function_call"][:1]
        jsonschema.validate(json.loads(call.arguments), WEATHER["function"]["parameters"])
        conn.response.create(
            model=model,
            previous_response_id=done.id,  # not stored: the socket keeps it
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
            tools=[tool],
            tool_choice="none",
            max_output_tokens=30,
            temperature=0,
            store=False,
        )
        second = until_done(conn)[-1].response  # type: ignore[attr-defined]
    assert second.status in ("completed", "incomplete") and second.output_text
    history = [
        {"role": "user", "content": "My name is Alice and I live in Lyon."},
        {"role": "assistant", "content": "Nice to meet you, Alice."},
    ]
    compacted = client.responses.compact(model=model, input=history)  # type: ignore[arg-type]
    assert [o.type for o in compacted.output] == ["message", "compaction"]
    assert compacted.usage.output_tokens >= 1
    items = [o.to_dict(warnings=False) for o in compacted.output]
    after = client.responses.create(
        model=model,
        input=items + [{"role": "user", "content": "Where do I live?"}],  # type: ignore[arg-type]
        max_output_tokens=20,
        temperature=0,
    )
    assert after.status in ("completed", "incomplete") and after.output_text
