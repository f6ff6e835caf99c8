"""Billing under faults, with real processes: a consumer killed with kill -9 in the middle of its
batches, restarted; every event is counted exactly once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from zerolayer.billing.consumer import backlog
from zerolayer.billing.events import EventWriter
from zerolayer.billing.ledger import Ledger
from zerolayer.store.embedded import EmbeddedRedis

from tests.billing.conftest import event, tenant
from tests.conftest import clean_env

KILLS = 5


def _consumer(url: str, cache: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "zerolayer.billing", "--name", name],
        env=clean_env(REDIS_URL=url, ZEROLAYER_CACHE_DIR=str(cache)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_consumer_killed_mid_batch_and_restarted_counts_every_event_once(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    server.start()
    url = server.secret_url()
    t = tenant()
    written = 0
    stop = threading.Event()

    def write() -> None:
        nonlocal written

        async def main() -> None:
            nonlocal written
            c = aioredis.from_url(url)
            w = EventWriter(c, 3600)
            while not stop.is_set():
                now = time.time()  # the consumers' clock is the real one: no month closes
                written += await w.write(*(event(t, now, completion=1) for _ in range(200)))
            await c.aclose()

        asyncio.run(main())

    async def progress() -> dict[str, int]:
        c = aioredis.from_url(url)
        try:
            return await backlog(c)
        finally:
            await c.aclose()

    try:
        writer = threading.Thread(target=write)
        writer.start()
        pending_at_kill = []
        for n in range(KILLS):  # kill -9 while events keep arriving, restart under a new name
            consumer = _consumer(url, tmp_path, f"billing-{n}")
            time.sleep(1.0)
            consumer.send_signal(signal.SIGKILL)
            consumer.wait()
            pending_at_kill.append(asyncio.run(progress())["pending"])
        stop.set()
        writer.join()
        print(f"{written} events written; pending when each consumer was killed: {pending_at_kill}")
        last = _consumer(url, tmp_path, "billing-last")
        try:
            deadline = time.monotonic() + 120
            while asyncio.run(progress()) != {"unread": 0, "pending": 0}:
                assert time.monotonic() < deadline, asyncio.run(progress())
                time.sleep(0.2)
        finally:
            last.terminate()
            last.wait(10)

        async def counted() -> dict[str, object]:
            c = aioredis.from_url(url)
            try:
                day = datetime.now(timezone.utc).date()
                usage = await Ledger(c).usage(t, day - timedelta(1), day, ["day"])
                month = day.strftime("%Y-%m")
                return {
                    "requests": usage["totals"]["requests"],
                    "completion": usage["totals"]["completion_tokens"],
                    "events": await c.llen(f"zl:bill:{{{t}}}:events:{month}"),
                }
            finally:
                await c.aclose()

        assert written > 0
        assert asyncio.run(counted()) == {
            "requests": written,
            "completion": written,
            "events": written,
        }
    finally:
        stop.set()
        server.stop()
