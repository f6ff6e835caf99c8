"""Prompts kept for recalibration: a sample of the requests of keys that opted in.

Redis layout (names from zerolayer.store.keyspace): traffic:<key_id> is a stream per key (entry
fields model, tier, kind, text; the entry id is the server's time in ms), capped at max_per_key
entries, trimmed to the retention window on every write and expiring with it; traffic:keys is the
set of key ids that have one. A read never returns an entry older than the retention window,
trimmed or not.

Whether a prompt may be kept is decided inside Redis, in the same script that writes it: the
key's own setting (its record's sample_traffic field), else its plan's, and never for a revoked
key. An opt-out or a revocation writes the key's record first and deletes its stream second,
so a write racing with it either lands before the delete or sees the opt-out and keeps
nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import Redis

from zerolayer.store import keyspace

__all__ = ["TrafficEntry", "TrafficStore", "AsyncTrafficStore", "prompt_text"]

_NS = keyspace.traffic_prefix()
_INDEX = keyspace.traffic_index()

# KEYS: key-id index entry, the key's stream, the index of streams.
# ARGV: plan default ("1"/"0"), max entries, retention ms, model, tier, kind, text, key id,
# the key records' namespace
_KEEP = """
local digest = redis.call('GET', KEYS[1])
if not digest then return false end
local f = redis.call('HMGET', ARGV[9] .. digest, 'revoked', 'sample_traffic')
if f[1] == '1' then return false end
local on = f[2]
if not on then on = ARGV[1] end
if on ~= '1' then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], '*',
  'model', ARGV[4], 'tier', ARGV[5], 'kind', ARGV[6], 'text', ARGV[7])
redis.call('XTRIM', KEYS[2], 'MINID', tostring(now - tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[3], ARGV[8])
return id
"""


def prompt_text(
    messages: list[dict[str, str]] | None, prompt: str | list[int] | None, limit: int
) -> str:
    """What is kept of a prompt: a chat's messages as JSON, or a completion's text, each
    message's content cut so that the whole holds at most `limit` characters of content."""
    if messages is None:
        return prompt[:limit] if isinstance(prompt, str) else ""
    kept, left = [], limit
    for m in messages:
        content = m.get("content") or ""
        kept.append({"role": m.get("role", "user"), "content": content[: max(left, 0)]})
        left -= len(content)
    return json.dumps(kept, ensure_ascii=False)


@dataclass(frozen=True)
class TrafficEntry:
    """One kept prompt."""

    entry_id: str  # the stream id: the server's time in ms, then a sequence number
    key_id: str
    model: str
    tier: str
    kind: str  # "chat" (text is the messages as JSON) or "text"
    text: str

    @property
    def time(self) -> float:
        """When it was kept (Unix seconds)."""
        return int(self.entry_id.split("-")[0]) / 1000

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages (a completion prompt is one user message)."""
        if self.kind == "chat":
            return list(json.loads(self.text))
        return [{"role": "user", "content": self.text}]

    def public(self) -> dict[str, Any]:
        return {
            "id": self.entry_id,
            "key_id": self.key_id,
            "model": self.model,
            "tier": self.tier,
            "kind": self.kind,
            "created": int(self.time),
            "text": self.text,
        }


def _entries(key_id: str, rows: list[Any] | None) -> list[TrafficEntry]:
    out = []
    for entry_id, fields in rows or []:
        f = {keyspace.text(k): keyspace.text(v) for k, v in fields.items()}
        out.append(
            TrafficEntry(
                keyspace.text(entry_id), key_id, f["model"], f["tier"], f["kind"], f["text"]
            )
        )
    return out


class TrafficStore:
    """Read and delete kept prompts (the compiler, the CLI and the admin API)."""

    def __init__(self, client: Redis, retention_s: int):
        self.client = client
        self.retention_ms = retention_s * 1000

    def _oldest(self) -> int:
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000 - self.retention_ms

    def key_ids(self) -> list[str]:
        """Keys with kept prompts."""
        return sorted(keyspace.text(k) for k in self.client.smembers(_INDEX))

    def entries(self, key_id: str | None = None, model: str | None = None) -> list[TrafficEntry]:
        """The kept prompts within the retention window, of one key or of all, oldest first
        per key."""
        oldest = self._oldest()
        out: list[TrafficEntry] = []
        for kid in [key_id] if key_id else self.key_ids():
            out += _entries(kid, self.client.xrange(_NS + kid, min=str(oldest), max="+"))
        return [e for e in out if model is None or e.model == model]

    def count(self, key_id: str) -> int:
        """How many prompts of a key are kept (within the retention window)."""
        return len(self.client.xrange(_NS + key_id, min=str(self._oldest()), max="+") or [])

    def purge(self, key_id: str) -> int:
        """Delete every kept prompt of a key; how many there were."""
        n = self.count(key_id)
        pipe = self.client.pipeline()
        pipe.delete(_NS + key_id)
        pipe.srem(_INDEX, key_id)
        pipe.execute()
        return n


class AsyncTrafficStore:
    """Keep prompts on the request path (gateway)."""

    def __init__(self, client: aioredis.Redis, retention_s: int, max_per_key: int):
        self.client = client
        self.retention_ms = retention_s * 1000
        self.max_per_key = max_per_key
        self._keep = client.register_script(_KEEP)

    async def keep(
        self,
        key_id: str,
        plan_default: bool,
        model: str,
        tier: str,
        kind: str,
        text: str,
    ) -> str | None:
        """Keep a prompt if the key (else its plan) opted in; the entry id, or None."""
        got = await self._keep(
            keys=[keyspace.api_key_by_id(key_id), _NS + key_id, _INDEX],
            args=[
                "1" if plan_default else "0",
                self.max_per_key,
                self.retention_ms,
                model,
                tier,
                kind,
                text,
                key_id,
                keyspace.api_key_prefix(),
            ],
        )
        return got.decode() if got else None
