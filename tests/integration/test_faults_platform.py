"""Fault tests against `zerolayer up` run as a user runs it (its own process), with real processes
killed: a tier replica mid-stream, the gateway with requests in flight; and SIGTERM, which must
drain and stop every process the launcher started, Redis last. (Redis killed under load:
tests/gateway/test_faults.py.)

The platform here is small (the default model on one torch-engine tier) and has its own cache,
Redis and Ray, so what these tests break touches no other test. The tests run in file order; the
last one stops the platform."""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import setup_budget
from tests.integration.up import Up, platform_dir, replicas, start_batch, wait

pytestmark = pytest.mark.integration

LEASE_S = 6.0


def _chat(up: Up, key: str, stream: bool, max_tokens: int = 64, **kw: Any) -> httpx.Response:
    return up.chat(
        key, "Count from one to fifty in words.", stream=stream, max_tokens=max_tokens, **kw
    )


@pytest.fixture(scope="module")
def up(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """One tier, the dense model on the torch engine, and short leases."""
    cache = tmp_path_factory.mktemp("faults-cache")
    platform = platform_dir(
        tmp_path_factory.mktemp("faults") / "platform",
        model_dir,
        {"baseline": {"artifact": "dense"}},
        gateway={"concurrency_lease_s": LEASE_S, "drain_s": 10},
        settings={"batches": {"lease_s": LEASE_S, "poll_s": 0.2}},
    )
    u = Up(cache, platform)
    with setup_budget(900):
        u.start().ready()
    yield u
    u.kill()  # a test failed before the SIGTERM test: stop it anyway


def _mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_secrets_stay_private(up: Up) -> None:
    key = (up.cache / "dev-key").read_text().strip()
    text = up.log.read_text()
    assert key not in text and "API key:  in " in text  # the output went to a file
    assert _mode(up.cache / "dev-key") == "0o600" and _mode(up.cache) == "0o700"
    assert _mode(up.redis.secret_file) == "0o600" and _mode(up.redis.socket.parent) == "0o700"
    # Ray: every call to its servers needs a token only this user can read; its session files
    # are in a folder only this user can enter
    raylets = [p for p in up.processes() if p.name() == "raylet"]
    assert raylets
    env = raylets[0].environ()
    assert env.get("RAY_AUTH_MODE") == "token"
    token = Path(env["RAY_AUTH_TOKEN_PATH"])
    assert _mode(token) == "0o600" and _mode(token.parent) == "0o700"
    session = re.search(r"(/\S+)/sockets/", " ".join(raylets[0].cmdline()))
    # <private>/ray/<session>/sockets/...: Ray makes its folders 0777, the one above is 0700
    assert session and _mode(Path(session.group(1)).parents[1]) == "0o700"
    # the platform's port is Ray Serve's HAProxy, whose files (an admin socket anyone could
    # write to, in Ray's default place) are in a folder only this user can enter
    haproxy = [p for p in up.processes() if p.name() == "haproxy"]
    assert haproxy, "the platform's port is not served by HAProxy"
    args = haproxy[-1].cmdline()
    folder = Path(args[args.index("-f") + 1]).parents[1]
    assert folder.name.startswith("ha") and _mode(folder) == "0o700"
    listening = {c.laddr.port for h in haproxy for c in h.net_connections() if c.status == "LISTEN"}
    assert up.port in listening


def _frames(up: Up, key: str, content: str, max_tokens: int, frames: list[str], at: Any) -> None:
    """Stream a chat request, collecting its SSE data frames; at(n) is called after the n-th."""
    body = {
        "model": "smollm2-135m",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        up.base + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                frames.append(line[6:])
                at(len(frames))


def test_a_replica_killed_mid_stream_ends_with_an_error_frame_then_done(up: Up) -> None:
    key, _ = up.key()
    frames: list[str] = []

    def kill_at_five(n: int) -> None:
        if n == 5:
            victims = replicas("smollm2-135m--baseline")
            assert victims, "no replica process found"
            for p in victims:
                p.kill()  # kill -9

    before = {p.pid for p in replicas("smollm2-135m--baseline")}
    _frames(up, key, "Count from one to two hundred in words.", 400, frames, kill_at_five)
    assert frames[-1] == "[DONE]", frames[-3:]
    err = json.loads(frames[-2])["error"]
    assert err["code"] == "engine_error", err
    # the tokens it was sent are billed, as an engine_error (the billing deployment counts it)
    sent = sum(1 for f in frames[:-2] if json.loads(f)["choices"][0]["delta"].get("content"))

    def billed() -> dict[str, Any] | None:
        r = httpx.get(up.base + "/v1/usage", headers={"Authorization": f"Bearer {key}"})
        totals = r.json()["totals"]
        return totals if totals["requests"] else None

    totals = wait(billed, 60, "the usage event to be counted")
    assert totals["statuses"] == {"engine_error": 1}, totals
    assert sent <= totals["completion_tokens"] <= sent + 3, (sent, totals)
    assert totals["prompt_tokens"] > 0 and totals["cost_usd"] != "0.00"
    # Ray restarts the replica; meanwhile requests get a bounded 503, then answers again
    seen: set[int] = set()

    def answered() -> bool:
        r = _chat(up, key, stream=False, max_tokens=4, timeout=90)
        seen.add(r.status_code)
        assert r.status_code in (200, 503), r.text
        return r.status_code == 200

    wait(answered, 240, "the restarted replica")
    print(f"statuses while the tier restarted: {sorted(seen)}")
    after = {p.pid for p in replicas("smollm2-135m--baseline")}
    assert after and not after & before  # a fresh replica answered


def test_a_gateway_killed_with_requests_in_flight_is_swept(up: Up) -> None:
    key, key_id = up.key()
    before = up.counters(key_id)

    def stream() -> None:
        try:
            _chat(up, key, stream=True, max_tokens=300, timeout=60)
        except httpx.HTTPError:
            pass  # the gateway died under it

    with ThreadPoolExecutor(3) as pool:
        for _ in range(3):
            pool.submit(stream)
        wait(lambda: up.counters(key_id)[0] == 3, 30, "three requests in flight")
        for p in replicas("gateway"):
            p.kill()
    held = up.counters(key_id)
    assert held[0] == 3 and held[1] > before[1]  # leases and worst-case reservations
    # the restarted gateway (or any other) sweeps them once their lease runs out
    wait(lambda: up.counters(key_id) == (0, before[1]), 120, "the sweep")
    wait(lambda: _chat(up, key, stream=False, max_tokens=4).status_code == 200, 120, "gateway")


def test_a_batch_survives_its_gateway_killed_without_doubles_or_losses(up: Up) -> None:
    """kill -9 of the gateway replica whose batch worker runs a batch, requests in flight: the
    restarted replica's worker takes the batch over once its lease runs out and completes it,
    every line once in the output, every request billed once."""
    key, key_id = up.key()
    auth = {"Authorization": f"Bearer {key}"}
    n = 40  # more than one round of the worker's groups: some are in flight when it dies
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "smollm2-135m",
                "messages": [{"role": "user", "content": f"Count from one to {i + 5} in words."}],
                "max_tokens": 16,
                "temperature": 0,
            },
        }
        for i in range(n)
    ]
    bid = start_batch(up.base + "/v1", key, lines)

    def batch() -> dict[str, Any] | None:
        try:
            r = httpx.get(f"{up.base}/v1/batches/{bid}", headers=auth, timeout=10)
        except httpx.HTTPError:
            return None  # the gateway is down
        return r.json() if r.status_code == 200 else None

    wait(lambda: (b := batch()) and b["request_counts"]["completed"] >= 3, 180, "3 lines run")
    wait(lambda: up.counters(key_id)[0] > 0, 30, "batch requests in flight")
    killed = batch()
    for p in replicas("gateway"):
        p.kill()  # the gateway replica and the batch worker inside it
    done = wait(
        lambda: (b := batch()) and b["status"] in ("completed", "failed") and b, 420, "the batch"
    )
    assert killed is not None and killed["request_counts"]["completed"] < n
    assert done["status"] == "completed", done
    assert done["request_counts"] == {"total": n, "completed": n, "failed": 0}, done
    out = httpx.get(
        f"{up.base}/v1/files/{done['output_file_id']}/content", headers=auth, timeout=60
    )
    rows = [json.loads(x) for x in out.text.splitlines()]
    assert [r["custom_id"] for r in rows] == [f"r{i}" for i in range(n)]  # each once, in order
    assert all(r["error"] is None for r in rows)
    # the usage events, once the biller has counted them: each request once, and the month's
    # spend (what the budget counts) is theirs exactly; no lease is left behind
    c = up.client()
    try:
        from zerolayer.store.keys import KeyStore

        tenant = KeyStore(c).get(key_id).owner

        def every() -> list[dict[str, Any]]:
            return [
                json.loads(t)
                for name in c.scan_iter(f"zl:bill:{{{tenant}}}:events:*")
                for t in c.lrange(name, 0, -1)
            ]

        def billed() -> list[dict[str, Any]]:
            # (a request refused for a while, 429, has an event at no cost: not a line's bill)
            return [
                e
                for e in every()
                if e["data"]["endpoint"] == "batch.chat.completions" and e["data"]["status"] == "ok"
            ]

        wait(lambda: len(billed()) >= n, 120, "every request's usage event")
        ids = [e["id"] for e in billed()]
        assert len(ids) == len(set(ids)) == n, (len(ids), len(set(ids)))
        assert set(ids) == {r["response"]["request_id"] for r in rows}
        wait(lambda: up.counters(key_id)[0] == 0, 60, "no lease left")
        spent = up.counters(key_id)[1]
        assert spent == sum(int(e["data"]["cost_nanos"]) for e in every()) > 0
    finally:
        c.close()
    print(
        f"batch of {n}: gateway killed at {killed['request_counts']['completed']} done; "
        f"output {len(rows)} lines, usage events {len(ids)} (distinct {len(set(ids))})"
    )


def test_sigterm_drains_and_stops_every_process_redis_last(up: Up) -> None:
    key, key_id = up.key()
    procs = up.processes()
    assert len(procs) > 3
    frames: list[str] = []

    def stream() -> None:
        _frames(up, key, "Name five colours.", 40, frames, lambda n: None)

    t = threading.Thread(target=stream)
    t.start()
    wait(lambda: frames, 30, "the stream to start")
    assert up.proc is not None
    up.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert frames[-1] == "[DONE]", frames[-3:]  # the request in flight finished
    assert "error" not in frames[-2]
    up.proc.wait(timeout=120)
    log = up.log.read_text()
    assert "stopped." in log, log[-2000:]
    assert "drain skipped" not in log, log[-2000:]  # drained, not just fast enough
    alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [(p.pid, p.name()) for p in alive]
    # Redis stopped last, its AOF complete: the request's settlement is there
    with up.redis:
        assert up.counters(key_id)[0] == 0
        c = up.client()
        assert c.exists(f"zl:keyid:{key_id}")
        c.close()
