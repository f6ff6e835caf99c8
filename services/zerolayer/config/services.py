"""Settings of the platform's own parts: Redis, Ray, the gateway, tokenfix, the chunker and the
torch engine's compiled kernels (serve/*.yaml)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from zerolayer.config.base import Strict

__all__ = [
    "HardwareClass",
    "HardwareConfig",
    "RedisConfig",
    "RayConfig",
    "GatewayConfig",
    "ChunkerConfig",
    "TokenfixConfig",
    "KernelConfig",
    "MonitoringConfig",
    "TrafficSamplingConfig",
    "ConversationsConfig",
    "BillingConfig",
    "IdempotencyConfig",
    "FilesConfig",
    "BatchesConfig",
]


class RedisConfig(Strict):
    """Redis: an external URL, or an embedded redis-server started by the platform."""

    url: str | None = Field(default=None, description="External Redis (REDIS_URL); None = embedded")
    username: str | None = Field(default=None, description="ACL user (the embedded one's: set)")
    password_file: str | None = Field(
        default=None,
        description="File holding the password (REDIS_PASSWORD_FILE); kept out of URLs, config "
        "and logs. The embedded server's is <data_dir>/secret",
    )
    embedded_port: int | None = Field(
        default=None,
        description="Also serve the embedded Redis on 127.0.0.1:port (password still needed); "
        "None: unix socket only",
    )
    appendfsync: Literal["always", "everysec"] = Field(
        default="always",
        description="Embedded Redis: fsync the AOF on every write (nothing acknowledged is lost) "
        "or once a second",
    )
    data_dir: str | None = Field(
        default=None, description="Embedded Redis data dir; default <cache>/redis"
    )
    maxmemory: str = Field(
        default="1gb",
        pattern=r"^[0-9]+(b|kb|mb|gb)?$",
        description="Embedded Redis: the most memory it holds (Redis's size syntax, e.g. 512mb). "
        "Past it, writes are refused (noeviction: nothing stored is dropped) and the platform "
        "answers 503 store_full; /metrics shows how full it is",
    )


class RayConfig(Strict):
    """How the local Ray instance is started."""

    address: str | None = Field(default=None, description="Existing Ray cluster; None = start one")
    num_cpus: int | None = Field(default=None, description="Logical CPUs of a started Ray")
    throughput_optimized: bool = Field(
        default=True,
        description="Start Ray with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (direct ingress, gRPC "
        "between deployments); measured in docs/benchmarks.md",
    )
    haproxy: bool = Field(
        default=True,
        description="With throughput_optimized: Ray Serve's HAProxy listens on the platform's "
        "port and hands requests to the gateway replicas' own HTTP servers (instead of Ray's "
        "Python proxy relaying every chunk); measured in docs/benchmarks.md",
    )
    haproxy_header_timeout_s: int = Field(
        default=10,
        ge=1,
        description="With haproxy: how long a client has to send its request line and headers "
        "(HAProxy's `timeout http-request`; the body has gateway.body_timeout_s)",
    )
    haproxy_connections_per_source: int | None = Field(
        default=256,
        ge=1,
        description="With haproxy: open connections one client address may hold; more are "
        "refused when they connect (None: no limit, for a platform behind a proxy that "
        "all clients come through)",
    )


class GatewayConfig(Strict):
    """The gateway deployment."""

    replicas: int = Field(default=1, ge=1, description="Gateway replicas")
    num_cpus: float = Field(default=0.5, ge=0, description="Logical CPUs per gateway replica")
    max_ongoing_requests: int = Field(default=256, ge=1, description="Requests per replica")
    default_max_tokens: int = Field(
        default=256, ge=1, description="max_tokens when a request does not set it"
    )
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="Largest request body")
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest a client may take to send a request body (408)"
    )
    admin_key_sha256: str | None = Field(
        default=None,
        description="SHA-256 of the admin key that guards /admin; set by the launcher from "
        "ZEROLAYER_ADMIN_KEY or <cache>/admin-key (None: /admin is closed)",
    )
    queue_wait_threshold_ms: float = Field(
        default=800.0,
        gt=0,
        description="Admission control: above this measured queue wait of a tier, the lowest "
        "plan priorities are shed (each further multiple sheds the next priority)",
    )
    queue_wait_window_s: float = Field(
        default=10.0, gt=0, description="Admission control: how far back waits are measured"
    )
    queue_wait_min_samples: int = Field(
        default=5,
        ge=1,
        description="Admission control: waits measured (or streams waiting) before a tier's "
        "wait counts, so a single slow request cannot shed others",
    )
    tier_wait_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest a request waits for a replica of its tier to take it (a tier "
        "that is starting or restarting); then 503 tier_unavailable",
    )
    request_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Longest a non-streamed request may run once taken (then 503)",
    )
    drain_s: float = Field(
        default=20.0,
        ge=0,
        description="At shutdown, how long a gateway waits for requests in flight and pending "
        "settlements",
    )
    concurrency_lease_s: float = Field(
        default=60.0,
        ge=3,
        description="A request's concurrency lease: renewed while it runs, so a slot (and the "
        "reservation) of a gateway that died is returned this long after",
    )


class ChunkerConfig(Strict):
    """The chunker deployment: token-exact splitting of long inputs."""

    chunk_tokens: int = Field(default=512, ge=8, description="Tokens per chunk")
    overlap_tokens: int = Field(default=0, ge=0, description="Tokens repeated between chunks")
    max_chunks: int = Field(default=1024, ge=1, description="Most chunks one request may make")
    max_stream_bytes: int = Field(
        default=64 << 20, ge=1024, description="Largest text/plain body streamed to /v1/chunks"
    )
    summary_tokens: int = Field(
        default=128, ge=8, description="map-reduce: max_tokens of each partial summary"
    )
    max_summary_chunks: int = Field(
        default=16,
        ge=2,
        description="map-reduce: most chunks one request's message may make (more: 400)",
    )
    num_cpus: float = Field(default=0.25, ge=0, description="Logical CPUs per replica")

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> ChunkerConfig:
        if self.overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"overlap_tokens {self.overlap_tokens} must be below chunk_tokens "
                f"{self.chunk_tokens}"
            )
        return self


class TokenfixConfig(Strict):
    """The tokenfix deployment: normalisation, chat template, exact token counts."""

    replicas: int = Field(default=1, ge=1, description="Replicas")
    num_cpus: float = Field(default=0.25, ge=0, description="Logical CPUs per replica")
    in_gateway: bool = Field(
        default=False,
        description="Run tokenfix inside each gateway replica instead of as its own deployment "
        "(one handle call less per request; docs/benchmarks.md measures both)",
    )


class KernelConfig(Strict):
    """The torch engine's compiled CPU kernels (latency mode and the single-stream decode step),
    built at first use with a C compiler. Without one, tiers serve through torch ops and their
    tier card says so."""

    enabled: bool = Field(default=True, description="Build and use the compiled kernels")
    cc: str | None = Field(default=None, description="C compiler (CC); None: cc or gcc from PATH")
    cflags: list[str] = Field(
        default_factory=lambda: ["-O3", "-march=native"],
        description="Optimisation flags (OpenMP and shared-library flags are always added)",
    )


class MonitoringConfig(Strict):
    """The production signals of collapsed tiers (on /metrics and in `zerolayer status`):
    activation sparsity sampled from real steps against its calibrated value, the dynamic tier's
    skip rate, a background canary's KL against the baseline tier, and the engines' prefix
    cache hit rate."""

    sample_rate: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Share of decode steps (and of prefills) the torch engine runs under its "
        "probe; 0 turns sampling off (docs/benchmarks.md measures what it costs)",
    )
    bucket_s: int = Field(
        default=60, ge=1, description="Width of a time bucket of the live counts (per minute)"
    )
    window_buckets: int = Field(
        default=5, ge=1, description="Buckets the live activation sparsity is measured over"
    )
    history_buckets: int = Field(
        default=60, ge=3, description="Buckets the skip rate's usual band is taken from"
    )
    retention_s: int = Field(default=7200, ge=60, description="How long live counts are kept")
    flush_s: float = Field(
        default=5.0, gt=0, description="How often a replica writes its live counts to Redis"
    )
    channels_flush_s: float = Field(
        default=30.0,
        gt=0,
        description="How often a replica writes its per-channel counts (what `zerolayer "
        "collapse drift --live` reads) to Redis",
    )
    drift_limit_points: float = Field(
        default=3.0,
        gt=0,
        description="Flag a layer whose live sparsity is this far (percentage "
        "points) from its calibrated value",
    )
    skip_band_points: float = Field(
        default=5.0, ge=0, description="Slack (percentage points) around the skip rate's band"
    )
    min_history: int = Field(
        default=3,
        ge=1,
        description="Earlier buckets with traffic the band needs; before that "
        "the band is the calibrated skip rate plus and minus 2 x skip_band_points",
    )
    canary_interval_s: float = Field(
        default=900.0, gt=0, description="How often one gateway replica runs the canary"
    )
    canary_kl_limit: float = Field(
        default=0.08, gt=0, description="Flag a tier whose canary KL against baseline is over"
    )
    canary_top_k: int = Field(
        default=20,
        ge=2,
        le=20,
        description="Top tokens per position the canary KL compares (vLLM returns at most 20)",
    )
    canary_defer_s: float = Field(
        default=30.0,
        ge=0,
        description="torch engine: how long the canary waits for an idle "
        "moment before it runs between steps",
    )


class TrafficSamplingConfig(Strict):
    """Prompts kept for recalibration, from the keys that opted in (a key's own setting, else
    its plan's `sample_traffic`; off by default). `zerolayer collapse build --from-traffic`
    builds candidate tiers from them plus the standard domains."""

    rate: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Share of an opted-in key's requests whose prompt is kept",
    )
    retention_s: int = Field(
        default=30 * 86400,
        ge=60,
        description="How long a kept prompt lives; older ones are never read and are trimmed",
    )
    max_per_key: int = Field(
        default=2000, ge=1, description="Most prompts kept per key (the oldest go first)"
    )
    max_chars: int = Field(
        default=16000, ge=100, description="A longer prompt is kept cut to this many characters"
    )


class ConversationsConfig(Strict):
    """Stored responses and conversations (the Responses and Conversations APIs), in Redis."""

    response_ttl_s: int | None = Field(
        default=30 * 86400,
        ge=60,
        description="How long a stored response lives (a previous_response_id it can be "
        "continued from); None: until deleted",
    )
    conversation_ttl_s: int | None = Field(
        default=30 * 86400,
        ge=60,
        description="How long a conversation lives after its last change (created, items "
        "added, metadata replaced); None: until deleted",
    )


class BillingConfig(Strict):
    """The billing deployment: how it reads the usage event stream, when months close."""

    replicas: int = Field(default=1, ge=1, description="Consumers of the usage stream (one group)")
    num_cpus: float = Field(default=0.1, ge=0, description="CPUs reserved per billing replica")
    batch: int = Field(default=500, ge=1, le=10000, description="Events read and applied at once")
    claim_idle_s: float = Field(
        default=30.0,
        gt=0,
        description="A delivered event not acknowledged for this long belongs to a consumer that "
        "died: another claims it",
    )
    dedupe_ttl_s: int = Field(
        default=40 * 86400,
        ge=3600,
        description="How long an event id is remembered (written, counted): a duplicate within "
        "it is dropped",
    )
    stream_retention_s: int = Field(
        default=86400,
        ge=60,
        description="Counted events stay in the stream this long (the month's export keeps them "
        "for good)",
    )
    close_after_s: int = Field(
        default=3600,
        ge=0,
        description="A month's invoice closes this long after the month ends (UTC); later events "
        "go to the next month's invoice, marked late",
    )


class IdempotencyConfig(Strict):
    """Idempotency-Key on POST requests: how long a first result is replayed."""

    ttl_s: int = Field(default=86400, ge=60, description="How long a key's first result is kept")
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="A replayed result larger than this is not kept (the retry runs again as a "
        "409 would be worse); streams are kept as their frames",
    )


class FilesConfig(Strict):
    """Uploaded files (the Files API, batch input and output): where their bytes live."""

    url: str | None = Field(
        default=None,
        description="fsspec URL of the folder or bucket that holds the files' bytes (e.g. "
        "s3://bucket/zerolayer with s3fs installed); None: <cache>/files",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of that file system (s3fs: endpoint_url, key, secret, ...)",
    )
    max_bytes: int = Field(default=100 * 1024 * 1024, ge=1024, description="Largest upload")
    max_batch_lines: int = Field(
        default=50_000, ge=1, description="Most requests in one batch input file"
    )
    batch_expires_s: int | None = Field(
        default=30 * 86400,
        ge=3600,
        description="How long a batch file lives unless its upload says otherwise; None: until "
        "deleted",
    )


class BatchesConfig(Strict):
    """The Batch API's workers (one in each gateway replica)."""

    concurrency: int = Field(
        default=48,
        ge=1,
        le=256,
        description="Requests of one batch a worker runs at once, at most three quarters of "
        "its tier's max_ongoing_requests (the rest is kept for interactive requests); more than "
        "the engine's slots, so a finished request's slot does not wait for the next one",
    )
    poll_s: float = Field(
        default=1.0, gt=0, description="How often an idle worker looks for a batch"
    )
    group_most: int = Field(
        default=16,
        ge=1,
        le=256,
        description="At most this many of a batch's requests for one tier go to it in one call "
        "(each call through Ray Serve costs CPU whatever it carries)",
    )
    group_wait_s: float = Field(
        default=0.005,
        ge=0,
        le=1,
        description="How long a batch's request waits for others to go to its tier with it",
    )
    lease_s: float = Field(
        default=30.0,
        ge=1,
        description="A worker that dies lets its batch go after this long; another goes on",
    )
    yield_wait_share: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="A batch's request waits while its tier's measured queue wait is over this "
        "share of the shedding threshold (interactive traffic first)",
    )
    window_s: int = Field(
        default=86400, ge=60, description="The completion window ('24h'): a batch expires after it"
    )


class HardwareClass(Strict):
    """A kind of machine a tier's replicas run on, and what one replica of it costs."""

    replica_hour_usd: Decimal = Field(
        gt=0, description="What one replica costs per hour on this hardware, in USD"
    )
    description: str = Field(default="", description="What the class is")
    gpu: bool = Field(
        default=False,
        description="Its replicas run on a GPU: a cost is measured for it only where one is",
    )

    @field_validator("replica_hour_usd", mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        return Decimal(repr(value)) if isinstance(value, float) else value


class HardwareConfig(Strict):
    """The hardware classes and which one this platform's replicas run on: measured costs
    (`zerolayer collapse price`) are in its replica-hour price."""

    hardware_class: str = Field(
        default="cpu-2", description="The class of the machines this platform serves on"
    )
    cpu_class: str = Field(
        default="cpu-2",
        description="The class of CPU-only machines: a cluster without GPUs serves on it",
    )
    classes: dict[str, HardwareClass] = Field(
        default_factory=lambda: {"cpu-2": HardwareClass(replica_hour_usd=Decimal("0.10"))},
        description="Replica-hour price per hardware class",
    )

    @model_validator(mode="after")
    def _known_class(self) -> HardwareConfig:
        for name in (self.hardware_class, self.cpu_class):
            if name not in self.classes:
                raise ValueError(
                    f"hardware class {name!r} is not in classes ({', '.join(sorted(self.classes))})"
                )
        return self
