"""End to end through the started platform: admin API, limits, settlement on disconnect,
/v1/chunks, /metrics, slow and oversized bodies (tokenfix and chunker run as their own
deployments)."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import struct
import time
from pathlib import Path

import httpx
import psutil
import pytest
from zerolayer.serve.launcher import Platform
from zerolayer.store.connect import sync_client

from tests.integration.conftest import ADMIN_KEY, BODY_TIMEOUT_S, HEADER_TIMEOUT_S, PER_SOURCE
from tests.integration.up import wait

pytestmark = pytest.mark.integration

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def root(p: Platform) -> str:
    return f"http://{p.cfg.host}:{p.cfg.port}"


def new_key(p: Platform, plan: str) -> dict[str, str]:
    r = httpx.post(root(p) + "/admin/keys", json={"plan": plan}, headers=ADMIN, timeout=30)
    assert r.status_code == 201, r.text
    return r.json()


def test_admin_key_limits_and_revocation(platform: Platform) -> None:
    made = new_key(platform, "tight")  # 2 requests per minute
    auth = {"Authorization": f"Bearer {made['key']}"}
    body = {"model": "smollm2-135m", "messages": FRANCE, "max_tokens": 2}
    if 60 - time.time() % 60 < 20:  # keep the three requests in one calendar minute
        time.sleep(21)
    codes = []
    for _ in range(3):
        r = httpx.post(platform.base_url + "/chat/completions", json=body, headers=auth, timeout=60)
        codes.append(r.status_code)
    assert codes == [200, 200, 429], codes
    assert r.json()["error"]["code"] == "requests_per_minute" and r.headers["retry-after"]
    listed = httpx.get(root(platform) + "/admin/keys", headers=ADMIN, timeout=30).json()["data"]
    assert any(k["key_id"] == made["key_id"] and k["plan"] == "tight" for k in listed)
    gone = httpx.delete(root(platform) + f"/admin/keys/{made['key_id']}", headers=ADMIN)
    assert gone.status_code == 200 and gone.json()["revoked"]
    r = httpx.get(platform.base_url + "/models", headers=auth, timeout=30)
    assert r.status_code == 401


def test_a_client_that_leaves_mid_stream_is_settled(platform: Platform) -> None:
    made = new_key(platform, "pro")
    auth = {"Authorization": f"Bearer {made['key']}"}
    body = {
        "model": "smollm2-135m:sparse24",
        "messages": [{"role": "user", "content": "Count from one to one hundred in words."}],
        "max_tokens": 200,
        "temperature": 0,
        "stream": True,
    }
    client = sync_client(platform.cfg.redis)
    leases = f"zl:rl:{{{made['key_id']}}}:conc"
    with httpx.stream(
        "POST", platform.base_url + "/chat/completions", json=body, headers=auth, timeout=60
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(line for line in lines if '"content"' in line and '""' not in line)
        assert client.zcard(leases) == 1  # in flight
    deadline = time.monotonic() + 20
    while client.zcard(leases) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.zcard(leases) == 0  # the lease is back without waiting for the engine
    # the month's spend was settled to what was delivered, well under the 200-token reservation
    month = time.strftime("%Y-%m", time.gmtime())
    spent = int(client.get(f"zl:rl:{{{made['key_id']}}}:cost:{month}") or 0)
    worst = (70 * 40 + 210 * 200) * 1000  # sparse24 prices of pro, in nano-USD
    assert 0 < spent < worst / 2, spent
    client.close()


@pytest.mark.parametrize("how", ["reset", "close"])
def test_a_client_that_leaves_a_whole_answer_stops_the_engine_and_pays_what_ran(
    platform: Platform, how: str
) -> None:
    made = new_key(platform, "pro")
    auth = {"Authorization": f"Bearer {made['key']}"}
    body = {  # a text completion that goes on counting (a chat answer may stop early)
        "model": "smollm2-135m:sparse24",
        "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
        "max_tokens": 1000,
        "temperature": 0,
    }
    # the client sends its request, waits a second and is gone: its connection reset, or
    # closed gracefully (HAProxy's abortonclose passes either on to the gateway)
    raw = json.dumps(body).encode()
    conn = socket.create_connection((platform.cfg.host, platform.cfg.port))
    conn.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {made['key']}\r\nContent-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )
    time.sleep(1.0)
    if how == "reset":
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()
    left = time.monotonic()

    def settled() -> dict | None:
        got = httpx.get(platform.base_url + "/usage", headers=auth, timeout=30).json()
        return got["totals"] if got["totals"]["requests"] else None

    totals = wait(settled, 30, "the abandoned request in /v1/usage", every_s=0.2)
    print(f"settled {time.monotonic() - left:.2f} s after the client left: {totals}")
    assert totals["statuses"] == {"client_disconnect": 1}, totals
    # the replica stopped its engine and said what ran: some tokens, far from the 1000 asked
    assert 0 < totals["completion_tokens"] < 500, totals
    assert totals["prompt_tokens"] > 0


def test_chunks_and_metrics(platform: Platform) -> None:
    text = "Ray Serve routes requests to replicas. " * 200
    r = httpx.post(
        platform.base_url + "/chunks",
        json={"model": "smollm2-135m", "input": text, "chunk_tokens": 128},
        headers={"Authorization": f"Bearer {platform.key}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    chunks = r.json()["data"]
    assert "".join(c["text"] for c in chunks) == text and all(c["tokens"] <= 128 for c in chunks)
    metrics = httpx.get(root(platform) + "/metrics", timeout=30).text
    assert "zerolayer_requests_total{" in metrics and "zerolayer_queue_wait_seconds{" in metrics


def test_a_long_prompt_is_summarised_by_the_real_model_when_asked(platform: Platform) -> None:
    facts = (
        "The Eiffel Tower is in Paris. It was finished in 1889 for a world fair. "
        "It is made of iron and is about 330 metres tall. "
    )
    body = {
        "model": "smollm2-135m:baseline",
        "messages": [{"role": "user", "content": facts * 90 + "\nWhere is the tower?"}],
        "max_tokens": 24,
        "temperature": 0,
    }
    auth = {"Authorization": f"Bearer {platform.key}"}
    url = platform.base_url + "/chat/completions"
    refused = httpx.post(url, json=body, headers=auth, timeout=60)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.post(url, json={**body, "long_prompt": "summarize"}, headers=auth, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    job = out["zerolayer_summary"]
    assert job["chunks"] >= 5 and job["calls"] >= job["chunks"]
    assert out["choices"][0]["message"]["content"].strip()
    assert out["usage"]["prompt_tokens"] > job["prompt_tokens"] >= 2048


def _response(sock: socket.socket) -> str:
    """One whole HTTP response from a raw socket (headers, then content-length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        if not piece:
            return data.decode(errors="replace")
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        piece = sock.recv(65536)
        if not piece:
            break
        body += piece
    return (head + b"\r\n\r\n" + body).decode(errors="replace")


def test_a_slow_body_gets_408_and_the_gateway_keeps_serving(platform: Platform) -> None:
    key = new_key(platform, "pro")["key"]
    with socket.create_connection((platform.cfg.host, platform.cfg.port), timeout=60) as sock:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {key}\r\ncontent-type: application/json\r\n"
            "content-length: 100\r\n\r\n"
        )
        t0 = time.monotonic()
        sock.sendall(head.encode() + b'{"model": ')  # and then nothing more
        reply = _response(sock)
        waited = time.monotonic() - t0
    assert reply.startswith("HTTP/1.1 408"), reply[:200]
    assert "request_timeout" in reply
    assert BODY_TIMEOUT_S - 0.5 < waited < BODY_TIMEOUT_S + 20
    assert httpx.get(root(platform) + "/healthz", timeout=30).status_code == 200


def test_an_oversized_chunked_body_is_refused_while_it_is_read(platform: Platform) -> None:
    key = new_key(platform, "pro")["key"]
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {key}\r\ncontent-type: application/json\r\n"
        "transfer-encoding: chunked\r\n\r\n"
    )
    piece = b"100000\r\n" + b" " * (1 << 20) + b"\r\n"  # 1 MiB per chunk, no declared length
    sent, total = 0, 256 << 20
    with socket.create_connection((platform.cfg.host, platform.cfg.port), timeout=10) as sock:
        sock.sendall(head.encode())
        while sent < total:  # until the gateway answers
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(piece)
            except OSError:  # the gateway stopped reading or closed: it has answered
                break
            sent += 1 << 20
        sock.settimeout(30)
        reply = _response(sock)
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert "request_too_large" in reply
    # the answer came before the whole body was sent (a gateway that reads the body whole
    # answers only after all of it); how much went out first depends on the machine's load
    assert sent < total, sent


def test_the_edge_keeps_one_request_id_and_no_client_timeout(platform: Platform) -> None:
    body = {
        "model": "smollm2-135m:sparse24",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
    }
    headers = {
        "Authorization": f"Bearer {platform.key}",
        "x-request-id": "client-chose-this",
        # Ray Serve would time the request out itself and answer a plain-text 408
        "x-request-timeout-seconds": "0.001",
    }
    r = httpx.post(platform.base_url + "/chat/completions", json=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers.get_list("x-request-id") == [r.json()["id"]]
    health = httpx.get(root(platform) + "/healthz", headers={"x-request-id": "abc"}, timeout=30)
    assert health.headers.get_list("x-request-id") == ["abc"]


def test_usage_and_invoices_are_metered_by_the_billing_deployment(platform: Platform) -> None:
    made = new_key(platform, "pro")
    auth = {"Authorization": f"Bearer {made['key']}"}
    body = {"model": "smollm2-135m", "messages": FRANCE, "max_tokens": 8, "temperature": 0}
    whole = httpx.post(platform.base_url + "/chat/completions", json=body, headers=auth, timeout=60)
    streamed = httpx.post(
        platform.base_url + "/chat/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
        headers=auth,
        timeout=60,
    )
    assert whole.status_code == streamed.status_code == 200
    ended = time.monotonic()

    def counted() -> dict | None:
        got = httpx.get(platform.base_url + "/usage", headers=auth, timeout=30).json()
        return got if got["totals"]["requests"] >= 2 else None

    usage = wait(counted, 30, "both requests in /v1/usage", every_s=0.05)
    delay = time.monotonic() - ended
    print(f"both requests in /v1/usage {delay:.2f} s after the second ended")
    totals = usage["totals"]
    assert totals["requests"] == 2 and totals["statuses"] == {"ok": 2}, usage
    frames = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: {")]
    streamed_usage = json.loads(frames[-1])["usage"]
    # the same prompt streamed and not: the same tokens, so the same cost
    assert streamed_usage == whole.json()["usage"]
    assert totals["completion_tokens"] == 2 * whole.json()["usage"]["completion_tokens"]
    month = time.strftime("%Y-%m", time.gmtime())
    inv = httpx.get(platform.base_url + f"/invoices/{month}", headers=auth, timeout=30).json()
    assert inv["status"] == "open" and inv["lines"][0]["tier"] == "baseline"
    client = sync_client(platform.cfg.redis)
    spent = int(client.get(f"zl:rl:{{{made['key_id']}}}:cost:{month}") or 0)
    client.close()
    assert inv["subtotal_nanos"] == spent > 0  # the budget and the invoice agree exactly
    stats = httpx.get(root(platform) + "/admin/billing", headers=ADMIN, timeout=30).json()
    assert made["tenant"] in stats["tenants"] and stats["stream"]["pending"] == 0
    # a retried POST with the same Idempotency-Key is not run (nor billed) again
    idem = {**auth, "Idempotency-Key": "integration-1"}
    first = httpx.post(platform.base_url + "/chat/completions", json=body, headers=idem, timeout=60)
    again = httpx.post(platform.base_url + "/chat/completions", json=body, headers=idem, timeout=60)
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    time.sleep(1.0)
    later = httpx.get(platform.base_url + "/usage", headers=auth, timeout=30).json()
    assert later["totals"]["requests"] == 3


def _haproxy_config() -> str:
    """The configuration Ray Serve wrote for this platform's HAProxy (one per node)."""
    folder = Path(os.environ["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"]).parent
    (path,) = folder.glob("*/haproxy.cfg")
    return path.read_text()


def _closed_within(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server sent before it closed the connection, within timeout_s."""
    sock.settimeout(timeout_s)
    got = b""
    try:
        while piece := sock.recv(4096):
            got += piece
    except ConnectionResetError:
        pass
    return got


def test_haproxy_bounds_slow_headers_and_connections_per_address(platform: Platform) -> None:
    text = _haproxy_config()
    assert f"timeout http-request {HEADER_TIMEOUT_S}s" in text
    assert f"sc0_conn_cur gt {PER_SOURCE}" in text
    binds = re.findall(r"^\s*bind (\S+)", text, re.M)
    front = f"{platform.cfg.host}:{platform.cfg.port}"
    stats_metrics = [b for b in binds if b.startswith("127.0.0.1:") and b != front]
    assert len(stats_metrics) == 2 and not [b for b in binds if b.startswith((":", "*:"))]
    addr = (platform.cfg.host, platform.cfg.port)
    # a client that never finishes its headers is answered 408 and let go
    slow = socket.create_connection(addr)
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    got = _closed_within(slow, HEADER_TIMEOUT_S + 10)
    waited = time.monotonic() - t0
    slow.close()
    assert got.startswith(b"HTTP/1.1 408") and waited < HEADER_TIMEOUT_S + 3, (got[:80], waited)
    # one address holds at most PER_SOURCE connections: the next is closed at once
    held = [socket.create_connection(addr) for _ in range(PER_SOURCE)]
    try:
        time.sleep(0.3)
        extra = socket.create_connection(addr)
        try:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        except (ConnectionResetError, BrokenPipeError):
            pass  # refused before the request was even written: also a close at once
        assert _closed_within(extra, 2) == b""
        extra.close()
    finally:
        for s in held:
            s.close()
    time.sleep(0.5)
    assert httpx.get(root(platform) + "/healthz", timeout=10).status_code == 200
    # the statistics and Prometheus listeners answer on loopback, and on no other address
    ports = [int(b.rpartition(":")[2]) for b in stats_metrics]
    for port in ports:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    others = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    for ip in others:
        for port in ports:
            with pytest.raises(OSError):
                socket.create_connection((ip, port), timeout=2).close()
