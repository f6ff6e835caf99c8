"""Idempotency-Key on POST requests, through the gateway app on a real redis-server: a retry
replays the first result (streamed or not) and is billed once; another body is a 422; a retry
while the first runs is a 409."""

from __future__ import annotations

import base64
import hashlib
import json
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from zerolayer.engines.fake import FakeEngine
from zerolayer.store.keys import KeyStore

from tests.gateway.conftest import ADMIN_KEY, SCRIPT, GatewayFactory
from tests.gateway.test_api import CHAT, assert_openai_error, sse_events
from tests.gateway.test_faults import _leave_after, wait_for


def _post(gw: Any, key: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> Any:
    return gw.client.post(path, headers={**gw.auth, "Idempotency-Key": key}, json=body)


def _billed(gw: Any) -> list[dict[str, Any]]:
    gw.billed()
    month = time.strftime("%Y-%m", time.gmtime())
    name = f"zl:bill:{{{gw.record().owner}}}:events:{month}"
    return [json.loads(e)["data"] for e in gw.redis.lrange(name, 0, -1)]


def test_a_retry_replays_the_first_reply_and_is_billed_once(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    first = _post(gw, "order-1", CHAT)
    again = _post(gw, "order-1", CHAT)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()  # the same id, text and usage
    assert again.headers["x-request-id"] == first.headers["x-request-id"]
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    other = _post(gw, "order-2", CHAT)  # another key runs again
    assert other.json()["id"] != first.json()["id"]
    assert len(_billed(gw)) == 2
    # the same key with another body is refused; the first result stays
    changed = _post(gw, "order-1", {**CHAT, "max_tokens": 3})
    err = assert_openai_error(changed, 422, "invalid_request_error")
    assert err["code"] == "idempotency_key_reused" and err["param"] == "Idempotency-Key"
    assert _post(gw, "order-1", CHAT).json() == first.json()
    bad = _post(gw, "x" * 256, CHAT)
    assert assert_openai_error(bad, 400, "invalid_request_error")["code"] == (
        "invalid_idempotency_key"
    )
    assert len(_billed(gw)) == 2


def test_a_streamed_retry_replays_the_frames(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    first = _post(gw, "stream-1", body)
    again = _post(gw, "stream-1", body)
    assert again.headers["content-type"].startswith("text/event-stream")
    assert again.text == first.text and sse_events(again.text)[-1] == "[DONE]"
    assert len(_billed(gw)) == 1


def test_a_retry_while_the_first_runs_is_a_409_and_runs_nothing(
    make_gateway: GatewayFactory,
) -> None:
    engine = FakeEngine(SCRIPT, delay_s=0.15)  # about a second
    gw = make_gateway(engine=engine)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_post, gw, "slow-1", CHAT)
        wait_for(lambda: engine.requests == 1, 10, "the first to reach the engine")
        busy = _post(gw, "slow-1", CHAT)
        err = assert_openai_error(busy, 409, "invalid_request_error")
        assert err["code"] == "idempotency_in_progress" and busy.headers["retry-after"] == "1"
        first = running.result()
    assert _post(gw, "slow-1", CHAT).json() == first.json()
    assert engine.requests == 1 and len(_billed(gw)) == 1


def test_ten_concurrent_duplicates_run_once(make_gateway: GatewayFactory) -> None:
    engine = FakeEngine(SCRIPT, delay_s=0.02)
    gw = make_gateway(engine=engine)
    start = threading.Barrier(10)

    def post(_: int) -> Any:
        start.wait()
        return _post(gw, "dup-1", CHAT)

    with ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(post, range(10)))
    codes = sorted(r.status_code for r in replies)
    assert set(codes) <= {200, 409} and codes.count(200) >= 1, codes
    ids = {r.json()["id"] for r in replies if r.status_code == 200}
    assert len(ids) == 1 and engine.requests == 1
    assert len(_billed(gw)) == 1


def test_a_refused_request_releases_its_key(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    too_long = {**CHAT, "max_tokens": 10**6}
    assert _post(gw, "fix-1", too_long).status_code == 400
    # a refusal is not a result: the same key may carry the corrected request... of the same body
    assert _post(gw, "fix-1", too_long).status_code == 400
    assert _post(gw, "fix-2", CHAT).status_code == 200


def test_a_stream_whose_client_left_replays_what_it_was_sent(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.05))
    body = {**CHAT, "stream": True, "max_tokens": 7}
    raw = json.dumps(body).encode()
    got = _leave_after(gw, raw, 4, headers=[(b"idempotency-key", b"gone-1")])
    assert len(got) == 4
    gw.settled()
    again = _post(gw, "gone-1", body)
    events = sse_events(again.text)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "incomplete_result"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-2])
    assert text == "".join(SCRIPT[:2])
    billed = _billed(gw)
    assert len(billed) == 1 and billed[0]["completion_tokens"] == 2


# What a second security review found, over real HTTP (uvicorn in front of the app)


def _root(gw: Any) -> str:
    return gw.http().removesuffix("/v1")


def _idem_values(gw: Any, key: str) -> list[bytes]:
    """What the entries of an Idempotency-Key hold, their kept bodies decoded (base64)."""
    out = []
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    for name in gw.redis.scan_iter(match=f"zl:idem:*:{digest}"):
        raw = gw.redis.get(name) or b"{}"
        out += [raw, base64.b64decode(json.loads(raw).get("content", ""))]
    return out


def test_a_revoked_key_is_never_replayed(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    headers = {**gw.auth, "Idempotency-Key": "revoked-1"}
    url = _root(gw) + "/v1/chat/completions"
    assert httpx.post(url, headers=headers, json=CHAT, timeout=30).status_code == 200
    KeyStore(gw.redis).revoke(gw.key_id)
    again = httpx.post(url, headers=headers, json=CHAT, timeout=30)
    assert assert_openai_error(again, 401)["code"] == "invalid_api_key"
    assert "idempotent-replayed" not in again.headers


def test_the_scope_is_the_key_id_path_and_query_not_the_header_text(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    key = gw.auth["Authorization"].split(" ", 1)[1]
    url = _root(gw) + "/v1/chat/completions"
    ids = set()
    for spelling in (f"Bearer {key}", f"bearer {key}", f"BEARER {key}", f"Bearer   {key}"):
        headers = {"Authorization": spelling, "Idempotency-Key": "spelled-1"}
        ids.add(httpx.post(url, headers=headers, json=CHAT, timeout=30).json()["id"])
    assert len(ids) == 1  # one run, three replays
    assert len(_billed(gw)) == 1
    # the query is part of what was asked: another chunk size is another request
    text = "The quick brown fox jumps over the lazy dog. " * 20
    sizes = []
    for n in (8, 64):
        r = httpx.post(
            f"{_root(gw)}/v1/chunks?model=smollm2-135m&chunk_tokens={n}",
            headers={**gw.auth, "Idempotency-Key": "chunks-1", "content-type": "text/plain"},
            content=text.encode(),
            timeout=30,
        )
        assert r.status_code == 200 and "idempotent-replayed" not in r.headers, r.text
        sizes.append(len([line for line in r.text.splitlines() if '"chunk"' in line]))
    assert sizes[0] > sizes[1] >= 1


def test_a_store_false_response_is_not_kept_and_not_replayed(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    headers = {**gw.auth, "Idempotency-Key": "nostore-1"}
    body = {"model": "smollm2-135m", "input": "Say something", "store": False}
    url = _root(gw) + "/v1/responses"
    first = httpx.post(url, headers=headers, json=body, timeout=30)
    assert first.status_code == 200
    text = first.json()["output"][0]["content"][0]["text"]
    kept = _idem_values(gw, "nostore-1")
    assert text and len(kept) == 2 and not any(text.encode() in v for v in kept)
    again = httpx.post(url, headers=headers, json=body, timeout=30)
    assert assert_openai_error(again, 409)["code"] == "idempotency_result_not_kept"
    assert len(_billed(gw)) == 1  # it did not run again


def test_a_deleted_response_or_conversation_is_not_replayed(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    root = _root(gw)
    headers = {**gw.auth, "Idempotency-Key": "deleted-1"}
    body = {"model": "smollm2-135m", "input": "Say something"}
    first = httpx.post(root + "/v1/responses", headers=headers, json=body, timeout=30)
    assert first.status_code == 200
    rid = first.json()["id"]
    replayed = httpx.post(root + "/v1/responses", headers=headers, json=body, timeout=30)
    assert replayed.headers["idempotent-replayed"] == "true"  # while it exists
    assert httpx.delete(f"{root}/v1/responses/{rid}", headers=gw.auth).status_code == 200
    again = httpx.post(root + "/v1/responses", headers=headers, json=body, timeout=30)
    assert assert_openai_error(again, 409)["code"] == "idempotency_result_deleted"
    assert rid not in again.text
    # a conversation deleted after its creation was acknowledged
    conv = {"metadata": {"topic": "secret plans"}}
    headers = {**gw.auth, "Idempotency-Key": "deleted-2"}
    made = httpx.post(root + "/v1/conversations", headers=headers, json=conv, timeout=30)
    cid = made.json()["id"]
    assert httpx.delete(f"{root}/v1/conversations/{cid}", headers=gw.auth).status_code == 200
    again = httpx.post(root + "/v1/conversations", headers=headers, json=conv, timeout=30)
    assert assert_openai_error(again, 409)["code"] == "idempotency_result_deleted"
    assert "secret plans" not in again.text


def test_a_key_made_through_the_admin_api_is_never_kept(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Idempotency-Key": "admin-1"}
    made = httpx.post(_root(gw) + "/admin/keys", headers=headers, json={"plan": "pro"}, timeout=30)
    assert made.status_code == 201, made.text
    secret = made.json()["key"].encode()
    assert not any(secret in v for v in _idem_values(gw, "admin-1"))


def test_a_slow_body_with_the_header_and_no_key_times_out(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(gateway={"body_timeout_s": 1.0})
    host, port = _root(gw).removeprefix("http://").split(":")
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        "Idempotency-Key: slow-1\r\ncontent-length: 100\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        t0 = time.monotonic()
        sock.sendall(head.encode() + b'{"model": ')  # and then one byte now and then
        reply = b""
        while b"\r\n\r\n" not in reply:
            if select.select([sock], [], [], 0.5)[0]:
                piece = sock.recv(65536)
                if not piece:
                    break
                reply += piece
            else:
                sock.sendall(b" ")
        waited = time.monotonic() - t0
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert waited < 10


def test_the_result_is_kept_before_the_last_chunk_goes_out(redis_url: str) -> None:
    """A client that retries the moment it has the whole answer must find it kept, not a 409
    "still running": the layer keeps the result (or releases the key after a refusal) before it
    sends the answer's last chunk. Checked on the ASGI layer itself, whose send sees each chunk
    as the client would."""
    import asyncio

    import redis.asyncio as aioredis
    from zerolayer.gateway.idempotency import Idempotency
    from zerolayer.store.keys import ApiKeyRecord

    record = ApiKeyRecord("k-last-chunk", "pro", time.time(), "test", False)

    def app_answering(status: int) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await receive()
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b'{"a": ', "more_body": True})
            await send({"type": "http.response.body", "body": b"1}"})

        return app

    async def run(status: int, idem: str) -> list[Any]:
        client = aioredis.from_url(redis_url)
        seen: list[Any] = []

        async def lookup(_key: str) -> ApiKeyRecord:
            return record

        layer = Idempotency(app_answering(status), client, lookup)
        digest = hashlib.sha256(idem.encode()).hexdigest()[:32]

        async def stored() -> Any:
            names = [n async for n in client.scan_iter(match=f"zl:idem:*:{digest}")]
            return json.loads(await client.get(names[0])) if names else None

        async def send(msg: Any) -> None:
            if msg["type"] == "http.response.body":
                seen.append((msg.get("more_body", False), await stored()))

        async def receive() -> Any:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "query_string": b"",
            "headers": [(b"authorization", b"Bearer sk-x"), (b"idempotency-key", idem.encode())],
        }
        await layer(scope, receive, send)
        await client.aclose()
        return seen

    kept = asyncio.run(run(200, "last-chunk-ok"))
    assert kept[0][0] and kept[0][1]["state"] == "running"  # a first chunk: still running
    assert not kept[1][0] and kept[1][1]["state"] == "done"  # the last: kept already
    assert base64.b64decode(kept[1][1]["content"]) == b'{"a": 1}'
    refused = asyncio.run(run(429, "last-chunk-refused"))
    assert refused[0][1]["state"] == "running" and refused[1][1] is None  # released first
