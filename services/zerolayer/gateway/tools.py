"""Tool calling in zerolayer's default format, for models whose chat template has none.

The model reads the tools in a system turn: each function's name, description and parameters
as one JSON line inside <tools></tools>, and how to call one. A call it makes is written as

    <tool_call>
    {"name": "<function>", "arguments": {...}}
    </tool_call>

(calls in parallel one after another, a line break between them; zerolayer.toolcalls). Earlier
calls in the conversation are written back the same way in their assistant turns, and each tool
result is a user turn `<tool_response>...</tool_response>` naming its call, so the model reads
the round trip as it would write it.

`tool_choice` becomes the grammar the tier decodes under (zerolayer.engines.grammar), so every
call parses and its arguments follow the function's `parameters` schema: "auto" lets the model
write text and start a call at `<tool_call>`; "required" and a named function allow calls only
(at least one; the named function alone); "none" shows the model no tools at all. With
`parallel_tool_calls` false the output ends after the first call.

The answer is split back into text and calls (zerolayer.toolcalls: `split_calls`, whole, or
`CallStream`, while it streams), into OpenAI's tool_calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from zerolayer.errors import InvalidRequest
from zerolayer.gateway.schemas import ChatCompletionRequest, ChatMessage
from zerolayer.gateway.structured import check_schema, instruction, json_constraint
from zerolayer.protocol import Constraint
from zerolayer.toolcalls import ARGS, END, HEAD, OPEN, SEPARATOR, call_text, result_text

__all__ = ["chat_turns", "Function", "tool_prompt", "tool_constraint", "functions_of", "chosen"]


@dataclass(frozen=True)
class Function:
    """A function the model may call: its name, description and parameters schema."""

    name: str
    description: str | None
    parameters: dict[str, Any]


def tool_prompt(functions: list[Function], choice: str | None) -> str:
    """The system turn that shows the model its tools and how to call them."""
    lines = [
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": f.name,
                    "description": f.description or "",
                    "parameters": f.parameters,
                },
            },
            separators=(", ", ": "),
        )
        for f in functions
    ]
    must = {
        "required": "You must call one or more of these functions.",
        None: "Call a function when it helps to answer; otherwise answer in text.",
    }
    told = must.get(choice) or f"You must call the function {choice}."
    return (
        "You can call functions. They are listed inside <tools></tools>, one JSON object per "
        "line:\n<tools>\n"
        + "\n".join(lines)
        + "\n</tools>\nTo call a function, write a JSON object with its name and arguments "
        "inside <tool_call></tool_call>:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <arguments-object>}\n</tool_call>\n' + told
    )


def _tag(f: Function) -> dict[str, Any]:
    return {
        "type": "tag",
        "begin": OPEN + HEAD + json.dumps(f.name) + ARGS,
        "content": {"type": "json_schema", "json_schema": f.parameters, "max_whitespace_cnt": 1},
        "end": END,
    }


def tool_constraint(functions: list[Function], choice: str | None, parallel: bool) -> Constraint:
    """The grammar of tool_choice (None: "auto"; "required"; or a function's name) over the
    functions (a named choice: only that one)."""
    tags = [_tag(f) for f in functions if choice in (None, "required") or f.name == choice]
    if choice is None:
        fmt: dict[str, Any] = {
            "type": "triggered_tags",
            "triggers": [OPEN.rstrip("\n")],
            "tags": tags,
            "at_least_one": False,
            "stop_after_first": not parallel,
        }
    else:
        fmt = {
            "type": "tags_with_separator",
            "tags": tags,
            "separator": SEPARATOR,
            "at_least_one": True,
            "stop_after_first": not parallel or choice != "required",
        }
    return Constraint("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}))


def check_results(messages: list[Any]) -> None:
    """Every tool result names a call an earlier assistant turn made (400 otherwise)."""
    made: set[str] = set()
    for n, m in enumerate(messages):
        for call in m.tool_calls or []:
            made.add(call.id)
        if m.role == "tool":
            if not m.tool_call_id:
                raise InvalidRequest(
                    "a tool message needs the tool_call_id of the call it answers",
                    param=f"messages[{n}].tool_call_id",
                )
            if m.tool_call_id not in made:
                raise InvalidRequest(
                    f"no earlier assistant message made a tool call with id {m.tool_call_id!r}",
                    param=f"messages[{n}].tool_call_id",
                )


NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def functions_of(
    defs: list[tuple[str, str | None, dict[str, Any] | None]], param: str
) -> list[Function]:
    """The functions of a request's tools ((name, description, parameters) each), their
    schemas checked; `param` formats the path of the i-th tool's fields ({i}, {field})."""
    seen: set[str] = set()
    out = []
    for i, (name, description, parameters) in enumerate(defs):
        if name in seen:
            raise InvalidRequest(
                f"two tools are named {name!r}", param=param.format(i=i, field="name")
            )
        seen.add(name)
        schema = parameters if parameters is not None else NO_ARGUMENTS
        check_schema(schema, param.format(i=i, field="parameters"))
        out.append(Function(name, description, schema))
    return out


def chosen(choice: Any, functions: list[Function], param: str) -> str | None:
    """tool_choice as tool_constraint takes it: None for auto, "required", a function's name,
    or "none" (no tools shown); 400 for a choice that names no tool."""
    if choice is None or choice == "auto":
        return None if functions else "none"
    if isinstance(choice, str):
        if choice == "required" and not functions:
            raise InvalidRequest("tool_choice 'required' needs tools", param=param)
        return choice
    # a chat tool_choice names {"function": {"name"}}, a Responses one {"name"}
    name = choice.name if hasattr(choice, "name") else choice.function.name
    if name not in {f.name for f in functions}:
        raise InvalidRequest(f"tool_choice names {name!r}, which is not a tool", param=param)
    return str(name)


def _chat_text(m: ChatMessage) -> dict[str, str]:
    """A chat turn as the model reads it: calls written into the assistant's text."""
    text = m.text()
    if m.role == "assistant" and m.tool_calls:
        calls = SEPARATOR.join(
            call_text(c.function.name, c.function.arguments) for c in m.tool_calls
        )
        text = f"{text}\n{calls}" if text else calls
    return {"role": m.role, "content": text}


def chat_turns(body: ChatCompletionRequest) -> tuple[list[dict[str, str]], Constraint | None]:
    """A chat request's turns as the model reads them, and the grammar its answer keeps to
    (tools shown and constrained as tool_choice says; or the response_format's JSON)."""
    check_results(body.messages)
    defs = [
        (t.function.name, t.function.description, t.function.parameters) for t in body.tools or []
    ]
    functions = functions_of(defs, "tools[{i}].function.{field}")
    choice = chosen(body.tool_choice, functions, "tool_choice")
    constraint = json_constraint(body.response_format, "response_format.json_schema.schema")
    if constraint is not None and choice != "none":
        raise InvalidRequest(
            "response_format and tools are not served together: give tool_choice 'none' or "
            "drop one of them",
            param="response_format",
        )
    names = {c.id: c.function.name for m in body.messages for c in m.tool_calls or []}
    turns: list[dict[str, str]] = []
    for m in body.messages:
        if m.role == "tool":
            told = result_text(names.get(m.tool_call_id or ""), m.text())
            if (
                turns
                and turns[-1]["role"] == "user"
                and turns[-1]["content"].startswith("<tool_response")
            ):
                turns[-1]["content"] += "\n" + told  # results of parallel calls: one turn
            else:
                turns.append({"role": "user", "content": told})
        else:
            turns.append(_chat_text(m))
    head = instruction(constraint)
    if choice != "none":
        head = tool_prompt(functions, choice)
        constraint = tool_constraint(functions, choice, body.parallel_tool_calls)
    if head is not None:
        turns.insert(0, {"role": "system", "content": head})
    return turns, constraint
