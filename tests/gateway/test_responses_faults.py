"""Conversation state when Redis is killed: kill -9 of the server while 20 clients hold
conversations through the Responses API, then a restart on the same AOF."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from zerolayer.engines.fake import FakeEngine
from zerolayer.store.embedded import EmbeddedRedis

from tests.gateway.conftest import SCRIPT, GatewayFactory
from tests.gateway.test_api import assert_openai_error
from tests.gateway.test_faults import kill_under_load

pytestmark = pytest.mark.slow  # seconds of load or faults per test

ANSWER = "".join(SCRIPT)
CLIENTS = 20


def _all_items(gw: Any, cid: str) -> list[tuple[str, str]] | None:
    """A conversation's items, oldest first, by following the cursor; None if it is gone."""
    out: list[tuple[str, str]] = []
    after = None
    while True:
        q = "order=asc&limit=100" + (f"&after={after}" if after else "")
        r = gw.client.get(f"/v1/conversations/{cid}/items?{q}", headers=gw.auth)
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        page = r.json()
        out += [(i["role"], i["content"][0]["text"]) for i in page["data"]]
        if not page["has_more"]:
            return out
        after = page["last_id"]


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_redis_killed_while_20_clients_hold_conversations(
    make_gateway: GatewayFactory, tmp_path: Path, fsync: str
) -> None:
    """appendfsync always: every response the platform acknowledged is retrievable after the
    restart and every conversation holds its acknowledged turns, in order, each question next
    to its answer (none half-added); everysec: the loss is measured and printed."""
    server = EmbeddedRedis(tmp_path / "redis", appendfsync=fsync)  # type: ignore[arg-type]
    server.start()
    # a plan without per-key limits: the gateway's limiter clock is pinned inside one minute, so
    # on a quick machine the 20 clients' turns would reach the pro plan's 600 requests a minute
    gw = make_gateway(
        engine=FakeEngine(SCRIPT, delay_s=0.01), store=server.secret_url(), key_plan="enterprise"
    )
    acked: dict[str, list[tuple[str, str]]] = {}  # conversation -> (response id, question)
    statuses: dict[int, int] = {}
    stop = threading.Event()
    lock = threading.Lock()

    def run(n: int) -> None:
        cid, turn = None, 0
        while not stop.is_set():
            if cid is None:
                r = gw.client.post("/v1/conversations", headers=gw.auth, json={})
            else:
                q = f"client {n} turn {turn}"
                body = {"model": "smollm2-135m", "input": q, "conversation": cid}
                r = gw.client.post("/v1/responses", headers=gw.auth, json=body)
            with lock:
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code == 200 and cid is None:
                cid = r.json()["id"]
                with lock:
                    acked[cid] = []
            elif r.status_code == 200:
                with lock:
                    acked[cid].append((r.json()["id"], q))
                turn += 1
            else:  # Redis down (503), or the conversation still held by a broken-off turn
                time.sleep(0.05)

    restarted = EmbeddedRedis(tmp_path / "redis", appendfsync=fsync)  # type: ignore[arg-type]
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            futures = [pool.submit(run, n) for n in range(CLIENTS)]
            kill_under_load(server, restarted, stop, futures, 2.0, 3.0)
        gw.settled()
        turns = sum(len(v) for v in acked.values())
        lost_responses = lost_turns = lost_conversations = 0
        for cid, done in acked.items():
            for rid, _ in done:
                if gw.client.get(f"/v1/responses/{rid}", headers=gw.auth).status_code != 200:
                    lost_responses += 1
            items = _all_items(gw, cid)
            if items is None:
                lost_conversations += 1
                lost_turns += len(done)
                continue
            # never half-added: each question is directly followed by its answer
            assert len(items) % 2 == 0, items
            pairs = [(items[k], items[k + 1]) for k in range(0, len(items), 2)]
            assert all(u[0] == "user" and a == ("assistant", ANSWER) for u, a in pairs), items
            questions = [u[1] for u, _ in pairs]
            # the acknowledged turns, in order (a turn whose reply was lost may be there too)
            it = iter(questions)
            kept = [q for _, q in done if q in it]
            lost_turns += len(done) - len(kept)
            assert fsync != "always" or kept == [q for _, q in done], (done, questions)
        print(
            f"appendfsync {fsync}: statuses {statuses}; {len(acked)} conversations and "
            f"{turns} responses acknowledged; lost {lost_conversations} conversations, "
            f"{lost_responses} responses, {lost_turns} turns"
        )
        assert statuses.get(200, 0) > CLIENTS and statuses.get(503, 0) > 0, statuses
        assert set(statuses) <= {200, 409, 503}, statuses
        if fsync == "always":
            assert lost_responses == lost_turns == lost_conversations == 0
    finally:
        restarted.stop()
        server.stop()


def test_a_full_redis_refuses_writes_with_503_store_full_and_keeps_what_it_holds(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    server = EmbeddedRedis(tmp_path / "redis", maxmemory="4mb")
    server.start()
    try:
        gw = make_gateway(store=server.secret_url())
        made = gw.client.post("/v1/conversations", headers=gw.auth, json={"metadata": {"a": "b"}})
        assert made.status_code == 200, made.text
        metrics = gw.client.get("/metrics").text
        assert "zerolayer_redis_maxmemory_bytes 4194304" in metrics
        assert "zerolayer_redis_used_memory_bytes " in metrics
        filler = server.client()
        n = 0
        for size in (65536, 4096, 256, 16):  # until not even a small write fits
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                while n < 5000:
                    filler.set(f"filler:{n}", b"x" * size)
                    n += 1
        r = gw.client.post("/v1/conversations", headers=gw.auth, json={})
        err = assert_openai_error(r, 503, "server_error")
        assert err["code"] == "store_full" and int(r.headers["retry-after"]) >= 1
        # nothing stored was dropped to make room
        kept = gw.client.get(f"/v1/conversations/{made.json()['id']}", headers=gw.auth)
        assert kept.status_code == 200 and kept.json()["metadata"] == {"a": "b"}
        assert filler.exists("filler:0")
    finally:
        server.stop()
