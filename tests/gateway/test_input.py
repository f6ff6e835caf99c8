"""Hostile or sloppy input gets a 4xx in the OpenAI error format, never a 500 or a hang: strict
numbers, bounded seeds, refused logprobs, deep JSON, bodies capped while they are read and read
within a time limit, the key checked before a body is parsed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from zerolayer.errors import PayloadTooLarge, RequestTimeout
from zerolayer.gateway.http import read_body

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
        ("chat", {"logprobs": True}, "logprobs"),
        ("chat", {"top_logprobs": 3}, "top_logprobs"),
        ("completions", {"logprobs": 5}, "logprobs"),
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


def _request(pieces: list[bytes], delay_at: int | None = None) -> tuple[Request, list[int]]:
    """A request whose body arrives in pieces (no content-length, as a chunked upload); the
    piece at delay_at takes 10 s. Returns the request and a list counting the pieces read."""
    read = [0]

    async def receive() -> dict[str, Any]:
        i = read[0]
        read[0] += 1
        if i == delay_at:
            await asyncio.sleep(10)
        more = i + 1 < len(pieces)
        return {"type": "http.request", "body": pieces[i], "more_body": more}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    return Request(scope, receive), read


def test_a_body_over_the_cap_is_refused_while_it_is_read() -> None:
    request, read = _request([b"x" * (1 << 20)] * 64)  # 64 MiB, no declared length
    with pytest.raises(PayloadTooLarge):
        asyncio.run(read_body(request, max_bytes=2 << 20))
    assert read[0] <= 3  # stopped past the cap, not after the whole body


def test_a_slow_body_times_out_with_408() -> None:
    request, _ = _request([b"{", b"}"], delay_at=1)

    async def run() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(RequestTimeout) as caught:
            await read_body(request, max_bytes=1 << 20, timeout_s=0.2)
        assert caught.value.status_code == 408
        return loop.time() - t0

    assert asyncio.run(run()) < 5
