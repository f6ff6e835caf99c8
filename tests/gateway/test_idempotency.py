"""Idempotency-Key on POST requests, through the gateway app on a real redis-server: a retry
replays the first result (streamed or not) and is billed once; another body is a 422; a retry
while the first runs is a 409."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, GatewayFactory
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
