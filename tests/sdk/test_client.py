"""The SDK's HTTP behaviour against mocked answers (respx): configuration, retries and their
schedule, Retry-After, the Idempotency-Key, error classes, raw responses, and that no HTTP
response is left open after an error or an abandoned stream."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pydantic
import pytest
import respx
import zerolayer_sdk as zl
from zerolayer_sdk._base_client import MAX_RETRY_AFTER, RETRY_COUNT_HEADER

BASE = "https://api.example.test/v1"
CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}]}
REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "smollm2-135m:baseline",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


class Sleeps(list[float]):
    """Records the waits between attempts instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class AsyncSleeps(Sleeps):
    async def __call__(self, seconds: float) -> None:  # type: ignore[override]
        self.append(seconds)


def client(**options: Any) -> tuple[zl.Client, Sleeps]:
    c = zl.Client(api_key="zl-test", base_url=BASE, **options)
    c._sleep = sleeps = Sleeps()
    return c, sleeps


def aclient(**options: Any) -> tuple[zl.AsyncClient, AsyncSleeps]:
    c = zl.AsyncClient(api_key="zl-test", base_url=BASE, **options)
    c._sleep = sleeps = AsyncSleeps()
    return c, sleeps


def error(status: int, code: str, message: str = "no", **headers: str) -> httpx.Response:
    body = {"error": {"message": message, "type": "x", "param": "p", "code": code}}
    return httpx.Response(status, json=body, headers={"x-request-id": f"req-{status}", **headers})


class Tracked(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that records whether it was closed (its connection given back)."""

    def __init__(self, parts: list[bytes]):
        self.parts = parts
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for p in self.parts:
            yield p

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


def sse(*objects: Any) -> list[bytes]:
    return [f"data: {o if isinstance(o, str) else json.dumps(o)}\n\n".encode() for o in objects]


def chunk(text: str | None, finish: str | None = None, usage: Any = None) -> dict[str, Any]:
    delta = {"content": text} if text is not None else {"role": "assistant", "content": ""}
    out = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "smollm2-135m:sparse24",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        out = {**out, "choices": [], "usage": usage}
    return out


STREAM = sse(
    chunk(None),
    chunk("Hel"),
    chunk("lo"),
    chunk(None, "stop") | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
    "[DONE]",
)


@pytest.fixture
def mock() -> Iterator[respx.MockRouter]:
    """Answers mocked at the transport (respx), for BASE only."""
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


# -- configuration ----------------------------------------------------------------------------


def test_settings_come_from_arguments_then_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("ZEROLAYER_API_KEY", "zl-env")
    monkeypatch.setenv("ZEROLAYER_BASE_URL", "https://env.example.test/v1/")
    c = zl.Client()
    assert (c.api_key, str(c.base_url)) == ("zl-env", "https://env.example.test/v1")
    c = zl.Client(api_key="zl-arg", base_url=BASE)
    assert (c.api_key, str(c.base_url)) == ("zl-arg", BASE)
    assert c.max_retries == 2 and c.timeout == httpx.Timeout(600, connect=5.0)
    # a platform on this machine: the keys `./zl up` keeps in its cache folder
    monkeypatch.delenv("ZEROLAYER_API_KEY")
    monkeypatch.delenv("ZEROLAYER_BASE_URL")
    monkeypatch.setenv("ZEROLAYER_CACHE_DIR", str(tmp_path))
    (tmp_path / "dev-key").write_text("zl-dev\n")
    (tmp_path / "admin-key").write_text("zla-admin\n")
    local = zl.Client()
    assert (local.api_key, local.admin_key) == ("zl-dev", "zla-admin")
    assert str(local.base_url) == "http://127.0.0.1:8000/v1"
    remote = zl.Client(base_url=BASE)  # never sent to another host
    assert remote.api_key is None and remote.admin_key is None
    assert local.with_options(base_url=BASE).api_key is None
    assert local.with_options(max_retries=0).api_key == "zl-dev"
    with pytest.raises(zl.ZerolayerError, match="ZEROLAYER_API_KEY"):
        remote.models.list()


def test_with_options_overrides_per_call_and_shares_connections(mock: respx.MockRouter) -> None:
    route = mock.post("/chat/completions").mock(return_value=httpx.Response(200, json=REPLY))
    c, _ = client()
    quick = c.with_options(timeout=7.5, max_retries=0, default_headers={"x-team": "a"})
    assert quick._http is c._http and quick.max_retries == 0 and c.max_retries == 2
    quick.chat.completions.create(**CHAT)
    sent = route.calls.last.request
    assert sent.headers["x-team"] == "a" and sent.headers["authorization"] == "Bearer zl-test"
    assert sent.extensions["timeout"] == {"connect": 5.0, "read": 7.5, "write": 7.5, "pool": 7.5}
    c.chat.completions.create(**CHAT)
    assert "x-team" not in route.calls.last.request.headers
    assert route.calls.last.request.extensions["timeout"]["read"] == 600


def test_bodies_are_typed_and_unknown_fields_pass_both_ways(mock: respx.MockRouter) -> None:
    newer = {**REPLY, "system_fingerprint": "fp1", "choices": [{**REPLY["choices"][0], "x": 1}]}
    route = mock.post("/chat/completions").mock(return_value=httpx.Response(200, json=newer))
    c, _ = client()
    got = c.chat.completions.create(**CHAT, max_tokens=5, extra_body={"new_option": True})
    assert isinstance(got, zl.types.ChatCompletion) and got.text == "Hello"
    assert got.system_fingerprint == "fp1" and got.to_dict()["choices"][0]["x"] == 1
    assert got.usage is not None and got.usage.total_tokens == 4
    sent = json.loads(route.calls.last.request.content)
    assert sent == {**CHAT, "max_tokens": 5, "stream": False, "new_option": True}
    with pytest.raises(pydantic.ValidationError):  # a wrong type never leaves the machine
        c.chat.completions.create(model="m", messages="not a list")  # type: ignore[arg-type]
    assert route.call_count == 1


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, zl.BadRequestError),
        (401, zl.AuthenticationError),
        (403, zl.PermissionDeniedError),
        (404, zl.NotFoundError),
        (409, zl.ConflictError),
        (413, zl.RequestTooLargeError),
        (422, zl.UnprocessableEntityError),
        (429, zl.RateLimitError),
        (500, zl.InternalServerError),
        (502, zl.InternalServerError),
        (503, zl.ServiceUnavailableError),
    ],
)
def test_each_status_has_its_class_with_the_servers_error(
    status: int, cls: type[zl.APIStatusError]
) -> None:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        mock.post("/chat/completions").mock(return_value=error(status, "the_code", "said"))
        c, _ = client(max_retries=0)
        with pytest.raises(cls) as got:
            c.chat.completions.create(**CHAT)
    e = got.value
    assert type(e) is cls and e.status_code == status and isinstance(e, zl.APIStatusError)
    assert (e.code, e.message, e.param, e.type) == ("the_code", "said", "p", "x")
    assert e.request_id == f"req-{status}" and e.body["error"]["code"] == "the_code"
    assert f"req-{status}" in str(e) and "the_code" in str(e)


def test_an_error_without_json_keeps_its_text(mock: respx.MockRouter) -> None:
    mock.get("/models").mock(return_value=httpx.Response(502, text="bad gateway"))
    c, _ = client(max_retries=0)
    with pytest.raises(zl.InternalServerError, match="bad gateway") as got:
        c.models.list()
    assert got.value.code is None and got.value.body == "bad gateway"


def test_connection_errors_and_timeouts_are_apart(mock: respx.MockRouter) -> None:
    route = mock.get("/models").mock(side_effect=httpx.ConnectError("refused"))
    c, sleeps = client()
    with pytest.raises(zl.APIConnectionError) as got:
        c.models.list()
    assert not isinstance(got.value, zl.APIStatusError) and route.call_count == 3
    assert len(sleeps) == 2
    route.mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(zl.APITimeoutError):
        c.with_options(max_retries=0).models.list()


# -- retries and the Idempotency-Key ----------------------------------------------------------


def test_retry_schedule_backs_off_with_jitter_and_counts_attempts(
    mock: respx.MockRouter,
) -> None:
    route = mock.post("/chat/completions").mock(
        side_effect=[
            error(503, "tier_unavailable"),
            error(500, "x"),
            httpx.Response(200, json=REPLY),
        ]
    )
    c, sleeps = client()
    assert c.chat.completions.create(**CHAT).text == "Hello"
    assert route.call_count == 3
    # 0.5 s then 1 s, each less up to a quarter of jitter
    assert 0.375 <= sleeps[0] <= 0.5 and 0.75 <= sleeps[1] <= 1.0, sleeps
    sent = [call.request.headers for call in route.calls]
    assert [h[RETRY_COUNT_HEADER] for h in sent] == ["0", "1", "2"]
    keys = {h["idempotency-key"] for h in sent}
    assert len(keys) == 1 and keys.pop().startswith("zlsdk-")
    route.mock(return_value=httpx.Response(200, json=REPLY))
    c.chat.completions.create(**CHAT)  # another request: another key
    assert route.calls.last.request.headers["idempotency-key"] not in {
        h["idempotency-key"] for h in sent
    }


def test_backoff_grows_to_its_cap(mock: respx.MockRouter) -> None:
    mock.get("/models").mock(return_value=error(500, "x"))
    c, sleeps = client(max_retries=6)
    with pytest.raises(zl.InternalServerError):
        c.models.list()
    bases = [0.5, 1, 2, 4, 8, 8]
    assert all(0.75 * b <= s <= b for s, b in zip(sleeps, bases, strict=True)), sleeps


@pytest.mark.parametrize(
    ("headers", "waited"),
    [({"retry-after": "3"}, 3.0), ({"retry-after-ms": "250"}, 0.25), ({"retry-after": "0"}, 0.0)],
)
def test_retry_after_is_honoured(headers: dict[str, str], waited: float) -> None:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        route = mock.post("/chat/completions").mock(
            side_effect=[
                error(429, "requests_per_minute", **headers),
                httpx.Response(200, json=REPLY),
            ]
        )
        c, sleeps = client()
        c.chat.completions.create(**CHAT)
    assert sleeps == [waited] and route.call_count == 2


def test_retry_after_as_an_http_date(mock: respx.MockRouter) -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    mock.get("/models").mock(
        side_effect=[
            error(503, "tier_building", **{"retry-after": later}),
            httpx.Response(200, json={"data": []}),
        ]
    )
    c, sleeps = client()
    c.models.list()
    assert 25 <= sleeps[0] <= 31, sleeps


def test_a_retry_after_past_the_cap_is_raised_at_once(mock: respx.MockRouter) -> None:
    far = str(int(MAX_RETRY_AFTER * 100))  # a monthly budget: days away
    route = mock.post("/chat/completions").mock(
        return_value=error(429, "monthly_budget", **{"retry-after": far})
    )
    c, sleeps = client()
    with pytest.raises(zl.RateLimitError) as got:
        c.chat.completions.create(**CHAT)
    assert route.call_count == 1 and sleeps == []
    assert got.value.retry_after == float(far) and got.value.code == "monthly_budget"


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503, 504])
def test_retried_statuses(status: int) -> None:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        route = mock.post("/responses").mock(return_value=error(status, "x"))
        c, sleeps = client(max_retries=1)
        with pytest.raises(zl.APIStatusError):
            c.responses.create(model="m", input="hi")
    assert route.call_count == 2 and len(sleeps) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_statuses_a_retry_cannot_mend_are_not_retried(status: int) -> None:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        route = mock.post("/responses").mock(return_value=error(status, "x"))
        c, sleeps = client()
        with pytest.raises(zl.APIStatusError):
            c.responses.create(model="m", input="hi")
    assert route.call_count == 1 and sleeps == []


def test_only_posts_carry_a_key_and_a_chosen_key_is_sent_as_given(
    mock: respx.MockRouter,
) -> None:
    mock.get("/models").mock(return_value=httpx.Response(200, json={"data": []}))
    mock.delete(url__regex=r".*/responses/.*").mock(
        return_value=httpx.Response(200, json={"id": "resp_1", "deleted": True})
    )
    post = mock.post("/responses").mock(
        side_effect=[error(500, "x"), httpx.Response(200, json={"id": "r"})]
    )
    c, _ = client()
    c.models.list()
    c.responses.delete("resp_1")
    assert all("idempotency-key" not in call.request.headers for call in mock.calls)
    c.with_options(idempotency_key="order-42").responses.create(model="m", input="hi")
    assert [call.request.headers["idempotency-key"] for call in post.calls] == ["order-42"] * 2


def test_async_client_retries_with_the_same_key(mock: respx.MockRouter) -> None:
    route = mock.post("/chat/completions").mock(
        side_effect=[
            httpx.ConnectError("reset"),
            error(429, "concurrent_requests", **{"retry-after": "1"}),
            httpx.Response(200, json=REPLY),
        ]
    )

    async def run() -> zl.types.ChatCompletion:
        c, sleeps = aclient()
        got = await c.chat.completions.create(**CHAT)
        assert 0.375 <= sleeps[0] <= 0.5 and sleeps[1] == 1.0
        return got  # type: ignore[return-value]

    assert asyncio.run(run()).text == "Hello"
    keys = {call.request.headers["idempotency-key"] for call in route.calls}
    assert route.call_count == 3 and len(keys) == 1


# -- raw responses ----------------------------------------------------------------------------


def test_raw_response_has_headers_rate_limits_and_the_object(mock: respx.MockRouter) -> None:
    headers = {
        "x-request-id": "chatcmpl-1",
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "599",
        "x-ratelimit-reset-requests": "1m30s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "960",
        "x-ratelimit-reset-tokens": "250ms",
        "idempotent-replayed": "true",
    }
    mock.post("/chat/completions").mock(
        return_value=httpx.Response(200, json=REPLY, headers=headers)
    )
    c, _ = client()
    raw = c.with_raw_response.chat.completions.create(**CHAT)
    assert isinstance(raw, zl.APIResponse) and raw.status_code == 200 and raw.retries_taken == 0
    assert raw.request_id == "chatcmpl-1" and raw.replayed
    assert raw.ratelimit == zl.RateLimit(600, 599, 90.0, 1000, 960, 0.25)
    assert raw.parse().text == "Hello" and raw.parse() is raw.parse()
    assert not isinstance(c.chat.completions.create(**CHAT), zl.APIResponse)


# -- no connection left open ------------------------------------------------------------------


def test_error_answers_are_closed_retried_or_not(mock: respx.MockRouter) -> None:
    bodies = [
        Tracked([json.dumps({"error": {"message": "x", "code": "c"}}).encode()]) for _ in range(3)
    ]
    mock.post("/chat/completions").mock(side_effect=[httpx.Response(503, stream=b) for b in bodies])
    c, _ = client()
    with pytest.raises(zl.ServiceUnavailableError):
        c.chat.completions.create(**CHAT)
    assert [b.closed for b in bodies] == [True, True, True]


def _stream_route(mock: respx.MockRouter, parts: list[bytes]) -> Tracked:
    body = Tracked(parts)
    mock.post("/chat/completions").mock(
        return_value=httpx.Response(200, stream=body, headers={"content-type": "text/event-stream"})
    )
    return body


def test_a_stream_left_half_way_is_closed(mock: respx.MockRouter) -> None:
    c, _ = client()
    body = _stream_route(mock, STREAM)
    for ev in c.chat.completions.create(**CHAT, stream=True):
        if ev.choices and ev.choices[0].delta.content == "Hel":
            break  # leaving the loop
    assert body.closed
    body = _stream_route(mock, STREAM)
    with c.chat.completions.create(**CHAT, stream=True) as stream:
        next(stream)
    assert body.closed
    body = _stream_route(mock, STREAM)
    stream = c.chat.completions.create(**CHAT, stream=True)
    next(stream)
    stream.close()
    assert body.closed


def test_an_async_stream_left_half_way_is_closed(mock: respx.MockRouter) -> None:
    c, _ = aclient()

    async def run() -> list[Tracked]:
        first = _stream_route(mock, STREAM)
        async with await c.chat.completions.create(**CHAT, stream=True) as stream:
            async for _ in stream:
                break
        assert first.closed
        second = _stream_route(mock, STREAM)
        stream = await c.chat.completions.create(**CHAT, stream=True)
        await stream.__anext__()
        await stream.close()
        third = _stream_route(mock, STREAM)
        kept = await c.chat.completions.create(**CHAT, stream=True)
        async for _ in kept:
            break  # no `async with`: the loop's generator closes it once collected
        for _ in range(10):
            await asyncio.sleep(0)
        assert third.closed and kept is not None  # before asyncio.run closes what is left
        return [first, second, third]

    assert all(b.closed for b in asyncio.run(run()))


# -- streams ----------------------------------------------------------------------------------


def test_a_stream_gives_typed_chunks_its_text_and_the_final_answer(mock: respx.MockRouter) -> None:
    body = _stream_route(mock, STREAM)
    c, _ = client()
    stream = c.chat.completions.create(**CHAT, stream=True)
    sent = json.loads(mock.calls.last.request.content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert list(stream.text_stream) == ["Hel", "lo"]
    final = stream.get_final_response()
    assert final.text == "Hello" and final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.total_tokens == 5
    assert final.model == "smollm2-135m:sparse24" and body.closed
    body = _stream_route(mock, STREAM)
    events = list(c.chat.completions.create(**CHAT, stream=True))
    assert all(isinstance(e, zl.types.ChatCompletionChunk) for e in events) and len(events) == 5


def test_an_in_band_error_frame_raises_and_closes(mock: respx.MockRouter) -> None:
    failed = {
        "error": {"message": "the replica stopped", "type": "server_error", "code": "engine_error"}
    }
    body = _stream_route(mock, sse(chunk(None), chunk("Hel"), failed, "[DONE]"))
    c, _ = client()
    seen = []
    with pytest.raises(zl.StreamError) as got:
        for ev in c.chat.completions.create(**CHAT, stream=True):
            seen.append(ev)
    assert len(seen) == 2 and body.closed
    e = got.value
    assert e.code == "engine_error" and e.message == "the replica stopped"
    assert e.partial.text == "Hel"


def test_sse_frames_follow_the_event_stream_rules() -> None:
    dec = zl._streaming.SSEDecoder()
    lines = [": comment", "event: a", "data: one", "data: two", "id: 7", "", "data:three", ""]
    got = [ev for line in lines if (ev := dec.feed(line)) is not None]
    assert [(e.event, e.data, e.id) for e in got] == [("a", "one\ntwo", "7"), (None, "three", "7")]


def _response_events(final: str) -> list[bytes]:
    resource = {
        "id": "resp_1",
        "object": "response",
        "status": "in_progress",
        "model": "m",
        "output": [],
    }
    item = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hi there"}],
    }
    done = {
        **resource,
        "status": final,
        "output": [item],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }
    if final == "failed":
        done["error"] = {"code": "engine_error", "message": "broke"}
    events = [
        ("response.created", {"response": resource}),
        ("response.output_text.delta", {"item_id": "msg_1", "delta": "Hi"}),
        ("response.output_text.delta", {"item_id": "msg_1", "delta": " there"}),
        ("response.brand_new_event", {"x": 1}),
        (f"response.{final}", {"response": done}),
    ]
    return [
        f"event: {t}\ndata: {json.dumps({'type': t, 'sequence_number': i, **d})}\n\n".encode()
        for i, (t, d) in enumerate(events)
    ]


def test_a_response_stream_types_its_events_and_raises_when_it_failed(
    mock: respx.MockRouter,
) -> None:
    c, _ = client()
    mock.post("/responses").mock(
        return_value=httpx.Response(200, stream=Tracked(_response_events("completed")))
    )
    stream = c.responses.create(model="m", input="hi", stream=True)
    kinds = [type(ev).__name__ for ev in stream]
    assert kinds == [
        "ResponseLifecycleEvent",
        "ResponseTextDeltaEvent",
        "ResponseTextDeltaEvent",
        "ResponseStreamEvent",  # an event type this SDK does not know: kept, not refused
        "ResponseLifecycleEvent",
    ]
    final = stream.get_final_response()
    assert (
        final.output_text == "Hi there"
        and final.usage is not None
        and final.usage.total_tokens == 5
    )
    mock.post("/responses").mock(
        return_value=httpx.Response(200, stream=Tracked(_response_events("completed")))
    )
    assert "".join(c.responses.create(model="m", input="hi", stream=True).text_stream) == "Hi there"
    body = Tracked(_response_events("failed"))
    mock.post("/responses").mock(return_value=httpx.Response(200, stream=body))
    with pytest.raises(zl.StreamError) as got:
        list(c.responses.create(model="m", input="hi", stream=True))
    assert got.value.code == "engine_error" and got.value.partial.status == "failed" and body.closed


# -- pagination -------------------------------------------------------------------------------


def _items_page(request: httpx.Request) -> httpx.Response:
    ids = [f"msg_{i}" for i in range(7)]
    after = request.url.params.get("after")
    limit = int(request.url.params.get("limit", 20))
    start = ids.index(after) + 1 if after else 0
    page = ids[start : start + limit]
    data = [
        {"type": "message", "id": i, "role": "user", "content": [{"type": "input_text", "text": i}]}
        for i in page
    ]
    return httpx.Response(
        200,
        json={
            "object": "list",
            "data": data,
            "first_id": page[0],
            "last_id": page[-1],
            "has_more": start + limit < len(ids),
        },
    )


def test_a_page_iterates_across_cursors(mock: respx.MockRouter) -> None:
    route = mock.get("/conversations/conv_1/items").mock(side_effect=_items_page)
    c, _ = client()
    page = c.conversations.items.list("conv_1", limit=3, order="asc")
    assert [m.id for m in page.data] == ["msg_0", "msg_1", "msg_2"] and page.has_next_page()
    assert [m.text for m in page] == [f"msg_{i}" for i in range(7)]
    assert [len(p.data) for p in page.iter_pages()] == [3, 3, 1]
    afters = [call.request.url.params.get("after") for call in route.calls]
    assert afters[:3] == [None, "msg_2", "msg_5"]
    assert all(call.request.url.params["order"] == "asc" for call in route.calls)

    async def items() -> list[str]:
        ac, _ = aclient()
        first = await ac.conversations.items.list("conv_1", limit=3)
        assert len(first.data) == 3
        return [m.id async for m in ac.conversations.items.list("conv_1", limit=2)]

    assert asyncio.run(items()) == [f"msg_{i}" for i in range(7)]


def _log_page(request: httpx.Request) -> httpx.Response:
    # the request log's paging: an opaque next_cursor, sent back as `cursor`
    at = int(request.url.params.get("cursor", "0").removeprefix("2026-12:"))
    rows = [
        {"id": f"chatcmpl-{i}", "time": "2026-12-04T10:00:00Z", "cost_usd": "0.000001"}
        for i in range(at, min(at + 2, 5))
    ]
    more = at + 2 < 5
    body = {"object": "list", "data": rows, "has_more": more}
    return httpx.Response(200, json={**body, "next_cursor": f"2026-12:{at + 2}" if more else None})


def test_the_request_log_pages_by_its_own_cursor(mock: respx.MockRouter) -> None:
    route = mock.get("/requests").mock(side_effect=_log_page)
    c, _ = client()
    page = c.requests.list(days=3, limit=2)
    assert [e.id for e in page.data] == ["chatcmpl-0", "chatcmpl-1"] and page.has_next_page()
    assert [e.id for e in page] == [f"chatcmpl-{i}" for i in range(5)]
    cursors = [call.request.url.params.get("cursor") for call in route.calls]
    assert cursors == [None, "2026-12:2", "2026-12:4"]
    assert all(call.request.url.params["days"] == "3" for call in route.calls)
    assert all("after" not in call.request.url.params for call in route.calls)

    async def entries() -> list[str]:
        ac, _ = aclient()
        return [e.id async for e in ac.requests.list(limit=2)]

    assert asyncio.run(entries()) == [f"chatcmpl-{i}" for i in range(5)]


# -- chunks streamed up -----------------------------------------------------------------------


CHUNKS = [
    json.dumps(
        {
            "object": "chunk",
            "index": i,
            "input_index": 0,
            "text": t,
            "tokens": 2,
            "start_char": 4 * i,
            "end_char": 4 * i + 4,
        }
    ).encode()
    + b"\n"
    for i, t in enumerate(["abcd", "efgh"])
] + [b'{"object": "chunks.done", "chunks": 2, "tokens": 4, "chars": 8}\n']


def test_a_file_is_streamed_up_and_sent_again_on_a_retry(
    mock: respx.MockRouter, tmp_path: Any
) -> None:
    route = mock.post("/chunks").mock(
        side_effect=[error(503, "x"), httpx.Response(200, stream=Tracked(CHUNKS))]
    )
    path = tmp_path / "doc.txt"
    path.write_text("abcdefgh")
    c, _ = client()
    got = c.chunks.create(model="m", file=path, chunk_tokens=8)
    assert [ch.text for ch in got.data] == ["abcd", "efgh"] and got.usage.total_tokens == 4
    sent = [call.request for call in route.calls]
    assert [r.read() for r in sent] == [b"abcdefgh", b"abcdefgh"]
    assert sent[0].headers["content-type"].startswith("text/plain")
    assert sent[0].url.params["model"] == "m" and sent[0].url.params["chunk_tokens"] == "8"
    assert "idempotency-key" not in sent[0].headers


def test_an_iterator_is_sent_once_and_an_error_line_raises(mock: respx.MockRouter) -> None:
    route = mock.post("/chunks").mock(return_value=error(503, "x"))
    c, sleeps = client()
    with pytest.raises(zl.ServiceUnavailableError):
        c.chunks.create(model="m", text=iter(["abcd", "efgh"]))
    assert route.call_count == 1 and sleeps == []
    bad = CHUNKS[:1] + [b'{"error": {"message": "too many chunks", "code": "request_too_large"}}\n']
    route.mock(return_value=httpx.Response(200, stream=Tracked(bad)))
    seen = []
    with pytest.raises(zl.StreamError) as got:
        for ch in c.chunks.stream(model="m", text=["abcd"]):
            seen.append(ch.text)
    assert seen == ["abcd"] and got.value.code == "request_too_large"


# -- one API, twice ---------------------------------------------------------------------------


def _methods(obj: Any, path: str = "") -> set[str]:
    out = set()
    for name in dir(obj):
        if name.startswith("_") or name in ("with_raw_response",):
            continue
        value = getattr(obj, name)
        if isinstance(value, (zl._resource.SyncAPIResource, zl._resource.AsyncAPIResource)):
            out |= _methods(value, f"{path}{name}.")
        elif callable(value):
            out.add(path + name)
    return out


def test_the_async_client_has_the_same_methods() -> None:
    sync, asynchronous = _methods(zl.Client(api_key="k")), _methods(zl.AsyncClient(api_key="k"))
    assert sync == asynchronous
    for expected in (
        "chat.completions.create",
        "completions.create",
        "responses.create",
        "responses.retrieve",
        "responses.delete",
        "responses.input_items.list",
        "conversations.create",
        "conversations.update",
        "conversations.items.add",
        "conversations.items.list",
        "models.list",
        "usage.retrieve",
        "invoices.export",
        "chunks.create",
        "admin.keys.set_plan",
        "admin.tenants.delete_objects",
        "admin.tenants.list",
        "admin.operations.retrieve",
        "account.retrieve",
        "requests.list",
        "requests.export",
        "keys.list",
        "keys.update",
        "keys.revoke",
    ):
        assert expected in sync, expected
