"""The gateway as a Ray Serve ingress deployment, with handles to every tier replica."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from zerolayer.config import PlatformConfig
from zerolayer.gateway.api import create_app
from zerolayer.gateway.limits import Limiter
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
from zerolayer.tokenfix.service import Tokenfix

__all__ = ["HandleBackend", "GatewayDeployment", "gateway_deployment"]


class HandleBackend:
    """Sends requests to tokenfix, the chunker and the tier replicas through Ray Serve handles."""

    def __init__(
        self,
        handles: dict[Target, DeploymentHandle],
        tokenfix: DeploymentHandle | Tokenfix,
        chunker: DeploymentHandle,
    ):
        self.handles = handles
        self.tokenfix = tokenfix
        self.chunker = chunker
        self._streams = {k: h.options(stream=True) for k, h in handles.items()}
        self._cards: dict[Target, dict[str, Any]] = {}

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

    async def stream(self, target: Target, spec: SamplingSpec) -> AsyncIterator[ReplicaEvent]:
        gen = self._streams[target].stream.remote(spec)
        finished = False
        try:
            async for ev in gen:
                yield ev
            finished = True
        finally:
            if not finished:
                gen.cancel()  # client gone: the replica's generator is closed, the engine aborts

    async def complete(self, target: Target, spec: SamplingSpec) -> End | Failed:
        return await self.handles[target].complete.remote(spec)

    async def cards(self) -> dict[Target, dict[str, Any]]:
        """Each tier's card, asked of one of its replicas once and then kept (a tier's artifact
        and engine do not change while the application runs)."""
        missing = [t for t in self.handles if t not in self._cards and not t.short]
        if missing:
            got = await asyncio.gather(
                *(self.handles[t].card.remote() for t in missing), return_exceptions=True
            )
            for t, card in zip(missing, got, strict=True):
                if not isinstance(card, BaseException):
                    self._cards[t] = card
        return dict(self._cards)


@serve.ingress()
class GatewayDeployment:
    """OpenAI-compatible front door: keys, limits, admission, routing to tiers, SSE, admin."""

    def __init__(
        self,
        config: dict[str, Any],
        handles: dict[Target, DeploymentHandle],
        tokenfix: DeploymentHandle | None,
        chunker: DeploymentHandle,
    ):
        self.config = PlatformConfig.model_validate(config)
        self.redis = async_client(
            self.config.redis, health_check_interval=30, socket_timeout=5, socket_connect_timeout=2
        )
        self.keys = AsyncKeyStore(self.redis)
        if tokenfix is None:  # tokenfix.in_gateway: the same code in this process
            tokenfix = Tokenfix({m: self.config.model_dir(m) for m in self.config.models})
        self.backend = HandleBackend(handles, tokenfix, chunker)
        self.parts = GatewayParts(
            backend=self.backend,
            lookup_key=self.keys.lookup,
            config=self.config,
            health=self._health,
            limiter=Limiter(self.redis, self.config.gateway.concurrency_lease_s),
            metrics=Metrics(self.redis),
            keys=KeyStore(sync_client(self.config.redis)),
        )

    async def _health(self) -> dict[str, Any]:
        try:
            await self.redis.ping()
        except Exception as exc:  # report, do not raise: /healthz answers either way
            return {"status": "degraded", "redis": f"unreachable: {type(exc).__name__}"}
        tiers = sorted(str(t) for t in self.backend.handles if not t.short)
        return {"status": "ok", "redis": "ok", "tiers": tiers}

    def __serve_build_asgi_app__(self) -> FastAPI:
        self.fastapi = create_app(self.parts)
        return self.fastapi

    async def drain(self, timeout_s: float) -> int:
        """Before the platform stops: refuse new requests and wait (bounded) for those in flight
        to end and settle; returns how many were left."""
        return int(await self.fastapi.state.flow.quiesce(timeout_s))


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
