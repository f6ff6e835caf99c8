"""Every Redis key zerolayer uses: its name, its type and how its values are encoded.

This module is the only place that spells a key (tests/store/test_keyspace.py refuses `zl:`
anywhere else under services/). Callers build names with the functions below; a Lua script that
derives sub-keys from a prefix gets the prefix from here (the sub-key suffixes it appends are
listed in `KEYSPACE`). Names of one tenant's, one API key's or one conversation's keys carry a
`{hash tag}` so that a script touching several of them stays on one shard of a cluster.

Values come back from redis-py as bytes (the clients are made with decode_responses=False so
that binary fields such as live channel counts survive); `text()` turns a name or value read back
into str."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "KEYSPACE",
    "KeySpec",
    "ROOT",
    "abandoned",
    "api_key",
    "api_key_by_id",
    "api_key_id_prefix",
    "api_key_index",
    "api_key_prefix",
    "bill_prefix",
    "bill_rejected",
    "bill_tenant",
    "bill_tenants",
    "batch",
    "batch_lease",
    "batch_queue",
    "batch_results",
    "canary",
    "canary_last",
    "canary_lock",
    "conversation",
    "conversation_items",
    "conversation_lock",
    "conversation_order",
    "file",
    "idempotency",
    "live_bucket",
    "live_channels",
    "live_channels_pattern",
    "live_reference",
    "metrics_counter",
    "metrics_sum",
    "rate_limit",
    "rate_limit_leases_pattern",
    "response",
    "response_line",
    "signing_secret",
    "tenant_objects",
    "tenant_batches",
    "tenant_files",
    "tenant_purged",
    "tenant_stored",
    "text",
    "tier_board",
    "traffic",
    "traffic_index",
    "traffic_prefix",
    "usage_events",
    "usage_seen_prefix",
]

ROOT = "zl:"


@dataclass(frozen=True)
class KeySpec:
    """One family of keys: its name pattern, Redis type, encoding, and who writes it."""

    pattern: str
    type: str
    encoding: str
    writer: str


# The whole keyspace, one row per key family (the patterns' <...> parts vary).
KEYSPACE: tuple[KeySpec, ...] = (
    KeySpec("zl:key:<sha256 of the key>", "hash", "ApiKeyRecord fields as text", "store.keys"),
    KeySpec("zl:keys", "set", "sha256 hex of every key", "store.keys"),
    KeySpec("zl:keyid:<key id>", "string", "sha256 hex of the key", "store.keys"),
    KeySpec("zl:tiers", "hash", "'<model>:<tier>' -> TierState JSON", "store.tiers"),
    KeySpec(
        "zl:traffic:<key id>", "stream", "fields model, tier, kind, text (UTF-8)", "store.traffic"
    ),
    KeySpec("zl:traffic:keys", "set", "key ids with a traffic stream", "store.traffic"),
    KeySpec("zl:rl:{<key id>}:req:<minute>", "string", "requests counted", "gateway.limits (Lua)"),
    KeySpec(
        "zl:rl:{<key id>}:api:<minute>",
        "string",
        "requests to the other routes counted",
        "gateway.limits (Lua)",
    ),
    KeySpec("zl:rl:{<key id>}:tok:<minute>", "string", "tokens counted", "gateway.limits (Lua)"),
    KeySpec(
        "zl:rl:{<key id>}:cost:<YYYY-MM>", "string", "month spend, nano-USD", "gateway.limits (Lua)"
    ),
    KeySpec(
        "zl:rl:{<key id>}:conc", "zset", "request id -> lease end (ms)", "gateway.limits (Lua)"
    ),
    KeySpec(
        "zl:rl:{<key id>}:res:<request id>",
        "hash",
        "a reservation: minute, tokens, nanos, month, extra, at (Redis ms of admission)",
        "gateway.limits (Lua)",
    ),
    KeySpec("zl:metrics:<counter>", "hash", "labels -> integer", "gateway.metrics"),
    KeySpec("zl:metrics:<h:histogram>", "hash", "labels + bucket -> integer", "gateway.metrics"),
    KeySpec("zl:metrics:<h:histogram>:sum", "hash", "labels -> float sum", "gateway.metrics"),
    KeySpec(
        "zl:idem:<sha256[:32] of key and path>:<sha256[:32] of Idempotency-Key>",
        "string",
        "JSON: state (running|done), body digest, claim id; when done status, headers, "
        "content (base64), complete",
        "gateway.idempotency",
    ),
    KeySpec(
        "zl:canary:<model:tier>",
        "hash",
        "kl, limit, positions, at (numbers as text), baseline",
        "gateway.canary",
    ),
    KeySpec("zl:canary:lock", "string", "'1' while one replica runs the canary", "gateway.canary"),
    KeySpec("zl:canary:last", "string", "unix time of the last run", "gateway.canary"),
    KeySpec(
        "zl:live:<model:tier>:<bucket>", "hash", "counter -> integer (store.live)", "replicas.live"
    ),
    KeySpec("zl:live:ref:<model:tier>", "string", "the tier's live reference (JSON)", "replicas"),
    KeySpec(
        "zl:live:ch:<model:tier>:<hour>:<replica>",
        "hash",
        "stamp, widths, rows (JSON), under (int64 little-endian)",
        "replicas.live",
    ),
    KeySpec(
        "zl:resp:{<response id>}",
        "hash",
        "tenant, obj, input (JSON), line, pos, conv, upto (where its history lies)",
        "conversations.store",
    ),
    KeySpec(
        "zl:ran:{<request id>}",
        "string",
        "'<prompt> <completion>': tokens that ran of a whole request whose caller left "
        "(10 minutes)",
        "store.abandoned (tier replicas)",
    ),
    KeySpec(
        "zl:line:{<response id>}",
        "list",
        "ids of a chain of responses, oldest first (named after its first)",
        "conversations.store",
    ),
    KeySpec(
        "zl:conv:{<conversation id>}",
        "hash",
        "tenant, created_at, metadata (JSON), seq",
        "conversations.store",
    ),
    KeySpec(
        "zl:conv:{<conversation id>}:order",
        "zset",
        "item id -> sequence number",
        "conversations.store",
    ),
    KeySpec(
        "zl:conv:{<conversation id>}:items", "hash", "item id -> item JSON", "conversations.store"
    ),
    KeySpec(
        "zl:conv:{<conversation id>}:lock",
        "string",
        "the response id generating on it (SET NX PX)",
        "conversations.store",
    ),
    KeySpec(
        "zl:tenant:{<tenant>}:objects",
        "zset",
        "'response:<id>' / 'conversation:<id>' -> created_at",
        "conversations.store",
    ),
    KeySpec(
        "zl:tenant:{<tenant>}:stored",
        "hash",
        "'response:<id>' / 'conversation:<id>' -> bytes; '#bytes', '#objects': the totals",
        "conversations.store",
    ),
    KeySpec(
        "zl:batch:{<batch id>}",
        "hash",
        "tenant, key_id, fixed (JSON), status, total, completed, failed, <status>_at, files",
        "batches.store",
    ),
    KeySpec(
        "zl:batch:{<batch id>}:results",
        "hash",
        "line number -> result line JSON (written once)",
        "batches.store (Lua)",
    ),
    KeySpec("zl:batch:{<batch id>}:lease", "string", "worker id (SET NX PX)", "batches.store"),
    KeySpec(
        "zl:batches:queue", "zset", "batch id -> created_at (s): still to run", "batches.store"
    ),
    KeySpec(
        "zl:tenant:{<tenant>}:batches",
        "zset",
        "batch id -> created (microseconds)",
        "batches.store",
    ),
    KeySpec(
        "zl:file:{<file id>}",
        "hash",
        "tenant, obj (the file object JSON); expires with the file",
        "files.store",
    ),
    KeySpec(
        "zl:tenant:{<tenant>}:files", "zset", "file id -> upload time (microseconds)", "files.store"
    ),
    KeySpec(
        "zl:tenant:{<tenant>}:purged",
        "string",
        "Redis time (ms) of the tenant's last purge; a response admitted before it is not stored",
        "conversations.store",
    ),
    KeySpec(
        "zl:usage:events",
        "stream",
        "field e: event JSON, a: summary line",
        "gateway.limits (Lua), billing.events",
    ),
    KeySpec("zl:usage:seen:<event id>", "string", "dedupe marker with a TTL", "billing.events"),
    KeySpec(
        "zl:bill:{<tenant>}:day:<YYYY-MM-DD>",
        "hash",
        "'<cell>|<measure>' -> integer",
        "billing.ledger (Lua)",
    ),
    KeySpec(
        "zl:bill:{<tenant>}:events:<YYYY-MM>", "list", "the month's event JSON", "billing.ledger"
    ),
    KeySpec("zl:bill:{<tenant>}:months", "set", "months with usage", "billing.ledger"),
    KeySpec("zl:bill:{<tenant>}:applied:<day>", "set", "event ids counted", "billing.ledger"),
    KeySpec("zl:bill:{<tenant>}:closed:<YYYY-MM>", "string", "when it closed", "billing.ledger"),
    KeySpec("zl:bill:{<tenant>}:invoice:<YYYY-MM>", "string", "invoice JSON", "billing.ledger"),
    KeySpec("zl:bill:tenants", "set", "tenants with usage", "billing.ledger"),
    KeySpec("zl:bill:rejected", "list", "event texts that could not be read", "billing.ledger"),
    KeySpec(
        "zl:secret:signing",
        "string",
        "32 random bytes (hex) that sign page cursors; made once (SET NX)",
        "store.signing",
    ),
)


def text(value: bytes | str) -> str:
    """A name or value as read back from Redis (bytes), as str."""
    return value.decode() if isinstance(value, bytes) else value


# API keys (store.keys)
def api_key_prefix() -> str:
    """The prefix of every key record's hash (`+ sha256 of the key`)."""
    return f"{ROOT}key:"


def api_key(digest: str) -> str:
    """The hash of one API key's record, by the sha256 hex of the key."""
    return api_key_prefix() + digest


def api_key_index() -> str:
    """The set of every key's sha256 hex."""
    return f"{ROOT}keys"


def api_key_id_prefix() -> str:
    """The prefix of the key-id -> digest strings (`+ key id`)."""
    return f"{ROOT}keyid:"


def api_key_by_id(key_id: str) -> str:
    """The string holding a key id's digest."""
    return api_key_id_prefix() + key_id


# The tier board (store.tiers)
def tier_board() -> str:
    """The hash '<model>:<tier>' -> TierState JSON."""
    return f"{ROOT}tiers"


# Sampled traffic (store.traffic)
def traffic_prefix() -> str:
    """The prefix of the per-key traffic streams (`+ key id`)."""
    return f"{ROOT}traffic:"


def traffic(key_id: str) -> str:
    """One key's stream of sampled prompts."""
    return traffic_prefix() + key_id


def traffic_index() -> str:
    """The set of key ids with a traffic stream."""
    return f"{ROOT}traffic:keys"


# Rate limits, leases, reservations, month spend (gateway.limits; sub-keys built in Lua)
def rate_limit(key_id: str) -> str:
    """The prefix of one API key's limiter keys (its hash tag keeps them on one shard)."""
    return f"{ROOT}rl:{{{key_id}}}"


def rate_limit_leases_pattern() -> str:
    """A SCAN pattern of every key's concurrency leases."""
    return f"{ROOT}rl:{{*}}:conc"


# Platform metrics (gateway.metrics)
def metrics_counter(name: str) -> str:
    """A counter's hash of labels -> count (a histogram's buckets: counter `h:<histogram>`)."""
    return f"{ROOT}metrics:{name}"


def metrics_sum(histogram: str) -> str:
    """A histogram's hash of labels -> sum of observations (histogram named `h:<name>`)."""
    return f"{ROOT}metrics:{histogram}:sum"


# Idempotency-Key replays (gateway.idempotency)
def idempotency(caller: str, key: str) -> str:
    """One stored answer: `caller` and `key` are hex digests of (API key, path) and the
    Idempotency-Key."""
    return f"{ROOT}idem:{caller}:{key}"


# The canary (gateway.canary, read by gateway.live)
def canary(tier: str) -> str:
    """A tier's latest canary result."""
    return f"{ROOT}canary:{tier}"


def canary_lock() -> str:
    """Held by the gateway replica running the canary."""
    return f"{ROOT}canary:lock"


def canary_last() -> str:
    """When the canary last ran."""
    return f"{ROOT}canary:last"


# Live activation counts (written by replicas.live, read by gateway.live and collapse)
def live_bucket(tier: str, bucket: int) -> str:
    """The hash of one tier's counts in one time bucket."""
    return f"{ROOT}live:{tier}:{bucket}"


def live_reference(tier: str) -> str:
    """Where a tier's calibrated reference is kept (JSON)."""
    return f"{ROOT}live:ref:{tier}"


def live_channels(tier: str, hour: int, replica: str) -> str:
    """The hash of one replica's per-channel counts in one hour."""
    return f"{ROOT}live:ch:{tier}:{hour}:{replica}"


def live_channels_pattern(tier: str) -> str:
    """A SCAN pattern of every replica's per-channel counts of a tier."""
    return f"{ROOT}live:ch:{tier}:*"


# Stored responses and conversations (conversations.store)
def response(rid: str) -> str:
    """A stored response's hash."""
    return f"{ROOT}resp:{{{rid}}}"


def abandoned(request_id: str) -> str:
    """The tokens that ran of a whole request whose caller left (a replica's report)."""
    return f"{ROOT}ran:{{{request_id}}}"


def response_line(line: str) -> str:
    """A chain of stored responses' ids, oldest first (list; named after its first)."""
    return f"{ROOT}line:{{{line}}}"


def conversation(cid: str) -> str:
    """A conversation's hash."""
    return f"{ROOT}conv:{{{cid}}}"


def conversation_order(cid: str) -> str:
    """A conversation's items in order (sorted set)."""
    return conversation(cid) + ":order"


def conversation_items(cid: str) -> str:
    """A conversation's items by id (hash)."""
    return conversation(cid) + ":items"


def conversation_lock(cid: str) -> str:
    """The lease of the response being generated on a conversation."""
    return conversation(cid) + ":lock"


def batch(bid: str) -> str:
    """A batch's hash."""
    return f"{ROOT}batch:{{{bid}}}"


def batch_results(bid: str) -> str:
    """A batch's result lines by line number (hash)."""
    return batch(bid) + ":results"


def batch_lease(bid: str) -> str:
    """The lease of the worker running a batch."""
    return batch(bid) + ":lease"


def batch_queue() -> str:
    """The batches still to run (sorted set by creation time)."""
    return f"{ROOT}batches:queue"


def tenant_batches(tenant: str) -> str:
    """A tenant's batches (sorted set by creation time)."""
    return f"{ROOT}tenant:{{{tenant}}}:batches"


def file(fid: str) -> str:
    """An uploaded file's object (hash; its bytes are in the file store)."""
    return f"{ROOT}file:{{{fid}}}"


def tenant_files(tenant: str) -> str:
    """A tenant's uploaded files (sorted set by creation time)."""
    return f"{ROOT}tenant:{{{tenant}}}:files"


def tenant_purged(tenant: str) -> str:
    """When the tenant's stored objects were last purged (its fence for requests in flight)."""
    return f"{ROOT}tenant:{{{tenant}}}:purged"


def tenant_objects(tenant: str) -> str:
    """A tenant's stored responses and conversations (sorted set by creation time)."""
    return f"{ROOT}tenant:{{{tenant}}}:objects"


def tenant_stored(tenant: str) -> str:
    """What a tenant stores, per object and in total (hash; its storage quota's count)."""
    return f"{ROOT}tenant:{{{tenant}}}:stored"


# Usage events (written by gateway.limits' settle script, counted by billing)
def usage_events() -> str:
    """The stream of usage events."""
    return f"{ROOT}usage:events"


def usage_seen_prefix() -> str:
    """The prefix of the events' dedupe markers (`+ event id`)."""
    return f"{ROOT}usage:seen:"


# The billing ledger (billing.ledger; its count script derives the per-tenant names in Lua)
def bill_prefix() -> str:
    """The prefix of every billing key (`{tenant}:...`, `tenants`, `rejected`)."""
    return f"{ROOT}bill:"


def bill_tenant(tenant: str) -> str:
    """The prefix of one tenant's billing keys (day:, events:, months, applied:, closed:,
    invoice:)."""
    return f"{bill_prefix()}{{{tenant}}}:"


def bill_tenants() -> str:
    """The set of tenants with usage."""
    return bill_prefix() + "tenants"


def bill_rejected() -> str:
    """Events that could not be read."""
    return bill_prefix() + "rejected"


# Signed tokens (store.signing)
def signing_secret() -> str:
    """The secret that page cursors are signed with (shared by every gateway replica)."""
    return f"{ROOT}secret:signing"
