"""Items: what a request's input becomes, what the model reads of it, and cursor pages."""

from __future__ import annotations

import re

import pytest
from zerolayer.conversations.items import (
    ItemError,
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
        ({"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}, "tools"),
        ({"type": "function_call_output", "call_id": "c", "output": "1"}, "tools"),
        ({"type": "reasoning", "summary": []}, "tools"),
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
