"""API keys: only a SHA-256 hash is stored in Redis; the key itself is shown once."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis import Redis

__all__ = ["KEY_PREFIX", "ApiKeyRecord", "hash_key", "new_key", "KeyStore", "AsyncKeyStore"]

KEY_PREFIX = "zl-"
_HASH_NS = "zl:key:"
_INDEX = "zl:keys"


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key: 'zl-' and 43 URL-safe characters (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ApiKeyRecord:
    """What Redis holds for a key."""

    key_id: str
    plan: str
    created: float
    name: str
    revoked: bool

    @classmethod
    def from_hash(cls, data: dict[bytes, bytes]) -> ApiKeyRecord:
        def get(k: str) -> str:
            return data.get(k.encode(), b"").decode()

        return cls(
            key_id=get("key_id"),
            plan=get("plan"),
            created=float(get("created") or 0),
            name=get("name"),
            revoked=get("revoked") == "1",
        )


class KeyStore:
    """Create and look up keys (CLI side, synchronous)."""

    def __init__(self, client: Redis):
        self.client = client

    def create(self, plan: str, name: str = "") -> tuple[str, ApiKeyRecord]:
        """Store a new key's hash; return the key (shown once) and its record."""
        key = new_key()
        digest = hash_key(key)
        record = ApiKeyRecord(digest[:12], plan, time.time(), name, False)
        pipe = self.client.pipeline()
        pipe.hset(
            _HASH_NS + digest,
            mapping={
                "key_id": record.key_id,
                "plan": plan,
                "created": str(record.created),
                "name": name,
                "revoked": "0",
            },
        )
        pipe.sadd(_INDEX, digest)
        pipe.execute()
        return key, record

    def lookup(self, key: str) -> ApiKeyRecord | None:
        """The record of a key, or None if unknown."""
        data = self.client.hgetall(_HASH_NS + hash_key(key))
        return ApiKeyRecord.from_hash(data) if data else None


class AsyncKeyStore:
    """Key look-ups on the request path (gateway)."""

    def __init__(self, client: aioredis.Redis):
        self.client = client

    async def lookup(self, key: str) -> ApiKeyRecord | None:
        """The record of a key, or None if unknown."""
        data = await self.client.hgetall(_HASH_NS + hash_key(key))
        return ApiKeyRecord.from_hash(data) if data else None
