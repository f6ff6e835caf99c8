"""Items: what a request's input becomes, what the model reads of it, and cursor pages."""

from __future__ import annotations

import re

import pytest
from zerolayer.conversations.items import (
    ItemError,
    check_outputs,
    input_items,
    messages_of,
    new_id,
    page,
)
from zerolayer.errors import InvalidRequest


def test_a_string_is_one_user_message_with_an_unguessable_id() -> None:
    [item] = input_items("Hi there")
    assert item["role"] == "user" and item["status"] == "completed"
    assert item["content"] == [{"type": "input_text", "text": "Hi there"}]
    assert re.fullmatch(r"msg_[0-9a-f]{48}", item["id"])
    assert len({new_id("resp") for _ in range(1000)}) == 1000


def test_message_items_keep_roles_and_join_text_parts() -> None:
    items = input_items(
        [
            {"role": "developer", "content": "Be brief."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Hello, "},
                    {"type": "input_text", "text": "world"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hi."}]},
        ]
    )
    assert [i["role"] for i in items] == ["developer", "user", "assistant"]
    assert items[2]["content"][0]["type"] == "output_text"  # an assistant's turn is output
    assert messages_of(items) == [
        {"role": "system", "content": "Be brief."},  # the model reads developer as system
        {"role": "user", "content": "Hello, world"},
        {"role": "assistant", "content": "Hi."},
    ]


@pytest.mark.parametrize(
    "item, words",
    [
        ({"type": "custom_tool_call", "name": "f", "input": "x", "call_id": "c"}, "function tools"),
        ({"type": "web_search_call", "id": "ws_1"}, "function tools"),
        ({"type": "reasoning", "summary": []}, "function tools"),
        ({"type": "item_reference", "id": "msg_1"}, "item_reference"),
        (
            {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/a.png"}]},
            "text only",
        ),
        ({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}, "text only"),
    ],
)
def test_inputs_the_model_cannot_serve_are_named_in_a_400(item: dict, words: str) -> None:
    with pytest.raises(ItemError) as exc:
        input_items([{"role": "user", "content": "ok"}, item])
    assert exc.value.status_code == 400 and words in exc.value.message
    assert exc.value.param is not None and exc.value.param.startswith("input[1]")


@pytest.mark.parametrize(
    "value",
    [
        42,
        [42],
        [{"role": "robot", "content": "x"}],
        [{"role": "user", "content": 3}],
        [{"type": "banana"}],
        [{"role": "user", "content": [{"type": "input_text"}]}],
    ],
)
def test_malformed_inputs_are_400s(value: object) -> None:
    with pytest.raises(InvalidRequest) as exc:
        input_items(value)
    assert exc.value.status_code == 400


def test_pages_walk_the_list_by_cursor_in_either_order() -> None:
    items = [{"id": f"i{n}"} for n in range(5)]
    first = page(items, 2, "asc", None)
    assert [i["id"] for i in first.data] == ["i0", "i1"] and first.has_more
    rest = page(items, 10, "asc", "i1")
    assert [i["id"] for i in rest.data] == ["i2", "i3", "i4"] and not rest.has_more
    back = page(items, 2, "desc", "i3")
    assert [i["id"] for i in back.data] == ["i2", "i1"] and back.has_more
    body = back.body()
    assert (body["first_id"], body["last_id"], body["object"]) == ("i2", "i1", "list")
    with pytest.raises(InvalidRequest):
        page(items, 2, "asc", "nope")


def test_function_calls_and_outputs_are_kept_and_read_back_as_the_model_writes_them() -> None:
    items = input_items(
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "function_call",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
                "call_id": "call_1",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
        ]
    )
    assert [i["type"] for i in items] == ["message", "function_call", "function_call_output"]
    assert items[1]["id"].startswith("fc_") and items[2]["id"].startswith("fco_")
    check_outputs([], items, "input")
    assert messages_of(items)[1:] == [
        {
            "role": "assistant",
            "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n'
            "</tool_call>",
        },
        {"role": "user", "content": '<tool_response name="get_weather">\n18 C\n</tool_response>'},
    ]
    with pytest.raises(InvalidRequest) as exc:
        check_outputs([], items[2:], "input")
    assert exc.value.param == "input[0].call_id"
    check_outputs(items[:2], items[2:], "input")  # a call made in an earlier turn
    for bad, param in [
        ({"type": "function_call", "arguments": "{}", "call_id": "c"}, "input[0].name"),
        ({"type": "function_call_output", "output": "1"}, "input[0].call_id"),
        ({"type": "function_call_output", "call_id": "c", "output": 5}, "input[0].output"),
    ]:
        with pytest.raises(InvalidRequest) as exc:
            input_items([bad])
        assert exc.value.param == param
