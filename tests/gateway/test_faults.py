"""Faults around one gateway, with real processes where the promise depends on them: Redis stopped
mid-request and down, a client gone before its stream starts, a replica that breaks off, a tier
that does not take a request, and /healthz while a megabyte is being tokenized."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from zerolayer.engines.fake import FakeEngine
from zerolayer.protocol import Delta, ReplicaEvent, SamplingSpec, Start, Target
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.store.keys import KeyStore

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import CHAT, assert_openai_error, sse_events


def leases(gw: Any) -> int:
    return int(gw.redis.zcard(f"zl:rl:{{{gw.key_id}}}:conc"))


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def kill_under_load(
    server: EmbeddedRedis,
    restarted: EmbeddedRedis,
    stop: threading.Event,
    futures: list[Any],
    before_s: float,
    after_s: float,
) -> None:
    """kill -9 of the Redis server while `futures` load it, a restart on the same data after
    half a second, then stop the load and wait for it (no 500 anywhere: the test client raises
    on one)."""
    time.sleep(before_s)
    assert server._proc is not None
    server._proc.kill()
    server._proc.wait()
    time.sleep(0.5)
    restarted.start()  # same data and secret: the gateway's clients reconnect
    time.sleep(after_s)
    stop.set()
    for f in futures:
        f.result()


@pytest.mark.slow
def test_redis_stopped_mid_request_then_down_then_back(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    server.start()
    slow = FakeEngine(SCRIPT, delay_s=0.25)  # about 2 s per request
    gw = make_gateway(
        plans={"one": plan(concurrent_requests=1)},
        key_plan="one",
        engine=slow,
        store=server.secret_url(),
    )
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(
                gw.client.post, "/v1/chat/completions", headers=gw.auth, json=CHAT
            )
            wait_for(lambda: slow.requests == 1, 10, "the request to reach the engine")
            server.stop()  # SIGTERM: the AOF is flushed, the server exits
            # the admitted request still finishes: its answer does not need Redis
            assert running.result().status_code == 200
        # Redis is down: a clear 503 with Retry-After, not a 500
        down = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
        err = assert_openai_error(down, 503, "server_error")
        assert err["code"] == "store_unavailable" and int(down.headers["retry-after"]) >= 1
        assert gw.client.get("/healthz").status_code == 503
        server.start()  # the same data: the request's lease is still held
        # the settlement was retried until Redis answered: the lease comes back
        wait_for(lambda: leases(gw) == 0, 20, "the retried settlement")
        assert gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT).status_code == 200
    finally:
        server.stop()


def _scope(
    gw: Any,
    body: bytes,
    path: str = "/v1/chat/completions",
    kind: bytes = b"application/json",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, Any]:
    route, _, query = path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": route,
        "raw_path": route.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"authorization", f"Bearer {gw.key}".encode()),
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


def _leave_after(gw: Any, body: bytes, messages: int, **where: Any) -> list[dict[str, Any]]:
    """Call the app as a server would for a client that is gone after `messages` sends."""
    got: list[dict[str, Any]] = []

    async def call() -> None:
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if len(got) >= messages:
                raise OSError("connection reset by peer")
            got.append(message)

        try:
            await gw.app(_scope(gw, body, **where), receive, send)
        except Exception:  # the server's own handling of a gone client
            pass

    gw.client.portal.call(call)
    return got


def test_a_client_gone_before_the_stream_starts_is_settled(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(plans={"one": plan(concurrent_requests=1)}, key_plan="one")
    body = json.dumps({**CHAT, "stream": True}).encode()
    assert _leave_after(gw, body, 0) == []  # gone before the first byte
    gw.settled()
    assert leases(gw) == 0  # the lease came back although the stream never started
    assert gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT).status_code == 200


class _BrokenBackend:
    """Wraps a backend: streams break off after one token and complete() raises, as a Ray handle
    does when the replica's process dies."""

    def __init__(self, inner: Any, hang: bool = False):
        self.inner = inner
        self.hang = hang

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def stream(self, target: Target, spec: SamplingSpec) -> AsyncIterator[ReplicaEvent]:
        if self.hang:
            await asyncio.sleep(3600)
        yield Start(len(spec.prompt_token_ids))
        yield Delta("The", 1)
        raise RuntimeError("ActorDiedError: the replica's process died")

    async def complete(self, target: Target, spec: SamplingSpec) -> Any:
        if self.hang:
            await asyncio.sleep(3600)
        raise RuntimeError("ActorDiedError: the replica's process died")


def test_a_replica_dying_mid_stream_gives_an_error_frame_then_done(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(plans={"one": plan(concurrent_requests=1)}, key_plan="one")
    pipeline = gw.app.state.pipeline
    pipeline.backend = _BrokenBackend(pipeline.backend)
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "stream": True})
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "engine_error"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-2]) == "The"
    # non-streamed: a 503 in the OpenAI format, not a 500
    plain = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    assert assert_openai_error(plain, 503, "server_error")["code"] == "engine_error"
    gw.settled()
    assert leases(gw) == 0


def test_a_tier_that_takes_no_request_is_a_bounded_503(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(gateway={"tier_wait_s": 0.5, "request_timeout_s": 0.5})
    pipeline = gw.app.state.pipeline
    pipeline.backend = _BrokenBackend(pipeline.backend, hang=True)
    for stream in (True, False):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "stream": stream})
        err = assert_openai_error(r, 503, "server_error")
        assert err["code"] == "tier_unavailable" and int(r.headers["retry-after"]) >= 1


def test_healthz_answers_while_a_megabyte_is_tokenized(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    big = {**CHAT, "messages": [{"role": "user", "content": "lorem ipsum " * 87_000}]}
    done: list[str] = []
    lock = threading.Lock()

    def heavy() -> int:
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=big)
        with lock:
            done.append("big")
        return r.status_code

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(heavy)
        time.sleep(0.3)  # the body is in, tokenization under way
        answered = 0
        while not future.done() and answered < 3:
            assert gw.client.get("/healthz").status_code == 200
            with lock:
                if "big" not in done:
                    answered += 1
        status = future.result()
    assert status == 400  # over the context (and it was tokenized: the count is exact)
    assert answered >= 1, "/healthz did not answer while the big body was being tokenized"
    print(f"/healthz answered {answered} times while a megabyte was tokenized")


@pytest.mark.slow
@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_redis_killed_under_load(make_gateway: GatewayFactory, tmp_path: Path, fsync: str) -> None:
    """kill -9 of the Redis server while requests and key changes run. appendfsync always:
    every acknowledged key and settlement is there after the restart; everysec: the loss is
    measured and printed."""
    server = EmbeddedRedis(tmp_path / "redis", appendfsync=fsync)  # type: ignore[arg-type]
    server.start()
    gw = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.02), store=server.secret_url())
    price = gw.app.state.pipeline.config.plans["pro"].prices["baseline"]
    made: list[str] = []
    answered: list[dict[str, int]] = []
    statuses: dict[int, int] = {}
    stop = threading.Event()
    lock = threading.Lock()

    answered_ids: list[str] = []

    def load() -> None:
        while not stop.is_set():
            r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
            with lock:
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                if r.status_code == 200:
                    answered.append(r.json()["usage"])
                    answered_ids.append(r.headers["x-request-id"])

    def keys() -> None:
        while not stop.is_set():
            r = gw.client.post("/admin/keys", headers=gw.admin, json={"plan": "free"})
            if r.status_code == 201:
                made.append(r.json()["key_id"])

    restarted = EmbeddedRedis(tmp_path / "redis", appendfsync=fsync)  # type: ignore[arg-type]
    try:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(load) for _ in range(3)] + [pool.submit(keys)]
            kill_under_load(server, restarted, stop, futures, 1.5, 1.5)
        gw.billed()  # the settlements were retried until Redis answered, then counted
        client = restarted.client()
        lost = [k for k in made if not client.exists(f"zl:keyid:{k}")]
        p = f"zl:rl:{{{gw.key_id}}}"
        leases = client.zcard(f"{p}:conc")
        spend = sum(int(client.get(k) or 0) for k in client.scan_iter(f"{p}:cost:*"))
        tenant = KeyStore(client).get(gw.key_id).owner
        events = [
            json.loads(e)["id"]
            for name in client.scan_iter(f"zl:bill:{{{tenant}}}:events:*")
            for e in client.lrange(name, 0, -1)
        ]
        client.close()
        expected = sum(price.nanos(u["prompt_tokens"], u["completion_tokens"]) for u in answered)
        missing = set(answered_ids) - set(events)
        print(
            f"appendfsync {fsync}: statuses {statuses}; keys acknowledged {len(made)}, lost "
            f"{len(lost)}; spend {spend} of {expected} nano-USD acknowledged; leases left "
            f"{leases}; usage events of answered requests {len(answered_ids)}, lost "
            f"{len(missing)}, counted twice {len(events) - len(set(events))}"
        )
        assert set(statuses) <= {200, 503} and statuses.get(200, 0) > 0, statuses
        assert statuses.get(503, 0) > 0  # Redis really was down for some requests
        assert len(events) == len(set(events))  # whatever survived is counted once
        if fsync == "always":
            assert made and not lost
            assert leases == 0 and spend == expected
            assert not missing  # every answered request's usage event is there
    finally:
        restarted.stop()
        server.stop()


def test_draining_refuses_new_requests_and_waits_for_those_in_flight(
    make_gateway: GatewayFactory,
) -> None:
    slow = FakeEngine(SCRIPT, delay_s=0.2)  # about 1.4 s
    gw = make_gateway(engine=slow)
    meter = gw.app.state.meter
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(
            gw.client.post, "/v1/chat/completions", headers=gw.auth, json={**CHAT, "stream": True}
        )
        wait_for(lambda: slow.requests == 1, 10, "the request to reach the engine")
        left = pool.submit(gw.client.portal.call, meter.quiesce, 30.0)
        wait_for(lambda: meter.draining, 10, "draining to start")
        refused = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
        err = assert_openai_error(refused, 503, "server_error")
        assert err["code"] == "shutting_down" and int(refused.headers["retry-after"]) >= 1
        assert not left.done()  # still waiting for the request in flight
        done = running.result()
        assert done.status_code == 200 and sse_events(done.text)[-1] == "[DONE]"
        assert left.result() == 0  # it ended and settled within the drain
    assert leases(gw) == 0


def test_a_client_gone_before_streamed_chunks_start_is_settled(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(plans={"one": plan(concurrent_requests=1)}, key_plan="one")
    where = {"path": "/v1/chunks?model=smollm2-135m", "kind": b"text/plain"}
    assert _leave_after(gw, b"some text to cut", 0, **where) == []
    gw.settled()
    assert leases(gw) == 0  # the lease came back although the stream never started


def test_a_client_gone_mid_stream_pays_what_was_delivered(make_gateway: GatewayFactory) -> None:
    engine = FakeEngine(SCRIPT, delay_s=0.05)
    gw = make_gateway(
        plans={"meter": plan(monthly_budget_usd=100.0)}, key_plan="meter", engine=engine
    )
    body = json.dumps({**CHAT, "stream": True, "max_tokens": 7}).encode()
    got = _leave_after(gw, body, 4)  # the start, the role frame and two tokens, then gone
    assert len(got) == 4
    gw.settled()
    assert leases(gw) == 0
    prompt = len(gw.prompts.chat(CHAT["messages"]))
    spend = sum(
        int(gw.redis.get(k) or 0) for k in gw.redis.scan_iter(f"zl:rl:{{{gw.key_id}}}:cost:*")
    )
    # the plan's price: 1 micro-USD per prompt token, 2 per completion token (in nano-USD)
    assert prompt * 10**6 + 2 * 2 * 10**6 <= spend < (prompt + 2 * 7) * 10**6, spend


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_stream_ends_within_a_second_of_its_keys_revocation(
    make_gateway: GatewayFactory, path: str
) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT * 40, delay_s=0.05))  # 640 tokens, 32 s
    if path == "/v1/responses":
        body: dict[str, Any] = {"model": "smollm2-135m", "input": "Hi", "stream": True}
    else:
        body = {**CHAT, "max_tokens": 640, "stream": True}
    frames: list[str] = []
    revoked_at = ended_at = 0.0
    with httpx.stream(
        "POST", gw.http().removesuffix("/v1") + path, headers=gw.auth, json=body, timeout=60
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                frames.append(line[len("data: ") :])
            if len(frames) == 10 and not revoked_at:
                KeyStore(gw.redis).revoke(gw.key_id)
                revoked_at = time.monotonic()
        ended_at = time.monotonic()
    assert revoked_at and ended_at - revoked_at < 1.5, ended_at - revoked_at
    assert "key_revoked" in "".join(frames[-3:])
    assert frames[-1] == "[DONE]"  # both end properly, after their last event
    if path == "/v1/responses":
        assert json.loads(frames[-2])["type"] == "response.failed"
    # billed for what it delivered: more than nothing, less than the whole answer
    gw.billed()
    month = time.strftime("%Y-%m", time.gmtime())
    name = f"zl:bill:{{{gw.record().owner}}}:events:{month}"
    billed = [json.loads(e)["data"] for e in gw.redis.lrange(name, 0, -1)]
    assert len(billed) == 1 and 5 <= billed[0]["completion_tokens"] < 100
