"""Hostile or sloppy input gets a 4xx in the OpenAI error format, never a 500 or a hang: strict
numbers, bounded seeds and logprobs, deep JSON, bodies capped while they are read and read
within a time limit, the key checked before a body is parsed."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from zerolayer.gateway.bodies import BodyLimits

from tests.gateway.conftest import Gateway
from tests.gateway.test_api import assert_openai_error

CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("route", "extra", "param"),
    [
        ("chat", {"seed": 2**64}, "seed"),
        ("chat", {"max_tokens": "2"}, "max_tokens"),
        ("chat", {"max_tokens": True}, "max_tokens"),
        ("chat", {"temperature": "0.5"}, "temperature"),
        ("chat", {"stream": "true"}, "stream"),
        ("chat", {"logprobs": 1}, "logprobs"),
        ("chat", {"top_logprobs": 3}, "top_logprobs"),  # without logprobs: true
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("completions", {"logprobs": 21}, "logprobs"),
        ("completions", {"logprobs": True}, "logprobs"),
        ("chat", {"user": "u" * 513}, "user"),
        ("completions", {"user": "u" * 513}, "user"),
    ],
)
def test_wrong_types_and_unserved_fields_are_400s(
    gateway: Gateway, route: str, extra: dict[str, Any], param: str
) -> None:
    if route == "chat":
        url, body = "/v1/chat/completions", {**CHAT, **extra}
    else:
        url, body = "/v1/completions", {"model": "smollm2-135m", "prompt": "Hi", **extra}
    err = assert_openai_error(gateway.client.post(url, headers=gateway.auth, json=body), 400)
    assert err["param"] == param, err
    assert gateway.engine.requests == 0


def test_a_seed_at_the_edge_of_64_bits_is_served(gateway: Gateway) -> None:
    for seed in (2**63 - 1, -(2**63)):
        body = {**CHAT, "seed": seed, "max_tokens": 2}
        r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
        assert r.status_code == 200, r.text


def test_deeply_nested_json_is_a_400(gateway: Gateway) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    r = gateway.client.post(
        "/v1/chat/completions",
        headers={**gateway.auth, "content-type": "application/json"},
        content=deep,
    )
    err = assert_openai_error(r, 400)
    assert "nested too deeply" in err["message"]


def test_chunks_check_the_key_before_the_body(gateway: Gateway) -> None:
    r = gateway.client.post(
        "/v1/chunks", headers={"content-type": "application/json"}, content=b"{not json"
    )
    assert_openai_error(r, 401, "authentication_error")


def test_streamed_chunks_refuse_an_overlap_not_below_the_chunk_size(gateway: Gateway) -> None:
    r = gateway.client.post(
        "/v1/chunks?model=smollm2-135m&chunk_tokens=64&overlap_tokens=64",
        headers={**gateway.auth, "content-type": "text/plain"},
        content=b"some text",
    )
    err = assert_openai_error(r, 400)
    assert err["param"] == "overlap_tokens"


Message = dict[str, Any]


class _App:
    """The app behind the layer: what it was handed, and whether it ran."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        got = b""
        while True:
            msg = await receive()
            got += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        self.bodies.append(got)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _through(
    pieces: list[bytes],
    delay_at: int | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    path: str = "/v1/chat/completions",
    timeout_s: float = 5.0,
) -> tuple[_App, list[Message], list[int]]:
    """Send a body in pieces (no content-length unless given, as a chunked upload; the piece
    at delay_at takes 10 s) through BodyLimits (2 MiB) to an app. Returns the app, what was
    answered, and a list counting the pieces read."""
    app, sent, read = _App(), [], [0]

    async def receive() -> Message:
        i = read[0]
        read[0] += 1
        if i == delay_at:
            await asyncio.sleep(10)
        return {"type": "http.request", "body": pieces[i], "more_body": i + 1 < len(pieces)}

    async def send(msg: Message) -> None:
        sent.append(msg)

    layer = BodyLimits(app, max_bytes=2 << 20, timeout_s=timeout_s)
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers or []}
    asyncio.run(layer(scope, receive, send))
    return app, sent, read


def _answered(sent: list[Message]) -> tuple[int, dict[str, Any]]:
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


def test_a_body_over_the_cap_is_refused_while_it_is_read() -> None:
    app, sent, read = _through([b"x" * (1 << 20)] * 64)  # 64 MiB, no declared length
    status, body = _answered(sent)
    assert status == 413 and body["error"]["type"] == "invalid_request_error", body
    assert read[0] <= 3  # stopped past the cap, not after the whole body
    assert app.bodies == []


def test_a_declared_length_over_the_cap_is_refused_unread() -> None:
    app, sent, read = _through([b"{}"], headers=[(b"content-length", str(3 << 20).encode())])
    assert _answered(sent)[0] == 413
    assert read[0] == 0 and app.bodies == []


def test_a_slow_body_times_out_with_408() -> None:
    t0 = time.monotonic()
    app, sent, _ = _through([b"{", b"}"], delay_at=1, timeout_s=0.2)
    status, body = _answered(sent)
    assert status == 408 and "did not arrive within 0.2 s" in body["error"]["message"]
    assert time.monotonic() - t0 < 5
    assert app.bodies == []


def test_a_body_within_the_limits_reaches_the_app_whole() -> None:
    app, sent, _ = _through([b'{"a": ', b"1}"])
    assert app.bodies == [b'{"a": 1}'] and sent[0]["status"] == 200


def test_a_streamed_text_body_passes_through_unbuffered() -> None:
    # text/plain to /v1/chunks is cut while it arrives: no whole-body cap or deadline here
    pieces = [b"x" * (1 << 20)] * 3  # over the 2 MiB cap in all
    text = [(b"content-type", b"text/plain")]
    app, sent, _ = _through(pieces, headers=text, path="/v1/chunks")
    assert app.bodies == [b"".join(pieces)] and sent[0]["status"] == 200
    # the same body as JSON, or to another route, is held to the cap
    assert _through(pieces, path="/v1/chunks")[0].bodies == []
    assert _through(pieces, headers=text)[0].bodies == []


@pytest.mark.parametrize(
    ("content", "headers", "says"),
    [
        (b"\xff\xfe{}", {"content-type": "application/json"}, "not valid UTF-8"),
        (b"{not json", {"content-type": "application/json"}, "not valid JSON"),
        (b"[1, 2]", {"content-type": "application/json"}, "must be a JSON object"),
        (b"", {"content-type": "application/json"}, "body is missing"),
        (b'{"model": "m"}', {"content-type": "application/x-www-form-urlencoded"}, "not JSON"),
    ],
)
def test_undecodable_bodies_say_what_is_wrong(
    gateway: Gateway, content: bytes, headers: dict[str, str], says: str
) -> None:
    for url in ("/v1/chat/completions", "/v1/chunks"):
        r = gateway.client.post(url, headers={**gateway.auth, **headers}, content=content)
        err = assert_openai_error(r, 400)
        assert says in err["message"], (url, err)
        # the key is checked before any of it: a bad body without a key is a 401
        assert_openai_error(gateway.client.post(url, headers=headers, content=content), 401)
    assert gateway.engine.requests == 0


def test_a_body_without_content_type_is_read_as_json(gateway: Gateway) -> None:
    body = json.dumps({**CHAT, "max_tokens": 2}).encode()
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, content=body)
    assert r.status_code == 200, r.text


def test_a_text_stream_is_one_whatever_the_case_of_its_content_type(gateway: Gateway) -> None:
    # BodyLimits lets a text/plain body to /v1/chunks through unread; the route must then read
    # it as the stream it is, never as a whole JSON body outside the layer's cap
    r = gateway.client.post(
        "/v1/chunks?model=smollm2-135m",
        headers={**gateway.auth, "content-type": "Text/Plain; charset=utf-8"},
        content=b"some text to cut",
    )
    assert r.status_code == 200, r.text
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert lines[-1]["object"] == "chunks.done", lines


@pytest.mark.parametrize(
    ("url", "body", "param"),
    [
        ("/v1/responses", {"model": "smollm2-135m", "input": 5}, "input"),
        ("/v1/completions", {"model": "smollm2-135m", "prompt": {"a": 1}}, "prompt"),
        (
            "/v1/chat/completions",
            {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
            "messages[0].content",
        ),
        ("/v1/chat/completions", {**CHAT, "tool_choice": "sometimes"}, "tool_choice"),
    ],
)
def test_an_error_names_the_clients_field_not_an_internal_one(
    gateway: Gateway, url: str, body: dict[str, Any], param: str
) -> None:
    err = assert_openai_error(gateway.client.post(url, headers=gateway.auth, json=body), 400)
    assert err["param"] == param, err


def test_a_message_without_content_is_a_400_unless_it_made_tool_calls(gateway: Gateway) -> None:
    for message in ({"role": "user"}, {"role": "assistant", "content": None}):
        body = {**CHAT, "messages": [message]}
        r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
        err = assert_openai_error(r, 400)
        assert err["param"] == "messages[0]", err
