"""What a gateway replica works with: the Backend it sends requests to (Ray Serve handles, or
in-process objects in tests) and the other parts its routes share."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from zerolayer.batches import BatchStore
from zerolayer.billing.ledger import Ledger
from zerolayer.config import PlatformConfig
from zerolayer.conversations import ConversationStore
from zerolayer.files import FileStore
from zerolayer.gateway.canary import CanaryRunner
from zerolayer.gateway.http import KeyLookup
from zerolayer.gateway.limits import Limiter
from zerolayer.gateway.live import LiveSignals
from zerolayer.gateway.metrics import Metrics
from zerolayer.protocol import (
    ChunkOptions,
    Chunks,
    End,
    Failed,
    Prompt,
    PromptInput,
    ReplicaEvent,
    SamplingSpec,
    Target,
)
from zerolayer.store.keys import KeyStore
from zerolayer.store.tiers import AsyncTierBoard
from zerolayer.store.traffic import AsyncTrafficStore, TrafficStore

__all__ = ["Backend", "BillingStats", "GatewayParts", "HealthCheck", "chunked", "prompt_ids"]

HealthCheck = Callable[[], Awaitable[dict[str, Any]]]
BillingStats = Callable[[], Awaitable[dict[str, int]]]


class Backend(Protocol):
    """Where the gateway sends a request once it is authorised and parsed: the tokenfix and
    chunker steps and the tier replicas. Every answer is a value of zerolayer.protocol."""

    async def prepare(self, model: str, req: PromptInput) -> Prompt | Failed:
        """tokenfix: the prompt's token ids."""

    async def chunk(self, model: str, text: str, options: ChunkOptions) -> Chunks | Failed:
        """chunker: complete chunks of text and where its unconsumed rest starts."""

    async def chunk_all(
        self, model: str, texts: list[str], options: ChunkOptions
    ) -> list[Chunks] | Failed:
        """chunker: the chunks of every text, in one call."""

    def stream(self, target: Target, spec: SamplingSpec) -> AsyncGenerator[ReplicaEvent, None]:
        """Events of one request: Start, Delta..., End, or Failed."""

    async def complete(self, target: Target, spec: SamplingSpec) -> End | Failed:
        """The final event of one request, with the whole text."""

    async def cards(self, targets: list[Target]) -> dict[Target, dict[str, Any]]:
        """Tier cards of these served tiers, of those that answered."""

    async def canary(self, target: Target, texts: list[str], top_k: int) -> list[dict[str, Any]]:
        """A tier's next-token distributions over the canary texts (Engine.canary)."""


@dataclass
class GatewayParts:
    """What one gateway replica works with."""

    backend: Backend
    lookup_key: KeyLookup
    config: PlatformConfig
    health: HealthCheck
    limiter: Limiter
    metrics: Metrics
    keys: KeyStore | None = None  # the admin API's key store (synchronous; admin calls are rare)
    tiers: AsyncTierBoard | None = None  # which tiers are ready; None: all of them
    live: LiveSignals | None = None  # the production signals for /metrics and the tier cards
    canary: CanaryRunner | None = None  # the canary this replica runs in the background
    traffic: AsyncTrafficStore | None = None  # where opted-in keys' sampled prompts go
    traffic_admin: TrafficStore | None = None  # the admin API's view of them (delete, count)
    conversations: ConversationStore | None = None  # stored responses, conversations; None: off
    files: FileStore | None = None  # uploaded files (the Files API); None: no routes
    batches: BatchStore | None = None  # the Batch API (with files); None: no routes, no worker
    ledger: Ledger | None = None  # usage and invoices (what billing counted); None: no routes
    billing_stats: BillingStats | None = None  # the billing consumers' backlog (/admin/billing)


async def prompt_ids(backend: Backend, model: str, req: PromptInput) -> list[int]:
    """tokenfix's token ids for a prompt; its error raised as an APIError."""
    ev = await backend.prepare(model, req)
    if isinstance(ev, Failed):
        ev.raise_()
    return ev.token_ids


async def chunked(backend: Backend, model: str, text: str, options: ChunkOptions) -> Chunks:
    """The chunker's chunks of text; its error raised as an APIError."""
    ev = await backend.chunk(model, text, options)
    if isinstance(ev, Failed):
        ev.raise_()
    return ev
