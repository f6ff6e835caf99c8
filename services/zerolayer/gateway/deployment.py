"""The gateway as a Ray Serve ingress deployment. Each tier is its own Serve application (one
per replica group, named as its deployment), deployed when its artifact is ready: the gateway
takes a handle to a tier when it first sends it a request, and the tier board says which tiers
are ready."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, cast

from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from zerolayer.batches import BatchStore
from zerolayer.billing.consumer import backlog
from zerolayer.billing.ledger import Ledger
from zerolayer.config import PlatformConfig
from zerolayer.conversations import ConversationStore
from zerolayer.files import FileStore, files_url
from zerolayer.gateway.api import create_app
from zerolayer.gateway.canary import CanaryRunner
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.grouped import Grouper
from zerolayer.gateway.limits import Limiter
from zerolayer.gateway.live import LiveSignals
from zerolayer.gateway.metrics import Metrics
from zerolayer.gateway.parts import GatewayParts
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
from zerolayer.store.connect import async_client, sync_client
from zerolayer.store.keys import AsyncKeyStore, KeyStore
from zerolayer.store.tiers import AsyncTierBoard, state_of
from zerolayer.store.traffic import AsyncTrafficStore, TrafficStore
from zerolayer.tokenfix.service import Tokenfix

CARD_TTL_S = 5.0  # how long a gateway keeps a tier card before asking a replica again

__all__ = [
    "HandleBackend",
    "GatewayDeployment",
    "deployment_name",
    "gateway_deployment",
    "tier_handle",
]


def deployment_name(model: str, tier: str, short: bool = False) -> str:
    """Ray Serve deployment name of a tier (no ':' in deployment names), also the name of the
    tier's application."""
    return f"{model}--{tier}" + ("--short" if short else "")


def tier_handle(target: Target) -> DeploymentHandle:
    """The handle of a tier's replica group: the deployment of the application of its name."""
    name = deployment_name(target.model, target.tier, target.short)
    return serve.get_deployment_handle(name, app_name=name)


class HandleBackend:
    """Sends requests to tokenfix, the chunker and the tier replicas through Ray Serve handles
    (a tier's taken when first used: tiers join the platform while it runs)."""

    def __init__(
        self,
        tokenfix: DeploymentHandle | Tokenfix,
        chunker: DeploymentHandle,
        handle_of: Callable[[Target], DeploymentHandle] = tier_handle,
        group_most: int = 16,
        group_wait_s: float = 0.005,
    ):
        self.tokenfix = tokenfix
        self.chunker = chunker
        self._handle_of = handle_of
        self.handles: dict[Target, DeploymentHandle] = {}
        self._streams: dict[Target, DeploymentHandle] = {}
        self._cards: dict[Target, dict[str, Any]] = {}
        self._card_at: dict[Target, float] = {}  # when each card was asked for (monotonic)
        # a batch's whole requests go to their tier in groups (zerolayer.gateway.grouped)
        self.grouped = Grouper(self._complete_many, group_most, group_wait_s)

    def _handle(self, target: Target) -> DeploymentHandle:
        handle = self.handles.get(target)
        if handle is None:
            handle = self.handles[target] = self._handle_of(target)
            self._streams[target] = handle.options(stream=True)
        return handle

    async def prepare(self, model: str, req: PromptInput) -> Prompt | Failed:
        if isinstance(self.tokenfix, Tokenfix):  # in this process (tokenfix.in_gateway)
            return await self.tokenfix.prepare(model, req)
        return await self.tokenfix.prepare.remote(model, req)

    async def chunk(self, model: str, text: str, options: ChunkOptions) -> Chunks | Failed:
        return await self.chunker.chunk.remote(model, text, options)

    async def chunk_all(
        self, model: str, texts: list[str], options: ChunkOptions
    ) -> list[Chunks] | Failed:
        return await self.chunker.chunk_all.remote(model, texts, options)

    def stream(self, target: Target, spec: SamplingSpec) -> AsyncGenerator[ReplicaEvent, None]:
        return self._streamed(target, "stream", spec)

    async def complete(self, target: Target, spec: SamplingSpec) -> End | Failed:
        if spec.priority > 0:  # a batch's: sent with others for the same tier
            return await self.grouped.complete(target, spec)
        response = self._handle(target).complete.remote(spec)
        try:
            return await response
        except asyncio.CancelledError:
            response.cancel()  # the caller left: the replica's call is cancelled, the engine aborts
            raise

    def _complete_many(
        self, target: Target, specs: list[SamplingSpec]
    ) -> AsyncGenerator[list[tuple[int, End | Failed]], None]:
        return self._streamed(target, "complete_many", specs)

    async def _streamed(self, target: Target, method: str, arg: Any) -> AsyncGenerator[Any, None]:
        """The items a replica's generator method yields, through the handle; closed early
        (the client, or every caller of a group, left), the replica's generator is closed and
        the engine stops its requests."""
        self._handle(target)
        remote = getattr(self._streams[target], method).remote
        gen = cast(DeploymentResponseGenerator, remote(arg))
        finished = False
        try:
            async for item in gen:
                yield item
            finished = True
        finally:
            if not finished:
                gen.cancel()  # the replica's generator is closed, the engine aborts

    async def canary(self, target: Target, texts: list[str], top_k: int) -> list[dict[str, Any]]:
        return await self._handle(target).canary.remote(texts, top_k)

    async def cards(self, targets: list[Target]) -> dict[Target, dict[str, Any]]:
        """These tiers' cards, each asked of one of its replicas and kept for CARD_TTL_S (a
        promotion or a rollback swaps a tier's artifact, and its card, while the application
        runs); a tier that does not answer within a few seconds keeps the card it had, or is
        left out."""
        now = time.monotonic()
        stale = [t for t in targets if now - self._card_at.get(t, -CARD_TTL_S) >= CARD_TTL_S]
        if stale:
            got = await asyncio.gather(
                *(asyncio.wait_for(self._handle(t).card.remote(), 5.0) for t in stale),
                return_exceptions=True,
            )
            for t, card in zip(stale, got, strict=True):
                if not isinstance(card, BaseException):
                    self._cards[t], self._card_at[t] = card, now
        return {t: self._cards[t] for t in targets if t in self._cards}


@serve.ingress()
class GatewayDeployment:
    """OpenAI-compatible front door: keys, limits, admission, routing to tiers, SSE, admin."""

    def __init__(
        self,
        config: dict[str, Any],
        tokenfix: DeploymentHandle | None,
        chunker: DeploymentHandle,
        billing: DeploymentHandle | None = None,
    ):
        self.config = PlatformConfig.model_validate(config)
        self.redis = async_client(
            self.config.redis, health_check_interval=30, socket_timeout=5, socket_connect_timeout=2
        )
        self.keys = AsyncKeyStore(self.redis)
        prepare: DeploymentHandle | Tokenfix = (
            # tokenfix.in_gateway: the same code in this process
            Tokenfix({m: self.config.model_dir(m) for m in self.config.models})
            if tokenfix is None
            else tokenfix
        )
        batches = self.config.batches
        self.backend = HandleBackend(
            prepare, chunker, group_most=batches.group_most, group_wait_s=batches.group_wait_s
        )
        self.tiers = AsyncTierBoard(self.redis)
        ts, conv = self.config.traffic_sampling, self.config.conversations
        admin_redis = sync_client(self.config.redis)  # the admin API's calls (rare)
        self.parts = GatewayParts(
            backend=self.backend,
            lookup_key=self.keys.lookup,
            config=self.config,
            health=self._health,
            limiter=Limiter(
                self.redis,
                self.config.gateway.concurrency_lease_s,
                dedupe_ttl_s=self.config.billing.dedupe_ttl_s,
            ),
            metrics=Metrics(self.redis),
            keys=KeyStore(admin_redis),
            traffic=AsyncTrafficStore(self.redis, ts.retention_s, ts.max_per_key),
            traffic_admin=TrafficStore(admin_redis, ts.retention_s),
            tiers=self.tiers,
            live=LiveSignals(self.redis, self.config.monitoring),
            conversations=ConversationStore(
                self.redis, conv.response_ttl_s, conv.conversation_ttl_s
            ),
            files=FileStore(self.redis, files_url(self.config), self.config.files.storage_options),
            batches=BatchStore(self.redis),
            canary=CanaryRunner(self.redis, self.config, self.backend.canary, self._ready),
            ledger=Ledger(self.redis, self.config.billing.close_after_s),
            billing_stats=lambda: backlog(self.redis),
        )
        self.billing = billing  # the billing deployment (bound so that it is deployed)

    async def _ready(self) -> list[Target]:
        """The served tiers that are ready now."""
        states = await self.tiers.states()
        return [t for t in Catalog(self.config).served() if state_of(states, t).ready]

    async def _health(self) -> dict[str, Any]:
        try:
            await self.redis.ping()
        except Exception as exc:  # report, do not raise: /healthz answers either way
            return {"status": "degraded", "redis": f"unreachable: {type(exc).__name__}"}
        states = await self.tiers.states()
        tiers = {str(t): state_of(states, t).status for t in Catalog(self.config).served()}
        return {"status": "ok", "redis": "ok", "tiers": tiers}

    def __serve_build_asgi_app__(self) -> FastAPI:
        self.fastapi = create_app(self.parts)
        return self.fastapi

    async def drain(self, timeout_s: float) -> int:
        """Before the platform stops: refuse new requests and wait (bounded) for those in flight
        to end and settle; returns how many were left."""
        return int(await self.fastapi.state.meter.quiesce(timeout_s))


def gateway_deployment(cfg: PlatformConfig) -> Any:
    """GatewayDeployment as a Ray Serve deployment with its configured options."""
    g = cfg.gateway
    return serve.deployment(
        GatewayDeployment,
        name="gateway",
        num_replicas=g.replicas,
        max_ongoing_requests=g.max_ongoing_requests,
        ray_actor_options={"num_cpus": g.num_cpus},
    )
