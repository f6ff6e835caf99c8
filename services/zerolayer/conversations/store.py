"""Stored responses and conversations in Redis, owned by tenants.

Layout (names from zerolayer.store.keyspace; a conversation's keys share one hash slot, so a
Redis Cluster keeps them together):
  resp:{<id>}                 hash: tenant, obj (the response object, JSON), input (its input
                              items), and where its history lies (its lineage): line and pos
                              (the line its id is on, and its place in it, from 1), conv and
                              upto (the conversation, and its last item's sequence number, the
                              chain began on). A turn's items are stored once, in its own
                              response: a follow-up's history is read from its chain. Expires
                              after `response_ttl_s`; storing a follow-up renews its chain's.
  line:{<id>}                 list: the ids of a chain of responses, oldest first (named after
                              the response that began it). A follow-up of the line's last
                              response is appended to it; one of an earlier response (a branch)
                              begins a line of its own with its ancestors' ids. So a chain's
                              ids are stored once too, not once per response.
  conv:{<id>}                 hash: tenant, created_at, metadata (JSON), seq (items added so far)
  conv:{<id>}:order           sorted set: item id -> its sequence number (the items' order)
  conv:{<id>}:items           hash: item id -> item (JSON)
  conv:{<id>}:lock            the response being generated on it (a lease: SET NX PX)
  tenant:{<tenant>}:objects   sorted set: "response:<id>" / "conversation:<id>" -> created_at
                              (what the admin API lists and deletes for a tenant)
  tenant:{<tenant>}:stored    hash: "response:<id>" / "conversation:<id>" -> bytes stored, and
                              the totals "#bytes" and "#objects" (what the plan's storage
                              quota is checked against; objects that expired are taken out of
                              the totals when a write would pass the quota)

An object of another tenant is reported exactly as a missing one (NotFound): no existence
oracle. Items are added by one script that checks the owner and, for a response, that it still
holds the conversation's lock, so two responses never interleave their items. A conversation's
creation and its items are checked against the tenant's storage quota in the script that writes
them (QuotaExceeded, nothing written); a response is checked before it runs (`check_quota`)."""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any, Literal, cast

import redis.asyncio as aioredis

from zerolayer.config import PlanLimits
from zerolayer.conversations.items import Page
from zerolayer.errors import ZerolayerError
from zerolayer.store import keyspace

__all__ = [
    "Busy",
    "ConversationStore",
    "Lineage",
    "NotFound",
    "Quota",
    "QuotaExceeded",
    "StoredResponse",
]


class NotFound(ZerolayerError, LookupError):
    """No such object for this tenant (missing, expired, deleted, or another tenant's)."""


class Busy(ZerolayerError):
    """Another response is being generated on the conversation."""


class QuotaExceeded(ZerolayerError):
    """The write would take the tenant past its plan's storage quota (nothing was written)."""

    def __init__(self, what: str, used: int, limit: int):
        unit = "bytes" if what == "bytes" else "stored objects"
        super().__init__(
            f"the storage quota of this key's plan is {limit} {unit} per tenant and the tenant "
            f"uses {used}; delete stored responses or conversations to make room"
        )
        self.what, self.used, self.limit = what, used, limit


@dataclass(frozen=True)
class Quota:
    """A tenant's storage quota (from its key's plan): bytes and objects; None is no limit."""

    bytes: int | None = None
    objects: int | None = None

    def args(self) -> list[int]:
        return [self.bytes or 0, self.objects or 0]

    @classmethod
    def of(cls, limits: PlanLimits | None) -> Quota:
        """The storage quota a plan's limits set (none without a plan)."""
        if limits is None:
            return cls()
        return cls(limits.stored_bytes, limits.stored_objects)

    def refusal(self, used: int, objects: int) -> QuotaExceeded | None:
        """Why a tenant storing this much may store nothing more; None when it may."""
        if self.objects and objects >= self.objects:
            return QuotaExceeded("objects", objects, self.objects)
        if self.bytes and used >= self.bytes:
            return QuotaExceeded("bytes", used, self.bytes)
        return None


@dataclass(frozen=True)
class Lineage:
    """Where a response's history lies: the stored responses it continues (oldest first), the
    line and place in it of the last of them (`line` '' when it is on none), and the
    conversation (with its items up to sequence number `upto`) the chain began on."""

    chain: tuple[str, ...] = ()
    line: str = ""
    pos: int = 0
    conv: str | None = None
    upto: int = 0


_dumps = functools.partial(json.dumps, separators=(",", ":"))


_resp = keyspace.response
_conv = keyspace.conversation
_objects = keyspace.tenant_objects
_stored = keyspace.tenant_stored
_line = keyspace.response_line
_RESP_NAME = keyspace.response("\n").split("\n")  # a response's key name around its id
_LINE_NAME = keyspace.response_line("\n").split("\n")


# The tenant's stored totals: a charge to one object's entry (bytes, objects), and the check
# of a write against the quota (0 = no limit): -3 past the bytes, -4 past the objects.
_ACCOUNT = """
local function charge(stored, field, bytes, objects)
  redis.call('HINCRBY', stored, field, bytes)
  redis.call('HINCRBY', stored, '#bytes', bytes)
  if objects ~= 0 then redis.call('HINCRBY', stored, '#objects', objects) end
end
local function over(stored, bytes, objects, max_bytes, max_objects)
  local t = redis.call('HMGET', stored, '#bytes', '#objects')
  if max_objects > 0 and objects > 0 and (tonumber(t[2]) or 0) + objects > max_objects then
    return -4
  end
  if max_bytes > 0 and bytes > 0 and (tonumber(t[1]) or 0) + bytes > max_bytes then return -3 end
  return 0
end
"""

# KEYS: conv hash, order zset, items hash, lock, tenant's stored totals. ARGV: tenant, lock
# token ('' = none), ttl ms (0 = none), the conversation's entry in the totals, max bytes (0 =
# no check), then item id / item JSON pairs. The sequence number of the last item; -1: not
# found, -2: lock not held, -3: past the bytes quota (nothing added).
_ADD = (
    _ACCOUNT
    + """
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return -1 end
if ARGV[2] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[2] then return -2 end
local bytes = 0
for i = 6, #ARGV, 2 do
  bytes = bytes + #ARGV[i] + #ARGV[i + 1]
  local old = redis.call('HSTRLEN', KEYS[3], ARGV[i])
  if old > 0 then bytes = bytes - old - #ARGV[i] end
end
local refused = over(KEYS[5], bytes, 0, tonumber(ARGV[5]), 0)
if refused ~= 0 then return refused end
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0
for i = 6, #ARGV, 2 do
  seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('ZADD', KEYS[2], seq, ARGV[i])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
if redis.call('HEXISTS', KEYS[5], ARGV[4]) == 1 then charge(KEYS[5], ARGV[4], bytes, 0) end
if ARGV[2] ~= '' then redis.call('DEL', KEYS[4]) end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
return seq
"""
)

# KEYS: conv hash, tenant index, tenant's stored totals. ARGV: tenant, created_at, metadata
# JSON, ttl ms (0 = none), the conversation's entry, max bytes, max objects. 1, or -3/-4.
_CREATE = (
    _ACCOUNT
    + """
local bytes = #ARGV[3] + #ARGV[5]
local refused = over(KEYS[3], bytes, 1, tonumber(ARGV[6]), tonumber(ARGV[7]))
if refused ~= 0 then return refused end
redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'created_at', ARGV[2], 'metadata', ARGV[3],
           'seq', 0)
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[5])
charge(KEYS[3], ARGV[5], bytes, 1)
return 1
"""
)

# KEYS: tenant's stored totals. ARGV: entries of objects that are gone: their bytes and their
# count are taken out of the totals (an entry no longer there is skipped).
_FORGET = """
for i = 1, #ARGV do
  local b = redis.call('HGET', KEYS[1], ARGV[i])
  if b then
    redis.call('HINCRBY', KEYS[1], '#bytes', -tonumber(b))
    redis.call('HINCRBY', KEYS[1], '#objects', -1)
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return 1
"""

# KEYS: a response hash, the tenant's stored totals. ARGV: tenant, then the parts of a
# response's and a line's key names around the id. What a follow-up of it reads, in one call:
# its line, place, conv and upto, the tenant's stored bytes and objects, then per response of
# its chain, oldest first and itself last: id, tenant, obj, input,
# context (the layout before lines). An empty list when it is not the tenant's. The chain's
# keys are named in the script from the line (not declared: this needs a Redis that is not a
# Cluster, as every script here that spans a tenant's keys does).
_CONTEXT = """
local r = redis.call('HMGET', KEYS[1], 'tenant', 'obj', 'input', 'line', 'pos', 'conv', 'upto',
                     'context')
if r[1] ~= ARGV[1] then return {} end
local t = redis.call('HMGET', KEYS[2], '#bytes', '#objects')
local out = {r[4], r[5], r[6], r[7], t[1], t[2]}
local pos = tonumber(r[5]) or 0
if pos > 1 then
  local ids = redis.call('LRANGE', ARGV[4] .. r[4] .. ARGV[5], 0, pos - 2)
  for _, id in ipairs(ids) do
    local h = redis.call('HMGET', ARGV[2] .. id .. ARGV[3], 'tenant', 'obj', 'input', 'context')
    out[#out + 1] = id
    for k = 1, 4 do out[#out + 1] = h[k] end
  end
end
out[#out + 1] = ''
out[#out + 1] = r[1]
out[#out + 1] = r[2]
out[#out + 1] = r[3]
out[#out + 1] = r[8]
return out
"""

# KEYS: order zset, items hash, tenant's stored totals. ARGV: item id, the conversation's entry.
_DROP_ITEM = """
local n = redis.call('HSTRLEN', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if n > 0 and redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[3], ARGV[2], -(n + #ARGV[1]))
  redis.call('HINCRBY', KEYS[3], '#bytes', -(n + #ARGV[1]))
end
return n
"""

# KEYS: response hash, tenant index, tenant purge fence, tenant's stored totals, the line of the
# response it continues (its own when none), its own line, then the hashes of the responses its
# chain continues (their time is renewed with its). ARGV: tenant, obj, input, the line's id (''
# = none), ttl ms (0 = none), id, created_at, admitted at (Redis ms; 0 = no fence), conv, upto,
# the continued response's place on its line (0 = none), then the chain's ids (oldest first).
# One call (one reply to parse) on every response's path; 0 when the tenant was purged after
# the response's admission. Not checked against the quota (check_quota was, before it ran): it
# is charged to the totals.
_SAVE = (
    _ACCOUNT
    + """
local fence = redis.call('GET', KEYS[3])
if fence and tonumber(ARGV[8]) > 0 and tonumber(fence) >= tonumber(ARGV[8]) then return 0 end
local line, pos, pushed = '', 0, 0
local at = tonumber(ARGV[11])
if ARGV[4] ~= '' and at > 0 and redis.call('LLEN', KEYS[5]) == at then
  redis.call('RPUSH', KEYS[5], ARGV[6])  -- it continues the line's last response
  line, pos, pushed = ARGV[4], at + 1, #ARGV[6]
elseif #ARGV > 11 then  -- a branch, or the first follow-up: a line of its own
  for i = 12, #ARGV do
    redis.call('RPUSH', KEYS[6], ARGV[i])
    pushed = pushed + #ARGV[i]
  end
  redis.call('RPUSH', KEYS[6], ARGV[6])
  line, pos, pushed = ARGV[6], #ARGV - 10, pushed + #ARGV[6]
end
redis.call('HSET', KEYS[1], 'tenant', ARGV[1], 'obj', ARGV[2], 'input', ARGV[3],
           'line', line, 'pos', pos, 'conv', ARGV[9], 'upto', ARGV[10])
local ttl = tonumber(ARGV[5])
if ttl > 0 then
  for k = 1, #KEYS do
    if k == 1 or k > 4 then redis.call('PEXPIRE', KEYS[k], ttl) end
  end
end
local entry = 'response:' .. ARGV[6]
redis.call('ZADD', KEYS[2], ARGV[7], entry)
local bytes = #ARGV[2] + #ARGV[3] + #line + pushed + #entry
local old = redis.call('HGET', KEYS[4], entry)
if old then
  charge(KEYS[4], entry, bytes - tonumber(old), 0)
else
  charge(KEYS[4], entry, bytes, 1)
end
return 1
"""
)

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
        self._create = client.register_script(_CREATE)
        self._forget = client.register_script(_FORGET)
        self._drop_item = client.register_script(_DROP_ITEM)
        self._context = client.register_script(_CONTEXT)

    # -- responses ---------------------------------------------------------------------------

    async def save_response(
        self,
        tenant: str,
        obj: dict[str, Any],
        input_items: list[dict[str, Any]],
        lineage: Lineage = Lineage(),
        admitted_ms: int = 0,
    ) -> bool:
        """Store (or overwrite) a response, its input and where its history lies, in one script
        (atomic); the responses of its chain live as long as it from now. False, storing
        nothing, when the tenant's objects were purged after `admitted_ms` (Redis time of the
        request's admission; 0: no check): a purge wins over the requests it overlapped."""
        rid = obj["id"]
        saved = await self._save(
            keys=[
                _resp(rid),
                _objects(tenant),
                keyspace.tenant_purged(tenant),
                _stored(tenant),
                _line(lineage.line or rid),
                _line(rid),
                *(_resp(a) for a in lineage.chain),
            ],
            args=[
                tenant,
                _dumps(obj),
                _dumps(input_items),
                lineage.line,
                self.response_ttl_ms,
                rid,
                obj["created_at"],
                admitted_ms,
                lineage.conv or "",
                lineage.upto,
                lineage.pos,
                *lineage.chain,
            ],
        )
        return bool(saved)

    async def stored(self, tenant: str) -> tuple[int, int]:
        """What a tenant stores: bytes and objects (as its quota counts them)."""
        got = await self.client.hmget(_stored(tenant), ["#bytes", "#objects"])
        return int(got[0] or 0), int(got[1] or 0)

    async def check_quota(
        self, tenant: str, quota: Quota, totals: tuple[int, int] | None = None
    ) -> None:
        """QuotaExceeded when the tenant is at its quota already (before a response runs: a
        response is stored whatever its size once it ran), by its stored totals (`totals`
        when read already). Objects that expired are taken out of the totals first when the
        totals say it is."""
        refused = quota.refusal(*(totals or await self.stored(tenant)))
        if refused is not None and await self.reconcile(tenant):
            refused = quota.refusal(*await self.stored(tenant))
        if refused is not None:
            raise refused

    async def reconcile(self, tenant: str) -> int:
        """Take the objects of a tenant that expired out of its stored totals; how many."""
        entries = [
            keyspace.text(f)
            for f in await self.client.hkeys(_stored(tenant))
            if not keyspace.text(f).startswith("#")
        ]
        if not entries:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for entry in entries:
            kind, _, oid = entry.partition(":")
            pipe.exists(_resp(oid) if kind == "response" else _conv(oid))
        gone = [e for e, alive in zip(entries, await pipe.execute(), strict=True) if not alive]
        if gone:
            await self._forget(keys=[_stored(tenant)], args=gone)
        return len(gone)

    async def _quota_refusal(self, tenant: str, code: int, quota: Quota) -> QuotaExceeded:
        """The error of a write a script refused for the quota (-3 bytes, -4 objects)."""
        used, objects = await self.stored(tenant)
        if code == -4:
            return QuotaExceeded("objects", objects, quota.objects or 0)
        return QuotaExceeded("bytes", used, quota.bytes or 0)

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

    async def context(
        self, tenant: str, rid: str, quota: Quota | None = None
    ) -> tuple[list[dict[str, Any]], Lineage]:
        """The items a follow-up of a tenant's stored response continues from (each earlier
        turn's input and output, read from the response that stored it), and the follow-up's
        lineage; NotFound when the response, or one its history is read from, is missing. With
        `quota` (a follow-up to be stored), QuotaExceeded as check_quota, read in the same
        call."""
        got = await self._context(
            keys=[_resp(rid), _stored(tenant)], args=[tenant, *_RESP_NAME, *_LINE_NAME]
        )
        if not got:
            raise NotFound(f"no stored response with id {rid!r}")
        line, pos = keyspace.text(got[0] or b""), int(got[1] or 0)
        conv = (keyspace.text(got[2]) if got[2] else "") or None
        upto = int(got[3] or 0)
        if quota is not None:
            await self.check_quota(tenant, quota, (int(got[4] or 0), int(got[5] or 0)))
        rest = got[6:]
        if pos > 1 and len(rest) // 5 != pos:
            raise NotFound(f"the history of {rid} was deleted or has expired")
        hops = [rest[i : i + 5] for i in range(0, len(rest), 5)]  # id, tenant, obj, input, old
        chain = tuple(keyspace.text(h[0]) for h in hops[:-1])
        history: list[dict[str, Any]] = []
        if conv is not None:
            history = await self._items_upto(tenant, conv, upto, rid)
        for a, owner, obj, items, old in hops:
            if owner is None or keyspace.text(owner) != tenant:
                raise NotFound(
                    f"the response {keyspace.text(a)} in the history of {rid} was deleted or "
                    "has expired"
                )
            if old is not None:  # stored before lineages: its whole history with it
                history = json.loads(old)
            else:
                history += json.loads(items) + json.loads(obj).get("output", [])
        return history, Lineage((*chain, rid), line, pos, conv, upto)

    async def _items_upto(self, tenant: str, cid: str, upto: int, rid: str) -> list[dict[str, Any]]:
        """A conversation's items up to sequence number `upto` (a chain's beginning)."""
        try:
            await self.conversation(tenant, cid)
        except NotFound as exc:
            raise NotFound(
                f"the conversation {cid} that the history of {rid} began on was deleted or has "
                "expired"
            ) from exc
        ids = await self.client.zrangebyscore(keyspace.conversation_order(cid), "-inf", upto)
        return await self._items(cid, ids)

    async def delete_response(self, tenant: str, rid: str) -> None:
        """Delete a tenant's stored response; NotFound if it has none of that id. (A follow-up
        of a later response of its chain is then refused: its history is gone.)"""
        await self._owned(_resp(rid), tenant, f"response with id {rid!r}")
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(_resp(rid), _line(rid))  # the line it began, if any: ids of its chain
        pipe.zrem(_objects(tenant), f"response:{rid}")
        await pipe.execute()
        await self._forget(keys=[_stored(tenant)], args=[f"response:{rid}"])

    # -- conversations -----------------------------------------------------------------------

    async def create_conversation(
        self,
        tenant: str,
        cid: str,
        metadata: dict[str, str],
        items: list[dict[str, Any]],
        quota: Quota = Quota(),
    ) -> dict[str, Any]:
        """A new conversation with its first items; QuotaExceeded (nothing kept) when it would
        take the tenant past its storage quota."""
        created = int(time.time())
        for attempt in range(2):
            got = await self._create(
                keys=[_conv(cid), _objects(tenant), _stored(tenant)],
                args=[
                    tenant,
                    created,
                    json.dumps(metadata),
                    self.conversation_ttl_ms,
                    f"conversation:{cid}",
                    *quota.args(),
                ],
            )
            if got == 1:
                break
            if attempt == 1 or not await self.reconcile(tenant):
                raise await self._quota_refusal(tenant, got, quota)
        if items:
            try:
                await self.add_items(tenant, cid, items, quota=quota)
            except QuotaExceeded:
                await self.delete_conversation(tenant, cid, force=True)
                raise
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
        await self._forget(keys=[_stored(tenant)], args=[f"conversation:{cid}"])

    async def add_items(
        self,
        tenant: str,
        cid: str,
        items: list[dict[str, Any]],
        lock: str | None = None,
        quota: Quota = Quota(),
    ) -> int:
        """Append items in order, atomically; with `lock`, only while that response still holds
        the conversation (and the lock is released with the same write). The sequence number
        of the last item. NotFound, Busy, QuotaExceeded (past the quota's bytes: nothing
        added)."""
        args: list[Any] = [
            tenant,
            lock or "",
            self.conversation_ttl_ms,
            f"conversation:{cid}",
            quota.bytes or 0,
        ]
        for it in items:
            args += [it["id"], _dumps(it)]
        keys = [
            _conv(cid),
            keyspace.conversation_order(cid),
            keyspace.conversation_items(cid),
            keyspace.conversation_lock(cid),
            _stored(tenant),
        ]
        for attempt in range(2):
            n = int(await self._add(keys=keys, args=args))
            if n == -1:
                raise NotFound(f"no conversation with id {cid!r}")
            if n == -2:
                raise Busy(f"the conversation {cid} is no longer held by this response")
            if n >= 0:
                return n
            if attempt == 1 or not await self.reconcile(tenant):
                break
        raise await self._quota_refusal(tenant, n, quota)

    async def items(self, tenant: str, cid: str) -> list[dict[str, Any]]:
        """Every item of a conversation, oldest first."""
        return (await self.history(tenant, cid))[0]

    async def history(self, tenant: str, cid: str) -> tuple[list[dict[str, Any]], int]:
        """Every item of a conversation, oldest first (a response's history), and the sequence
        number of the last."""
        await self.conversation(tenant, cid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hget(_conv(cid), "seq")
        pipe.zrange(keyspace.conversation_order(cid), 0, -1)
        seq, ids = await pipe.execute()
        return await self._items(cid, ids), int(seq or 0)

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
        await self._drop_item(
            keys=[
                keyspace.conversation_order(cid),
                keyspace.conversation_items(cid),
                _stored(tenant),
            ],
            args=[item_id, f"conversation:{cid}"],
        )

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
        await self.client.delete(_objects(tenant), _stored(tenant))
        return counts


def _conversation(cid: str, created: int, metadata: dict[str, str]) -> dict[str, Any]:
    return {"id": cid, "object": "conversation", "created_at": created, "metadata": metadata}
