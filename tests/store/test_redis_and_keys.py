from pathlib import Path

import redis
from zerolayer.store.embedded import EmbeddedRedis, _probe
from zerolayer.store.keys import KeyStore, hash_key

from tests.conftest import free_port


def test_key_is_stored_only_as_hash(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key, record = KeyStore(client).create("pro", name="t")
    assert key.startswith("zl-") and len(key) > 40
    dump = b"".join(k + b"".join(client.hgetall(k).values()) for k in client.scan_iter("zl:key:*"))
    assert key.encode() not in dump
    assert hash_key(key).encode() in dump
    found = KeyStore(client).lookup(key)
    assert found is not None and found.plan == "pro" and found.key_id == record.key_id
    assert KeyStore(client).lookup(key + "x") is None


def test_embedded_redis_keeps_keys_across_restarts_with_aof(tmp_path: Path) -> None:
    port = free_port()
    with EmbeddedRedis(tmp_path, port) as server:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("appendonly")["appendonly"] == "yes"
        key, _ = KeyStore(client).create("free")
        client.close()
    assert any(tmp_path.rglob("*.aof")), "AOF files must be written"
    with EmbeddedRedis(tmp_path, port) as server:
        client = redis.Redis.from_url(server.url)
        assert KeyStore(client).lookup(key) is not None
        client.close()


def test_stop_releases_the_port(tmp_path: Path) -> None:
    port = free_port()
    server = EmbeddedRedis(tmp_path, port)
    server.start()
    server.stop()
    try:
        _probe(port).ping()
        alive = True
    except redis.ConnectionError:
        alive = False
    assert not alive
