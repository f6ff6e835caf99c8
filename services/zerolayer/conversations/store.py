"""Stored responses and conversations in Redis, owned by tenants.

Layout (names from zerolayer.store.keyspace; a conversation's keys share one hash slot, so a
Redis Cluster keeps them together):
  resp:{<id>}                 hash: tenant, obj (the response object, JSON), input (its input
                              items), context (the items the next turn continues from: the
                              history it was given, its input and its output), expires after
                              `response_ttl_s`
  conv:{<id>}                 hash: tenant, created_at, metadata (JSON), seq (items added so far)
  conv:{<id>}:order           sorted set: item id -> its sequence number (the items' order)
  conv:{<id>}:items           hash: item id -> item (JSON)
  conv:{<id>}:lock            the response being generated on it (a lease: SET NX PX)
  tenant:{<tenant>}:objects   sorted set: "response:<id>" / "conversation:<id>" -> created_at
                              (what the admin API lists and deletes for a tenant)

An object of another tenant is reported exactly as a missing one (NotFound): no existence
oracle. Items are added by one script that checks the owner and, for a response, that it still
holds the conversation's lock, so two responses never interleave their items."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any, Literal, cast

import redis.asyncio as aioredis

from zerolayer.conversations.items import Page
from zerolayer.errors import ZerolayerError
from zerolayer.store import keyspace

__all__ = ["NotFound", "Busy", "StoredResponse", "ConversationStore"]


class NotFound(ZerolayerError, LookupError):
    """No such object for this tenant (missing, expired, deleted, or another tenant's)."""


class Busy(ZerolayerError):
    """Another response is being generated on the conversation."""


_dumps = functools.partial(json.dumps, separators=(",", ":"))


_resp = keyspace.response
_conv = keyspace.conversation
_objects = keyspace.tenant_objects


# KEYS: conv hash, order zset, items hash, lock. ARGV: tenant, lock token ('' = none),
# ttl ms (0 = none), then item id / item JSON pairs. -1: not found, -2: lock not held.
_ADD = """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return -1 end
if ARGV[2] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[2] then return -2 end
local n = 0
for i = 4, #ARGV, 2 do
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('ZADD', KEYS[2], seq, ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  n = n + 1
end
if ARGV[2] ~= '' then redis.call('DEL', KEYS[4]) end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return n
"""

# KEYS: response hash, tenant index, tenant purge fence. ARGV: tenant, obj, input, context, ttl
# ms (0 = none), id, created_at, admitted at (Redis ms; 0 = no fence). One call (one reply to
# parse) on every response's path; 0 when the tenant was purged after the response's admission.
_SAVE = """
local fence = redis.call('GET', KEYS[3])
if fence and tonumber(ARGV[8]) > 0 and tonumber(fence) >= tonumber(ARGV[8]) then return 0 end
redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'obj', ARGV[2], 'input', ARGV[3],
           'context', ARGV[4])
if tonumber(ARGV[5]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
redis.call('ZADD', KEYS[2], ARGV[7], 'response:' .. ARGV[6])
return 1
"""

# KEYS: conv hash, order zset, items hash, lock. ARGV: tenant, force (1/0). Deletes the
# conversation unless a response holds it (-2) and force is 0; -1: not the tenant's.
_DELETE = """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return -1 end
if ARGV[2] ~= '1' and redis.call('EXISTS', KEYS[4]) == 1 then return -2 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
"""

# KEYS: purge fence. ARGV: ttl s. Redis's own time, the clock admissions are stamped with.
_FENCE = """
local t = redis.call('TIME')
redis.call('SET', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), 'EX',
           tonumber(ARGV[1]))
return 1
"""
PURGE_FENCE_S = 86400  # longer than any request in flight lasts

# KEYS: lock. ARGV: token. Deletes the lock only if this token holds it.
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: lock. ARGV: token, lease ms. Extends the lease only if this token holds it.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


@dataclass
class StoredResponse:
    """A stored response: its object and its input items."""

    obj: dict[str, Any]
    input: list[dict[str, Any]]


class ConversationStore:
    """Responses, conversations and their items, per tenant (the gateway's, async)."""

    def __init__(
        self,
        client: aioredis.Redis,
        response_ttl_s: float | None = 30 * 86400,
        conversation_ttl_s: float | None = None,
    ):
        self.client = client
        self.response_ttl_ms = int(response_ttl_s * 1000) if response_ttl_s else 0
        self.conversation_ttl_ms = int(conversation_ttl_s * 1000) if conversation_ttl_s else 0
        self._add = client.register_script(_ADD)
        self._unlock = client.register_script(_UNLOCK)
        self._renew = client.register_script(_RENEW)
        self._save = client.register_script(_SAVE)
        self._delete = client.register_script(_DELETE)
        self._fence = client.register_script(_FENCE)

    # -- responses ---------------------------------------------------------------------------

    async def save_response(
        self,
        tenant: str,
        obj: dict[str, Any],
        input_items: list[dict[str, Any]],
        context: list[dict[str, Any]],
        admitted_ms: int = 0,
    ) -> bool:
        """Store (or overwrite) a response, in one script (atomic). False, storing nothing,
        when the tenant's objects were purged after `admitted_ms` (Redis time of the request's
        admission; 0: no check): a purge wins over the requests it overlapped."""
        saved = await self._save(
            keys=[_resp(obj["id"]), _objects(tenant), keyspace.tenant_purged(tenant)],
            args=[
                tenant,
                _dumps(obj),
                _dumps(input_items),
                _dumps(context),
                self.response_ttl_ms,
                obj["id"],
                obj["created_at"],
                admitted_ms,
            ],
        )
        return bool(saved)

    async def _owned(self, key: str, tenant: str, what: str, *fields: str) -> list[Any]:
        """These fields of an object the tenant owns (bytes, None where unset); NotFound
        (missing, or another tenant's: the same answer) otherwise."""
        got = await self.client.hmget(key, ["tenant", *fields])
        if got[0] is None or keyspace.text(got[0]) != tenant:
            raise NotFound(f"no {what}")
        return list(got[1:])

    async def response(self, tenant: str, rid: str) -> StoredResponse:
        """A tenant's stored response; NotFound otherwise."""
        obj, items = await self._owned(
            _resp(rid), tenant, f"response with id {rid!r}", "obj", "input"
        )
        return StoredResponse(json.loads(obj), json.loads(items))

    async def context(self, tenant: str, rid: str) -> list[dict[str, Any]]:
        """The items a follow-up of a tenant's stored response continues from; NotFound
        otherwise."""
        (raw,) = await self._owned(_resp(rid), tenant, f"response with id {rid!r}", "context")
        return json.loads(raw)

    async def delete_response(self, tenant: str, rid: str) -> None:
        """Delete a tenant's stored response; NotFound if it has none of that id."""
        await self._owned(_resp(rid), tenant, f"response with id {rid!r}")
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(_resp(rid))
        pipe.zrem(_objects(tenant), f"response:{rid}")
        await pipe.execute()

    # -- conversations -----------------------------------------------------------------------

    async def create_conversation(
        self, tenant: str, cid: str, metadata: dict[str, str], items: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """A new conversation with its first items."""
        created = int(time.time())
        key = _conv(cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "tenant": tenant,
                "created_at": created,
                "metadata": json.dumps(metadata),
                "seq": 0,
            },
        )
        if self.conversation_ttl_ms:
            pipe.pexpire(key, self.conversation_ttl_ms)
        pipe.zadd(_objects(tenant), {f"conversation:{cid}": created})
        await pipe.execute()
        if items:
            await self.add_items(tenant, cid, items)
        return _conversation(cid, created, metadata)

    async def conversation(self, tenant: str, cid: str) -> dict[str, Any]:
        """A tenant's conversation object; NotFound otherwise."""
        created, metadata = await self._owned(
            _conv(cid), tenant, f"conversation with id {cid!r}", "created_at", "metadata"
        )
        return _conversation(cid, int(created), json.loads(metadata))

    async def update_conversation(
        self, tenant: str, cid: str, metadata: dict[str, str]
    ) -> dict[str, Any]:
        """Replace a conversation's metadata."""
        conv = await self.conversation(tenant, cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(_conv(cid), "metadata", json.dumps(metadata))
        if self.conversation_ttl_ms:  # a change: it lives its whole time again from now
            for key in (
                _conv(cid),
                keyspace.conversation_order(cid),
                keyspace.conversation_items(cid),
            ):
                pipe.pexpire(key, self.conversation_ttl_ms)
        await pipe.execute()
        return {**conv, "metadata": metadata}

    async def delete_conversation(self, tenant: str, cid: str, force: bool = False) -> None:
        """Delete a conversation and every item of it; Busy while a response is generated on
        it (its items would be added to nothing), unless `force` (a tenant's purge)."""
        got = await self._delete(
            keys=[
                _conv(cid),
                keyspace.conversation_order(cid),
                keyspace.conversation_items(cid),
                keyspace.conversation_lock(cid),
            ],
            args=[tenant, 1 if force else 0],
        )
        if got == -1:
            raise NotFound(f"no conversation {cid}")
        if got == -2:
            raise Busy(f"a response is being generated on conversation {cid}")
        await self.client.zrem(_objects(tenant), f"conversation:{cid}")

    async def add_items(
        self, tenant: str, cid: str, items: list[dict[str, Any]], lock: str | None = None
    ) -> None:
        """Append items in order, atomically; with `lock`, only while that response still holds
        the conversation (and the lock is released with the same write). NotFound, Busy."""
        key = _conv(cid)
        args: list[Any] = [tenant, lock or "", self.conversation_ttl_ms]
        for it in items:
            args += [it["id"], _dumps(it)]
        n = await self._add(
            keys=[
                key,
                keyspace.conversation_order(cid),
                keyspace.conversation_items(cid),
                keyspace.conversation_lock(cid),
            ],
            args=args,
        )
        if n == -1:
            raise NotFound(f"no conversation with id {cid!r}")
        if n == -2:
            raise Busy(f"the conversation {cid} is no longer held by this response")

    async def items(self, tenant: str, cid: str) -> list[dict[str, Any]]:
        """Every item of a conversation, oldest first (a response's history)."""
        await self.conversation(tenant, cid)
        ids = await self.client.zrange(keyspace.conversation_order(cid), 0, -1)
        return await self._items(cid, ids)

    async def _items(self, cid: str, ids: list[Any]) -> list[dict[str, Any]]:
        if not ids:
            return []
        raw = await self.client.hmget(keyspace.conversation_items(cid), ids)
        return [json.loads(r) for r in raw if r is not None]

    async def item_page(
        self,
        tenant: str,
        cid: str,
        limit: int,
        order: Literal["asc", "desc"],
        after: str | None,
    ) -> Page:
        """One page of a conversation's items, by cursor (the id of the item before it)."""
        await self.conversation(tenant, cid)
        lo, hi = "-inf", "+inf"
        if after is not None:
            score = await self.client.zscore(keyspace.conversation_order(cid), after)
            if score is None:
                raise NotFound(f"no item with id {after!r} in conversation {cid!r}")
            lo, hi = (f"({int(score)}", "+inf") if order == "asc" else ("-inf", f"({int(score)}")
        if order == "asc":
            ids = await self.client.zrangebyscore(
                keyspace.conversation_order(cid), lo, hi, start=0, num=limit + 1
            )
        else:
            ids = await self.client.zrevrangebyscore(
                keyspace.conversation_order(cid), hi, lo, start=0, num=limit + 1
            )
        return Page(await self._items(cid, ids[:limit]), len(ids) > limit)

    async def item(self, tenant: str, cid: str, item_id: str) -> dict[str, Any]:
        """One item of a conversation; NotFound otherwise."""
        await self.conversation(tenant, cid)
        raw = await self.client.hget(keyspace.conversation_items(cid), item_id)
        if raw is None:
            raise NotFound(f"no item with id {item_id!r} in conversation {cid!r}")
        return json.loads(raw)

    async def delete_item(self, tenant: str, cid: str, item_id: str) -> None:
        """Delete one item of a conversation."""
        await self.item(tenant, cid, item_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(keyspace.conversation_order(cid), item_id)
        pipe.hdel(keyspace.conversation_items(cid), item_id)
        await pipe.execute()

    async def lock(self, tenant: str, cid: str, token: str, lease_ms: int) -> None:
        """Hold a conversation while a response is generated on it; Busy if another does."""
        await self.conversation(tenant, cid)
        if not await self.client.set(keyspace.conversation_lock(cid), token, nx=True, px=lease_ms):
            raise Busy(f"another response is being generated on conversation {cid}")

    async def renew(self, cid: str, token: str, lease_ms: int) -> bool:
        """Extend the lease of a conversation this token holds; False if it holds it no more."""
        return bool(
            await self._renew(keys=[keyspace.conversation_lock(cid)], args=[token, lease_ms])
        )

    async def unlock(self, cid: str, token: str) -> None:
        """Release a conversation this token holds (no-op otherwise)."""
        await self._unlock(keys=[keyspace.conversation_lock(cid)], args=[token])

    # -- tenants -----------------------------------------------------------------------------

    async def tenant_objects(self, tenant: str) -> list[dict[str, Any]]:
        """Every stored response and conversation of a tenant, oldest first (expired responses
        are dropped from the index as they are found)."""
        members = await self.client.zrange(_objects(tenant), 0, -1, withscores=True)
        out, gone = [], []
        pipe = self.client.pipeline(transaction=False)
        parsed = []
        for raw, score in cast(list[tuple[bytes, float]], members):
            kind, _, oid = keyspace.text(raw).partition(":")
            parsed.append((raw, kind, oid, score))
            pipe.exists(_resp(oid) if kind == "response" else _conv(oid))
        for (raw, kind, oid, score), alive in zip(parsed, await pipe.execute(), strict=True):
            if alive:
                out.append({"object": kind, "id": oid, "created_at": int(score)})
            else:
                gone.append(raw)
        if gone:
            await self.client.zrem(_objects(tenant), *gone)
        return out

    async def purge_tenant(self, tenant: str) -> dict[str, int]:
        """Delete every stored response and conversation of a tenant; how many of each. The
        fence goes first: a response admitted before it is not stored when it ends."""
        await self._fence(keys=[keyspace.tenant_purged(tenant)], args=[PURGE_FENCE_S])
        counts = {"response": 0, "conversation": 0}
        for obj in await self.tenant_objects(tenant):
            try:
                if obj["object"] == "response":
                    await self.delete_response(tenant, obj["id"])
                else:
                    await self.delete_conversation(tenant, obj["id"], force=True)
            except NotFound:
                continue
            counts[obj["object"]] += 1
        await self.client.delete(_objects(tenant))
        return counts


def _conversation(cid: str, created: int, metadata: dict[str, str]) -> dict[str, Any]:
    return {"id": cid, "object": "conversation", "created_at": created, "metadata": metadata}
