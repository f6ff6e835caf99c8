"""Tool calling at the gateway, over a scripted engine that writes calls in zerolayer's
default format: tools shown to the model (and billed as prompt tokens), tool_choice as the
grammar the tier decodes under, calls split out of the answer (whole and streamed, one or
several), the round trip written back for the model, and bad tools or results refused with
the path of the field. The real engines' grammar is tested in tests/engines."""

from __future__ import annotations

import json
from typing import Any

import pytest
from zerolayer.engines.fake import FakeEngine
from zerolayer.gateway.schemas import ChatCompletionRequest
from zerolayer.gateway.tools import chat_turns
from zerolayer.toolcalls import CallStream, split_calls

from tests.gateway.conftest import GatewayFactory
from tests.gateway.openresponses import check, check_event
from tests.gateway.test_api import assert_openai_error
from tests.gateway.test_structured import sse_data

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
CALL = [
    "<tool_call>\n",
    '{"name": "get_weather", ',
    '"arguments": {"city"',
    ': "Paris"}',
    "}\n</tool_call>",
]
SECOND = ["\n<tool_call>\n", '{"name": "get_time", "arguments": {}', "}\n</tool_call>"]
ASK = {
    "model": "smollm2-135m",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER, TIME],
}


def _post(gw: Any, body: dict[str, Any]) -> Any:
    return gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)


def test_a_call_is_split_out_of_the_answer_and_the_tools_are_billed(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(CALL))
    plain = _post(gw, {"model": "smollm2-135m", "messages": ASK["messages"]}).json()
    r = _post(gw, ASK)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    # the tools were shown to the model: prompt tokens, as OpenAI bills them
    shown = r.json()["usage"]["prompt_tokens"] - plain["usage"]["prompt_tokens"]
    assert shown > 40, shown
    spec = gw.engine.specs[-1]
    fmt = json.loads(spec.constraint.spec)["format"]
    assert fmt["type"] == "triggered_tags" and not fmt["at_least_one"]
    assert [t["begin"].split('"name": ')[1] for t in fmt["tags"]] == [
        '"get_weather", "arguments": ',
        '"get_time", "arguments": ',
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "names", "first_only"),
    [
        ("required", True, ["get_weather", "get_time"], False),
        ("required", False, ["get_weather", "get_time"], True),
        ({"type": "function", "function": {"name": "get_time"}}, True, ["get_time"], True),
    ],
)
def test_required_and_named_choices_allow_calls_only(
    make_gateway: GatewayFactory, choice: Any, parallel: bool, names: list[str], first_only: bool
) -> None:
    gw = make_gateway(engine=FakeEngine(CALL))
    r = _post(gw, {**ASK, "tool_choice": choice, "parallel_tool_calls": parallel})
    assert r.status_code == 200, r.text
    fmt = json.loads(gw.engine.specs[-1].constraint.spec)["format"]
    assert fmt["type"] == "tags_with_separator" and fmt["at_least_one"]
    assert fmt["stop_after_first"] == first_only
    assert [json.loads(t["begin"].split('"name": ')[1].split(",")[0]) for t in fmt["tags"]] == names


def test_none_shows_no_tools_and_parallel_calls_come_back_in_order(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(CALL + SECOND))
    r = _post(gw, {**ASK, "tool_choice": "none"})
    assert gw.engine.specs[-1].constraint is None
    assert "tool_calls" not in r.json()["choices"][0]["message"]
    r = _post(gw, ASK)
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert len({c["id"] for c in calls}) == 2


def test_streamed_calls_arrive_as_openai_tool_call_deltas(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(engine=FakeEngine(["Let me look. "] + CALL + SECOND))
    deltas, finish, text = [], None, ""
    for data in sse_data(gw, "/v1/chat/completions", ASK):
        choice = data["choices"][0]
        deltas += choice["delta"].get("tool_calls", [])
        text += choice["delta"].get("content") or ""
        finish = choice["finish_reason"] or finish
    assert text == "Let me look. " and finish == "tool_calls"
    heads = [d for d in deltas if "id" in d]
    assert [(d["index"], d["function"]["name"]) for d in heads] == [
        (0, "get_weather"),
        (1, "get_time"),
    ]
    args = ["".join(d["function"]["arguments"] for d in deltas if d["index"] == i) for i in (0, 1)]
    assert [json.loads(a) for a in args] == [{"city": "Paris"}, {}]


def test_the_round_trip_is_written_back_for_the_model() -> None:
    body = ChatCompletionRequest.model_validate(
        {
            **ASK,
            "messages": [
                {"role": "user", "content": "Weather in Paris and the time?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
            ],
        }
    )
    turns, constraint = chat_turns(body)
    assert turns[0]["role"] == "system" and "<tools>" in turns[0]["content"]
    assert '"name": "get_weather"' in turns[0]["content"]
    written = turns[2]["content"]
    content, calls = split_calls(written)  # what the model wrote, it reads back the same way
    assert content is None and [c.name for c in calls] == ["get_weather", "get_time"]
    assert turns[3] == {
        "role": "user",
        "content": '<tool_response name="get_weather">\n18 C, sunny\n</tool_response>\n'
        '<tool_response name="get_time">\n14:05\n</tool_response>',
    }
    assert constraint is not None and constraint.kind == "structural_tag"


def test_a_stream_split_anywhere_gives_the_same_calls() -> None:
    text = "Sure. " + "".join(CALL + SECOND)
    whole = split_calls(text)
    for size in (1, 2, 3, 7, 50):
        stream = CallStream()
        events = []
        for i in range(0, len(text), size):
            events += stream.feed(text[i : i + size])
        events += stream.feed("", final=True)
        said = "".join(e[1] for e in events if e[0] == "text")
        args = ["".join(e[2] for e in events if e[0] == "arguments" and e[1] == i) for i in (0, 1)]
        assert said == "Sure. " and whole[0] == "Sure."
        assert [c.name for c in stream.calls] == [c.name for c in whole[1]]
        assert [json.loads(a) for a in args] == [json.loads(c.arguments) for c in whole[1]]
        assert [json.loads(a) for a in args] == [{"city": "Paris"}, {}]
        assert [c.arguments for c in stream.calls] == args


@pytest.mark.parametrize(
    ("change", "param"),
    [
        (
            {"tools": [{"type": "function", "function": {"description": "x"}}]},
            "tools[0].function.name",
        ),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "patternProperties": {}},
                        },
                    }
                ]
            },
            "tools[0].function.parameters.patternProperties",
        ),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": None, "tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "tool_call_id": "call_unknown", "content": "1"},
                ]
            },
            "messages[1].tool_call_id",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "1"}]},
            "messages[1].tool_call_id",
        ),
    ],
)
def test_bad_tools_and_results_are_400s_naming_the_field(
    make_gateway: GatewayFactory, change: dict[str, Any], param: str
) -> None:
    gw = make_gateway(engine=FakeEngine(CALL))
    err = assert_openai_error(_post(gw, {**ASK, **change}), 400)
    assert err["param"] == param, err
    assert gw.engine.requests == 0


RESPONSE_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": WEATHER["function"]["parameters"],
    },
    {"type": "function", "name": "get_time"},
]


def test_responses_calls_are_function_call_items_whole_and_streamed(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(["Checking. "] + CALL + SECOND))
    body = {"model": "smollm2-135m", "input": "Weather in Paris?", "tools": RESPONSE_TOOLS}
    r = gw.client.post("/v1/responses", headers=gw.auth, json=body)
    assert r.status_code == 200, r.text
    obj = r.json()
    assert [o["type"] for o in obj["output"]] == ["message", "function_call", "function_call"]
    assert obj["output"][0]["content"][0]["text"] == "Checking."
    calls = obj["output"][1:]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]
    assert all(c["call_id"].startswith("call_") and c["status"] == "completed" for c in calls)
    assert obj["tools"][0]["name"] == "get_weather" and obj["tool_choice"] == "auto"
    check("ResponseResource", obj)  # every item and field in the specification's shapes
    events = sse_data(gw, "/v1/responses", body)
    for e in events:
        check_event(e)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"]) for e in added] == [
        (0, "message"),
        (1, "function_call"),
        (2, "function_call"),
    ]
    for index in (1, 2):
        item_id = added[index]["item"]["id"]
        pieces = [
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == item_id
        ]
        (done,) = [
            e
            for e in events
            if e["type"] == "response.function_call_arguments.done" and e["item_id"] == item_id
        ]
        assert "".join(pieces) == done["arguments"]
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call", "function_call"]
    assert [o["id"] for o in final["output"]] == [a["item"]["id"] for a in added]


def test_a_function_output_continues_the_chain_and_the_conversation(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(CALL))
    conv = gw.client.post("/v1/conversations", headers=gw.auth, json={}).json()
    body = {
        "model": "smollm2-135m",
        "input": "Weather in Paris?",
        "tools": RESPONSE_TOOLS,
        "tool_choice": "required",
        "conversation": conv["id"],
    }
    first = gw.client.post("/v1/responses", headers=gw.auth, json=body).json()
    (call,) = first["output"]
    assert call["type"] == "function_call"
    # the result of the call, on the conversation: the model reads the round trip
    gw.engine.script = ["It", " is", " 18", " C."]
    follow = {
        "model": "smollm2-135m",
        "conversation": conv["id"],
        "tools": RESPONSE_TOOLS,
        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "18 C"}],
    }
    r = gw.client.post("/v1/responses", headers=gw.auth, json=follow)
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "It is 18 C."
    items = gw.client.get(
        f"/v1/conversations/{conv['id']}/items?order=asc", headers=gw.auth
    ).json()["data"]
    assert [i["type"] for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    # and on a previous_response_id chain, the same
    gw.engine.script = CALL
    chained = gw.client.post(
        "/v1/responses",
        headers=gw.auth,
        json={"model": "smollm2-135m", "input": "Weather?", "tools": RESPONSE_TOOLS},
    ).json()
    cid = chained["output"][0]["call_id"]
    gw.engine.script = ["Sunny."]
    r = gw.client.post(
        "/v1/responses",
        headers=gw.auth,
        json={
            "model": "smollm2-135m",
            "previous_response_id": chained["id"],
            "input": [{"type": "function_call_output", "call_id": cid, "output": "sunny"}],
        },
    )
    assert r.status_code == 200, r.text
    unknown = {**follow, "input": [{"type": "function_call_output", "call_id": "x", "output": "1"}]}
    err = assert_openai_error(gw.client.post("/v1/responses", headers=gw.auth, json=unknown), 400)
    assert err["param"] == "input[0].call_id"


def test_the_openai_package_parses_structured_answers_and_tool_calls(
    make_gateway: GatewayFactory,
) -> None:
    from openai import OpenAI
    from pydantic import BaseModel

    class Cat(BaseModel):
        name: str
        age: int

    gw = make_gateway(engine=FakeEngine(['{"name": "Tom", ', '"age": 3}']))
    client = OpenAI(base_url=gw.http(), api_key=gw.key, max_retries=0)
    messages = [{"role": "user", "content": "A cat"}]
    parsed = client.chat.completions.parse(
        model="smollm2-135m", messages=messages, response_format=Cat
    )
    assert parsed.choices[0].message.parsed == Cat(name="Tom", age=3)
    sent = json.loads(gw.engine.specs[-1].constraint.spec)
    assert sent["required"] == ["name", "age"] and sent["additionalProperties"] is False
    answer = client.responses.parse(model="smollm2-135m", input="A cat", text_format=Cat)
    assert answer.output_parsed == Cat(name="Tom", age=3)
    gw.engine.script = CALL
    done = client.chat.completions.create(
        model="smollm2-135m", messages=messages, tools=[WEATHER], tool_choice="required"
    )
    call = done.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and done.choices[0].finish_reason == "tool_calls"
    streamed = client.chat.completions.create(
        model="smollm2-135m", messages=messages, tools=[WEATHER], stream=True
    )
    args = "".join(
        c.function.arguments or ""
        for chunk in streamed
        for c in chunk.choices[0].delta.tool_calls or []
        if chunk.choices
    )
    assert json.loads(args) == {"city": "Paris"}
    response = client.responses.create(model="smollm2-135m", input="x", tools=RESPONSE_TOOLS)
    (fc,) = [o for o in response.output if o.type == "function_call"]
    assert fc.name == "get_weather" and json.loads(fc.arguments) == {"city": "Paris"}


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", ["get_weather", "get_time"]),
        ({"type": "function", "name": "get_time"}, ["get_time"]),
    ],
)
def test_responses_required_and_named_choices_constrain_the_calls(
    make_gateway: GatewayFactory, choice: Any, names: list[str]
) -> None:
    gw = make_gateway(engine=FakeEngine(CALL))
    body = {
        "model": "smollm2-135m",
        "input": "Time?",
        "tools": RESPONSE_TOOLS,
        "tool_choice": choice,
    }
    r = gw.client.post("/v1/responses", headers=gw.auth, json=body)
    assert r.status_code == 200, r.text
    fmt = json.loads(gw.engine.specs[-1].constraint.spec)["format"]
    assert fmt["at_least_one"]
    assert [json.loads(t["begin"].split('"name": ')[1].split(",")[0]) for t in fmt["tags"]] == names
    assert r.json()["tool_choice"] == choice
    unknown = {**body, "tool_choice": {"type": "function", "name": "nope"}}
    bad = gw.client.post("/v1/responses", headers=gw.auth, json=unknown)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tool_choice"
