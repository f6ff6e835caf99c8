"""Clients of the platform's Redis, from its RedisConfig: the URL plus, when set, the ACL user and
the password read from its file (so the secret never travels in a URL, a config or a log line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from zerolayer.config import RedisConfig
from zerolayer.errors import ConfigError

__all__ = ["credentials", "sync_client", "async_client"]


def credentials(rc: RedisConfig) -> dict[str, Any]:
    """username/password keyword arguments for a client of this Redis."""
    out: dict[str, Any] = {}
    if rc.username:
        out["username"] = rc.username
    if rc.password_file:
        try:
            out["password"] = Path(rc.password_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the Redis password file: {exc}") from exc
    return out


def _url(rc: RedisConfig) -> str:
    if not rc.url:
        raise ConfigError("no Redis URL: the embedded server is not started")
    return rc.url


def sync_client(rc: RedisConfig, **kwargs: Any) -> redis.Redis:
    return redis.Redis.from_url(_url(rc), **credentials(rc), **kwargs)


def async_client(rc: RedisConfig, **kwargs: Any) -> aioredis.Redis:
    return aioredis.from_url(_url(rc), **credentials(rc), **kwargs)
