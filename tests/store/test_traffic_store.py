"""The traffic sample's store on a real redis-server: the opt-in decided inside the write (a
stale gateway view cannot keep a prompt of a key that opted out), the cap per key, the
retention window on reads and trims, deletion."""

from __future__ import annotations

import asyncio
import json

import redis
import redis.asyncio as aioredis
from zerolayer.store.keys import KeyStore
from zerolayer.store.traffic import AsyncTrafficStore, TrafficStore, prompt_text


def _keep(url: str, key_id: str, plan_default: bool, text: str, **kw: int) -> str | None:
    async def go() -> str | None:
        client = aioredis.from_url(url)
        try:
            store = AsyncTrafficStore(
                client, kw.get("retention_s", 3600), kw.get("max_per_key", 100)
            )
            return await store.keep(key_id, plan_default, "m", "baseline", "text", text)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_the_write_decides_from_the_keys_record(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    keys, traffic = KeyStore(sync), TrafficStore(sync, 3600)
    _, rec = keys.create("free")
    assert _keep(redis_url, rec.key_id, False, "a") is None  # plan off, key silent
    assert _keep(redis_url, rec.key_id, True, "b") is not None  # plan on
    keys.set_sampling(rec.key_id, False)
    assert _keep(redis_url, rec.key_id, True, "c") is None  # the key's own "off" wins
    keys.set_sampling(rec.key_id, True)
    assert _keep(redis_url, rec.key_id, False, "d") is not None  # and its "on"
    keys.revoke(rec.key_id)
    assert _keep(redis_url, rec.key_id, True, "e") is None  # never for a revoked key
    assert _keep(redis_url, "000000000000", True, "f") is None  # nor an unknown one
    assert [e.text for e in traffic.entries(rec.key_id)] == ["b", "d"]
    assert rec.key_id in traffic.key_ids()
    assert traffic.purge(rec.key_id) == 2
    assert traffic.entries(rec.key_id) == [] and rec.key_id not in traffic.key_ids()


def test_cap_per_key_and_retention_window(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    keys = KeyStore(sync)
    _, rec = keys.create("pro")
    keys.set_sampling(rec.key_id, True)
    for i in range(5):
        _keep(redis_url, rec.key_id, False, f"p{i}", max_per_key=3)
    assert [e.text for e in TrafficStore(sync, 3600).entries(rec.key_id)] == ["p2", "p3", "p4"]
    # a key whose stream holds an entry of two hours ago: outside a one-hour window it is
    # never read, the next write trims it, and the stream expires with the window
    _, rec2 = keys.create("pro")
    keys.set_sampling(rec2.key_id, True)
    stream = f"zl:traffic:{rec2.key_id}"
    sec, _ = sync.time()
    sync.xadd(
        stream,
        {"model": "m", "tier": "t", "kind": "text", "text": "old"},
        id=f"{(int(sec) - 7200) * 1000}-0",
    )
    hour = TrafficStore(sync, 3600)
    assert hour.entries(rec2.key_id) == [] and hour.count(rec2.key_id) == 0
    assert len(TrafficStore(sync, 3 * 3600).entries(rec2.key_id)) == 1  # a longer window has it
    _keep(redis_url, rec2.key_id, False, "new", retention_s=3600)
    assert [f[b"text"] for _, f in sync.xrange(stream)] == [b"new"]
    assert 0 < sync.pttl(stream) <= 3600 * 1000


def test_prompt_text_cuts_contents() -> None:
    msgs = [{"role": "system", "content": "x" * 8}, {"role": "user", "content": "y" * 8}]
    assert json.loads(prompt_text(msgs, None, 10)) == [
        {"role": "system", "content": "x" * 8},
        {"role": "user", "content": "yy"},
    ]
    assert prompt_text(None, "abcdef", 3) == "abc"
    assert prompt_text(None, [1, 2, 3], 3) == ""
