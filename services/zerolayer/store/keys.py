"""API keys: only a SHA-256 hash is stored in Redis; the key itself is shown once."""

from __future__ import annotations

import builtins
import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import Redis

from zerolayer.errors import ZerolayerError
from zerolayer.store import keyspace

__all__ = [
    "KEY_PREFIX",
    "UnknownKey",
    "UnknownTenant",
    "ApiKeyRecord",
    "hash_key",
    "new_key",
    "KeyStore",
    "AsyncKeyStore",
]

KEY_PREFIX = "zl-"
_HASH_NS = keyspace.api_key_prefix()
_INDEX = keyspace.api_key_index()
_ID_NS = keyspace.api_key_id_prefix()


class UnknownKey(ZerolayerError, LookupError):
    """No key has that id."""


class UnknownTenant(ZerolayerError, LookupError):
    """No key was ever created for that tenant."""


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
    sample_traffic: bool | None = None  # kept for recalibration; None: the plan decides
    tenant: str = ""  # the account whose stored objects the key sees; "" (older keys): its own

    @property
    def owner(self) -> str:
        """The tenant that owns what this key stores (older keys are tenants of their own)."""
        return self.tenant or self.key_id

    def samples(self, plan_default: bool) -> bool:
        """Whether this key's prompts may be kept for recalibration (its own setting, else its
        plan's)."""
        return plan_default if self.sample_traffic is None else self.sample_traffic

    def public(self) -> dict[str, Any]:
        """The record as the admin API and the CLI show it (never the key)."""
        return {
            "key_id": self.key_id,
            "plan": self.plan,
            "name": self.name,
            "created": int(self.created),
            "revoked": self.revoked,
            "sample_traffic": self.sample_traffic,
            "tenant": self.owner,
        }

    @classmethod
    def from_hash(cls, data: Mapping[bytes | str, bytes | str]) -> ApiKeyRecord:
        """A record from its hash as read back (bytes or text names and values)."""
        fields = {keyspace.text(k): keyspace.text(v) for k, v in data.items()}

        def get(k: str) -> str:
            return fields.get(k, "")

        return cls(
            key_id=get("key_id"),
            plan=get("plan"),
            created=float(get("created") or 0),
            name=get("name"),
            revoked=get("revoked") == "1",
            sample_traffic={"1": True, "0": False}.get(get("sample_traffic")),
            tenant=get("tenant"),
        )


class KeyStore:
    """Create, list, label, revoke and re-plan keys (CLI, admin API and a tenant's own key
    routes; synchronous: these are rare).

    Redis layout (zerolayer.store.keyspace): key:<sha256> is a hash with the record, keys the set of
    all hashes, keyid:<key_id> the hash of a key id (the first 12 hex digits of its hash). A tenant
    is an account, the `tenant` field of its keys' records: every key made for it sees what the
    others stored."""

    def __init__(self, client: Redis):
        self.client = client

    def create(
        self, plan: str, name: str = "", tenant: str | None = None
    ) -> tuple[str, ApiKeyRecord]:
        """Store a new key's hash; return the key (shown once) and its record. The key belongs
        to `tenant` (which must exist: UnknownTenant), else to a new tenant of its own."""
        if tenant is not None:
            self.tenant_keys(tenant)  # it exists: it has a key
        key = new_key()
        digest = hash_key(key)
        tenant = tenant or "tenant_" + secrets.token_hex(8)
        record = ApiKeyRecord(digest[:12], plan, time.time(), name, False, tenant=tenant)
        pipe = self.client.pipeline()
        pipe.hset(
            _HASH_NS + digest,
            mapping={
                "key_id": record.key_id,
                "plan": plan,
                "created": str(record.created),
                "name": name,
                "revoked": "0",
                "tenant": tenant,
            },
        )
        pipe.sadd(_INDEX, digest)
        pipe.set(_ID_NS + record.key_id, digest)
        pipe.execute()
        return key, record

    def lookup(self, key: str) -> ApiKeyRecord | None:
        """The record of a key, or None if unknown."""
        data = self.client.hgetall(_HASH_NS + hash_key(key))
        return ApiKeyRecord.from_hash(data) if data else None

    def _digest(self, key_id: str) -> str:
        found = self.client.get(_ID_NS + key_id)
        if found:
            return keyspace.text(found)
        # keys made before the id index existed
        for d in self.client.smembers(_INDEX):
            if keyspace.text(d).startswith(key_id) and len(key_id) == 12:
                return keyspace.text(d)
        raise UnknownKey(f"no API key with id {key_id!r}")

    def get(self, key_id: str) -> ApiKeyRecord:
        """The record of a key id; UnknownKey if there is none."""
        data = self.client.hgetall(_HASH_NS + self._digest(key_id))
        if not data:
            raise UnknownKey(f"no API key with id {key_id!r}")
        return ApiKeyRecord.from_hash(data)

    def list(self) -> list[ApiKeyRecord]:
        """Every key's record (never the key), oldest first."""
        digests = sorted(keyspace.text(d) for d in self.client.smembers(_INDEX))
        pipe = self.client.pipeline()
        for d in digests:
            pipe.hgetall(_HASH_NS + d)
        records = [ApiKeyRecord.from_hash(data) for data in pipe.execute() if data]
        return sorted(records, key=lambda r: (r.created, r.key_id))

    def tenant_keys(self, tenant: str) -> builtins.list[ApiKeyRecord]:
        """The keys of a tenant (UnknownTenant if it has none)."""
        keys = [r for r in self.list() if r.owner == tenant]
        if not keys:
            raise UnknownTenant(f"no tenant with id {tenant!r}")
        return keys

    def revoke(self, key_id: str) -> ApiKeyRecord:
        """Mark a key revoked; every gateway refuses it from its next request (look-ups are not
        cached)."""
        self.client.hset(_HASH_NS + self._digest(key_id), "revoked", "1")
        return self.get(key_id)

    def set_sampling(self, key_id: str, sample: bool | None) -> ApiKeyRecord:
        """Opt a key in (True) or out (False) of traffic sampling, or back to its plan's
        setting (None). Opting out does not delete what was kept: the caller does that
        (TrafficStore.purge), so that both happen in the order it chooses."""
        digest = self._digest(key_id)
        if sample is None:
            self.client.hdel(_HASH_NS + digest, "sample_traffic")
        else:
            self.client.hset(_HASH_NS + digest, "sample_traffic", "1" if sample else "0")
        return self.get(key_id)

    def set_name(self, key_id: str, name: str) -> ApiKeyRecord:
        """Give a key another label."""
        self.client.hset(_HASH_NS + self._digest(key_id), "name", name)
        return self.get(key_id)

    def set_plan(self, key_id: str, plan: str) -> ApiKeyRecord:
        """Move a key to another plan (its next request is served under it)."""
        self.client.hset(_HASH_NS + self._digest(key_id), "plan", plan)
        return self.get(key_id)


class AsyncKeyStore:
    """Key look-ups on the request path (gateway)."""

    def __init__(self, client: aioredis.Redis):
        self.client = client

    async def lookup(self, key: str) -> ApiKeyRecord | None:
        """The record of a key, or None if unknown."""
        data = await self.client.hgetall(_HASH_NS + hash_key(key))
        return ApiKeyRecord.from_hash(data) if data else None

    async def by_id(self, key_id: str) -> ApiKeyRecord | None:
        """The record of a key id (a batch runs as the key that made it), or None."""
        digest = await self.client.get(_ID_NS + key_id)
        if not digest:
            return None
        data = await self.client.hgetall(_HASH_NS + keyspace.text(digest))
        return ApiKeyRecord.from_hash(data) if data else None
