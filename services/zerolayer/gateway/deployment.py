"""The gateway as a Ray Serve ingress deployment, with handles to every tier replica."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from zerolayer.config import PlatformConfig
from zerolayer.gateway.api import create_app
from zerolayer.gateway.catalog import Catalog
from zerolayer.store.keys import AsyncKeyStore

__all__ = ["HandleBackend", "GatewayDeployment", "gateway_deployment"]


class HandleBackend:
    """Sends requests to tier replicas through Ray Serve handles."""

    def __init__(self, handles: dict[str, DeploymentHandle]):
        self.handles = handles
        self._streams = {k: h.options(stream=True) for k, h in handles.items()}
        self._cards: dict[str, dict[str, Any]] = {}

    async def stream(self, target: str, req: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        gen = self._streams[target].stream.remote(req)
        finished = False
        try:
            async for ev in gen:
                yield ev
            finished = True
        finally:
            if not finished:
                gen.cancel()  # client gone: the replica's generator is closed, the engine aborts

    async def complete(self, target: str, req: dict[str, Any]) -> dict[str, Any]:
        return await self.handles[target].complete.remote(req)

    async def cards(self) -> dict[str, dict[str, Any]]:
        """Each tier's card, asked of one of its replicas once and then kept (a tier's artifact
        and engine do not change while the application runs)."""
        missing = [t for t in self.handles if t not in self._cards]
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
    """OpenAI-compatible front door: auth, routing to tiers, SSE."""

    def __init__(self, config: dict[str, Any], handles: dict[str, DeploymentHandle]):
        self.config = PlatformConfig.model_validate(config)
        self.redis = aioredis.from_url(self.config.redis.url or "", health_check_interval=30)
        self.keys = AsyncKeyStore(self.redis)
        self.backend = HandleBackend(handles)

    async def _health(self) -> dict[str, Any]:
        try:
            await self.redis.ping()
        except Exception as exc:  # report, do not raise: /healthz answers either way
            return {"status": "degraded", "redis": f"unreachable: {type(exc).__name__}"}
        return {"status": "ok", "redis": "ok", "tiers": sorted(self.backend.handles)}

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(
            self.backend, self.keys.lookup, Catalog(self.config), self.config.gateway, self._health
        )


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
