"""How fast metering is: usage events ingested per second end to end (written, counted into the
ledger and acknowledged), and the delay from a request's end to its appearance in /v1/usage.

Ingest (local Redis only, no platform): --events usage events of one tenant, each written by its
own call of the gateway's write script (pipelined, --writers concurrent writers: the gateways),
while one billing consumer process (`python -m zerolayer.billing`, what the billing deployment
runs) counts them. events_per_s = events / (first write to last acknowledgement). The same
writes with no consumer running give the write-only rate of the same round (the baseline: the
ratio says what counting costs on top of writing). Rounds: appendfsync always and everysec, in
a shuffled order, --repeats times; the median and spread of each.

Delay (the platform, started with the scripted fake engine: no model time): while --load
clients keep sending chat requests, a probe client with a key of its own sends one request at a
time and polls GET /v1/usage every 10 ms until it shows it; delay = from the probe's response
to the poll that shows it. --probes per round, --repeats rounds; p50 and p99 per round, then
the median p99 and its spread.

Every ingest round starts a fresh Redis server (the same empty state each time).

Writes benchmarks/results/metering.json {"events_per_s": .., "p99_delay_s": .., ...}:
events_per_s with the local platform's appendfsync (platform/serve/local.yaml, everysec), and
events_per_s_always with `appendfsync always` (what a production Redis should run).

  .venv/bin/python benchmarks/metering.py [--repeats 5] [--events 100000] [--probes 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from gateway import fake_config

RESULTS = Path(__file__).resolve().parent / "results" / "metering.json"
ROOT = Path(__file__).resolve().parents[1]


def _events(tenant: str, n: int) -> list[tuple[str, str, str]]:
    """n encoded usage events of one tenant (made before the clock starts)."""
    from zerolayer.billing.events import UsageEvent, day_of
    from zerolayer.config import TierPrice

    price = TierPrice(prompt_per_1k="0.10", completion_per_1k="0.30")
    now = time.time()
    out = []
    for _ in range(n):
        ev = UsageEvent(
            "chatcmpl-" + uuid.uuid4().hex,
            tenant,
            "key1",
            "pro",
            "smollm2-135m",
            "baseline",
            "chat.completions",
            "ok",
            now,
            now + 0.2,
            day_of(now),
            price,
            120,
            0,
            40,
        )
        out.append((ev.id, ev.json(), ev.line()))
    return out


async def _write(url: str, events: list[tuple[str, str, str]], writers: int, pipe: int) -> float:
    """Write the events (one script call each, `pipe` per round trip, `writers` at once);
    seconds taken."""
    import redis.asyncio as aioredis
    from zerolayer.billing.events import SEEN_PREFIX, STREAM, EventWriter

    client = aioredis.from_url(url, max_connections=writers + 2)
    writer = EventWriter(client, 86400)
    script = writer._write
    share = [events[i::writers] for i in range(writers)]

    async def one(mine: list[tuple[str, str, str]]) -> None:
        for at in range(0, len(mine), pipe):
            async with client.pipeline(transaction=False) as p:
                for eid, text, line in mine[at : at + pipe]:
                    await script(args=[STREAM, SEEN_PREFIX, 86400, eid, text, line], client=p)
                await p.execute()

    t0 = time.perf_counter()
    await asyncio.gather(*(one(m) for m in share))
    took = time.perf_counter() - t0
    await client.aclose()
    return took


def _resp(*parts: str | bytes | int) -> bytes:
    """One command in the Redis protocol."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


async def _write_raw(
    url: str, events: list[tuple[str, str, str]], writers: int, pipe: int
) -> float:
    """The same script calls as _write, encoded before the clock starts and sent over plain
    sockets (`writers` connections, `pipe` calls per round trip): what Redis and the consumer
    take in when the writers' own cost is spread over many gateway processes; seconds taken."""
    import redis
    from zerolayer.billing.events import _WRITE, SEEN_PREFIX, STREAM

    sync = redis.Redis.from_url(url)
    sha = sync.script_load(_WRITE)
    kw = sync.connection_pool.connection_kwargs
    sync.close()
    share = [events[i::writers] for i in range(writers)]
    blobs = [
        [
            b"".join(
                _resp("EVALSHA", sha, 0, STREAM, SEEN_PREFIX, 86400, *ev)
                for ev in mine[at : at + pipe]
            )
            for at in range(0, len(mine), pipe)
        ]
        for mine in share
    ]

    async def one(chunks: list[bytes], sizes: list[int]) -> None:
        reader, writer = await asyncio.open_unix_connection(kw["path"])
        writer.write(_resp("AUTH", kw["username"], kw["password"]))
        assert (await reader.readline()).startswith(b"+OK")
        for blob, n in zip(chunks, sizes, strict=True):
            writer.write(blob)
            for _ in range(n):
                line = await reader.readline()
                assert line[:1] == b":", line
        writer.close()

    sizes = [[len(m[at : at + pipe]) for at in range(0, len(m), pipe)] for m in share]
    t0 = time.perf_counter()
    await asyncio.gather(*(one(b, n) for b, n in zip(blobs, sizes, strict=True)))
    return time.perf_counter() - t0


async def _counted(url: str, tenant: str) -> int:
    import redis.asyncio as aioredis

    c = aioredis.from_url(url)
    try:
        month = time.strftime("%Y-%m", time.gmtime())
        return int(await c.llen(f"zl:bill:{{{tenant}}}:events:{month}"))
    finally:
        await c.aclose()


def _consumer(url: str, cache: str, batch: int | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "REDIS_URL": url, "ZEROLAYER_CACHE_DIR": cache}
    more = [] if batch is None else ["--batch", str(batch)]
    return subprocess.Popen(
        [sys.executable, "-m", "zerolayer.billing", "--name", "bench-" + uuid.uuid4().hex[:6]]
        + more,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _ready(url: str) -> None:
    """Wait until the consumer's group exists and it has nothing left."""
    import redis.asyncio as aioredis
    from zerolayer.billing.consumer import backlog
    from zerolayer.billing.events import STREAM

    c = aioredis.from_url(url)
    try:
        while True:
            groups = await c.xinfo_groups(STREAM) if await c.exists(STREAM) else []
            if groups and await backlog(c) == {"unread": 0, "pending": 0}:
                return
            await asyncio.sleep(0.05)
    finally:
        await c.aclose()


def run_ingest(
    url: str, cache: str, n: int, writers: int, pipe: int, batch: int | None
) -> dict[str, float]:
    # write-only: no consumer reads while these are written (counted afterwards, untimed); the
    # first through redis-py (what one gateway process manages), then pre-encoded
    client_s = asyncio.run(
        _write(url, _events("tenant_bench_c_" + uuid.uuid4().hex[:8], n), writers, pipe)
    )
    alone = _events("tenant_bench_w_" + uuid.uuid4().hex[:8], n)
    write_s = asyncio.run(_write_raw(url, alone, writers, pipe))
    proc = _consumer(url, cache, batch)
    try:
        asyncio.run(_ready(url))  # it counted the write-only round: the stream is empty again
        tenant = "tenant_bench_" + uuid.uuid4().hex[:8]
        events = _events(tenant, n)

        async def both() -> float:
            t0 = time.perf_counter()
            await _write_raw(url, events, writers, pipe)
            while await _counted(url, tenant) < n:
                await asyncio.sleep(0.01)
            return time.perf_counter() - t0

        e2e_s = asyncio.run(both())
    finally:
        proc.terminate()
        proc.wait(10)
    return {
        "redis_py_write_only_per_s": round(n / client_s),
        "write_only_per_s": round(n / write_s),
        "events_per_s": round(n / e2e_s),
        "ratio": round((n / e2e_s) / (n / write_s), 3),
    }


def run_delay(repeats: int, probes: int, load: int) -> dict[str, Any]:
    import httpx
    from zerolayer.config import load_config
    from zerolayer.serve.launcher import Platform, admin_key

    cfg = fake_config(load_config(), True)
    platform = Platform(cfg).start()
    root = f"http://{cfg.host}:{cfg.port}"
    admin = {"Authorization": f"Bearer {admin_key(cfg)}"}
    body = {"model": "smollm2-135m:baseline", "messages": [{"role": "user", "content": "Hi"}]}
    rounds: list[dict[str, Any]] = []

    async def main() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            made = await http.post(root + "/admin/keys", json={"plan": "bench"}, headers=admin)
            probe = {"Authorization": f"Bearer {made.json()['key']}"}
            loader = {"Authorization": f"Bearer {platform.key}"}
            stop = asyncio.Event()

            async def background() -> None:
                while not stop.is_set():
                    await http.post(root + "/v1/chat/completions", json=body, headers=loader)

            tasks = [asyncio.ensure_future(background()) for _ in range(load)]
            seen = 0
            try:
                for rnd in range(repeats + 1):
                    delays = []
                    for _ in range(probes):
                        r = await http.post(root + "/v1/chat/completions", json=body, headers=probe)
                        r.raise_for_status()
                        ended = time.perf_counter()
                        seen += 1
                        while True:
                            u = await http.get(root + "/v1/usage", headers=probe)
                            if u.json()["totals"]["requests"] >= seen:
                                break
                            await asyncio.sleep(0.01)
                        delays.append(time.perf_counter() - ended)
                    delays.sort()
                    row = {
                        "p50_s": round(delays[len(delays) // 2], 4),
                        "p99_s": round(delays[min(len(delays) - 1, int(0.99 * len(delays)))], 4),
                        "max_s": round(delays[-1], 4),
                    }
                    label = "warm-up" if rnd == 0 else f"round {rnd}"
                    print(f"delay {label:8s} p50 {row['p50_s']:.4f} s  p99 {row['p99_s']:.4f} s")
                    if rnd:
                        rounds.append(row)
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        platform.stop()
    p99 = [r["p99_s"] for r in rounds]
    return {
        "p99_delay_s": statistics.median(p99),
        "p99_spread_s": [min(p99), max(p99)],
        "p50_delay_s": statistics.median(r["p50_s"] for r in rounds),
        "rounds": rounds,
        "probes_per_round": probes,
        "load_clients": load,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--events", type=int, default=100_000, help="events per ingest round")
    ap.add_argument("--writers", type=int, default=8, help="concurrent writers")
    ap.add_argument("--pipe", type=int, default=100, help="script calls per round trip")
    ap.add_argument("--probes", type=int, default=100, help="probe requests per delay round")
    ap.add_argument("--load", type=int, default=8, help="clients loading the platform")
    ap.add_argument("--batch", type=int, default=None, help="consumer batch (default: config)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-delay", action="store_true", help="ingest only")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    from zerolayer.store.embedded import EmbeddedRedis

    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="zl-metering-")
    modes = ("always", "everysec")
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for rnd in range(args.repeats + 1):
        order = list(modes)
        rng.shuffle(order)
        for mode in order:
            # a fresh server each round: every round starts from the same (empty) state
            server = EmbeddedRedis(Path(tmp) / f"{mode}-{rnd}", appendfsync=mode)
            server.start()
            try:
                row = run_ingest(
                    server.secret_url(), tmp, args.events, args.writers, args.pipe, args.batch
                )
                label = "warm-up" if rnd == 0 else f"round {rnd}"
                print(
                    f"ingest {mode:8s} {label:8s} end to end {row['events_per_s']:7d}/s  "
                    f"write only {row['write_only_per_s']:7d}/s  ratio {row['ratio']:.3f}  "
                    f"(redis-py writer alone {row['redis_py_write_only_per_s']:7d}/s)",
                    flush=True,
                )
            finally:
                server.stop()
                shutil.rmtree(Path(tmp) / f"{mode}-{rnd}", ignore_errors=True)
            if rnd:
                rows[mode].append(row)
    ingest = {}
    for mode, rs in rows.items():
        rates = [r["events_per_s"] for r in rs]
        ratios = [r["ratio"] for r in rs]
        ingest[mode] = {
            "events_per_s": statistics.median(rates),
            "events_per_s_spread": [min(rates), max(rates)],
            "write_only_per_s": statistics.median(r["write_only_per_s"] for r in rs),
            "redis_py_write_only_per_s": statistics.median(
                r["redis_py_write_only_per_s"] for r in rs
            ),
            "ratio_to_write_only": statistics.median(ratios),
            "ratio_spread": [min(ratios), max(ratios)],
            "rounds": rs,
        }
    delay = None if args.skip_delay else run_delay(args.repeats, args.probes, args.load)
    # the headline: the local Redis as `./zl up` runs it (platform/serve/local.yaml)
    from zerolayer.config import load_config

    local = load_config().redis.appendfsync
    out = {
        "events_per_s": ingest[local]["events_per_s"],
        "appendfsync": local,
        "events_per_s_always": ingest["always"]["events_per_s"],
        "p99_delay_s": None if delay is None else delay["p99_delay_s"],
        "ingest": ingest,
        "delay": delay,
        "events_per_round": args.events,
        "writers": args.writers,
        "pipe": args.pipe,
        "consumer_batch": args.batch,
        "cpus": os.cpu_count(),
        "command": "benchmarks/metering.py " + " ".join(sys.argv[1:]),
    }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("events_per_s", "p99_delay_s")}))


if __name__ == "__main__":
    main()
