"""The Ray Serve deployment of one model tier."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import AsyncGenerator
from typing import Any

from ray import serve

from zerolayer.artifacts import card_stamp
from zerolayer.config import PlatformConfig
from zerolayer.engines import build_engine
from zerolayer.protocol import End, Failed, ReplicaEvent, SamplingSpec
from zerolayer.ray_private import versioned
from zerolayer.replicas.artifacts import live_reference, require_artifact, tier_card
from zerolayer.replicas.core import TierReplica
from zerolayer.replicas.live import LiveRecorder
from zerolayer.replicas.routing import ROUTER
from zerolayer.store.abandoned import AbandonedReports
from zerolayer.store.connect import async_client

__all__ = ["TierDeployment"]

log = logging.getLogger(__name__)


class TierDeployment:
    """One replica of '<model>:<tier>'; the engine starts in the constructor, so Ray Serve only
    routes to a replica that has loaded its model."""

    # Ray Serve awaits an async constructor before the replica takes requests
    async def __init__(self, config: dict[str, Any], model: str, tier: str):  # type: ignore[misc]
        self.cfg = cfg = PlatformConfig.model_validate(config)
        self.model, self.tier = model, tier
        mcfg = cfg.models[model]
        engine, card, reference = self._load()
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(str(cfg.model_dir(model))))
        self.replica = TierReplica(f"{model}:{tier}", engine, vocab, mcfg.max_model_len)
        await self.replica.start()
        self.replica.card = {**card, "serving": engine.info()}
        client = async_client(cfg.redis)
        self.replica.on_abandoned = AbandonedReports(client)  # what ran, for its gateway
        self.live = LiveRecorder(
            client,
            f"{model}:{tier}",
            engine,
            reference,
            cfg.monitoring,
            stamp=self.stamp,
        )
        self.live.start()
        self._swapping = asyncio.Lock()

    def _load(self) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The engine (not started) of the artifact in the tier's folder now, its card and its
        calibrated live reference."""
        cfg, model, tier = self.cfg, self.model, self.tier
        mcfg = cfg.models[model]
        # a missing artifact fails the replica here, at deploy time, naming the folder
        folder = require_artifact(cfg, model, tier)
        self.stamp = card_stamp(folder)
        card = tier_card(cfg, model, tier)
        reference = live_reference(cfg, model, card)
        engine = build_engine(
            str(cfg.model_dir(model)),
            mcfg.tiers[tier],
            mcfg.max_model_len,
            str(folder) if folder else None,
            cfg.kernels,
            cfg.monitoring,
            reference.get("thresholds"),
        )
        return engine, card, reference

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Called by Ray Serve after start and whenever the launcher sees another artifact in
        the tier's folder (promoted or rolled back): load it beside the running engine, serve
        the next requests from it, and let the old engine finish its requests in flight. A
        load that fails keeps the old artifact serving."""
        async with self._swapping:
            folder = self.cfg.artifact_dir(self.model, self.tier)
            if card_stamp(folder) in (None, self.stamp):
                return  # the artifact this replica serves, or none readable (mid-swap)
            old_stamp = self.stamp
            try:
                engine, card, reference = self._load()
                await engine.start()
            except Exception:
                log.exception("tier %s:%s: the new artifact failed to load", self.model, self.tier)
                self.stamp = old_stamp
                return
            card = {**card, "serving": engine.info()}
            drain_s = self.cfg.gateway.request_timeout_s
            swap = asyncio.ensure_future(self.replica.swap(engine, card, drain_s))
            await self.live.retarget(engine, reference, self.stamp)
            log.warning(
                "tier %s:%s now serves artifact %s (was %s)",
                self.model,
                self.tier,
                self.stamp,
                old_stamp,
            )
            self._draining = swap  # the old engine shuts down once its requests are done

    async def stream(self, spec: SamplingSpec) -> AsyncGenerator[ReplicaEvent, None]:
        """Events of one request (streamed through the handle)."""
        async for ev in self.replica.stream(spec):
            yield ev

    async def complete(self, spec: SamplingSpec) -> End | Failed:
        """The whole result of one request."""
        return await self.replica.complete(spec)

    async def complete_many(
        self, specs: list[SamplingSpec]
    ) -> AsyncGenerator[list[tuple[int, End | Failed]], None]:
        """The whole results of several requests (a batch's), run at once: (index, result) of
        those that ended, as they end (streamed through the handle)."""
        async for ended in self.replica.complete_each(specs):
            yield ended

    async def check_health(self) -> None:
        """Called by Ray Serve; raising marks the replica unhealthy and replaces it."""
        await self.replica.check_health()

    async def card(self) -> dict[str, Any]:
        """The tier card: artifact, measured quality change, and how this replica runs it."""
        return self.replica.card

    async def stats(self) -> dict[str, Any]:
        """Engine counters."""
        return await self.replica.engine.stats()

    async def canary(self, texts: list[str], top_k: int) -> list[dict[str, Any]]:
        """The engine's next-token distributions over the canary texts (low priority)."""
        return await self.replica.engine.canary(texts, top_k)


def tier_deployment(
    name: str,
    cfg: PlatformConfig,
    model: str,
    tier: str,
    short: bool = False,
    stamp: str | None = None,
) -> Any:
    """TierDeployment as a Ray Serve deployment with the tier's scaling options (those of its
    short-request group when `short`)."""
    tc = cfg.models[model].tiers[tier]
    group = tc.short_requests if short and tc.short_requests is not None else tc
    deployment = serve.deployment(
        TierDeployment,
        name=name,
        max_ongoing_requests=group.max_ongoing_requests,
        autoscaling_config=group.autoscaling_config.model_dump(exclude_none=True),
        ray_actor_options={
            **group.ray_actor_options.model_dump(),
            # vLLM's start-up chatter goes to the console through Ray; warnings are enough there.
            "runtime_env": {"env_vars": {"VLLM_LOGGING_LEVEL": "WARNING"}},
        },
        health_check_period_s=10,
        health_check_timeout_s=30,
        # a conversation's requests go to the replica that holds its prefix (replicas/routing.py);
        # Serve refuses a custom router on an application's ingress while HAProxy is on
        request_router_config={} if haproxy_on(cfg) else {"request_router_class": ROUTER},
        # the artifact's stamp: a new one makes Serve call reconfigure on the running replicas
        # (a lightweight update, no restart), which swap the artifact in place
        user_config={"artifact_stamp": stamp},
    )
    # A fixed code version: Serve draws a random one for each deploy otherwise, which restarts
    # every replica (a rolling update that stops a one-replica tier before its successor runs).
    # With it, a new artifact stamp alone is a lightweight update: reconfigure, no restart;
    # a change of the platform config still restarts them. (Serve only lets its own code set
    # the version: a private API, kept in zerolayer.ray_private.)
    return versioned(deployment, _version(cfg, model, tier, short))


def haproxy_on(cfg: PlatformConfig) -> bool:
    """Whether Serve runs with HAProxy here: the platform's setting, or the environment Ray
    reads it from (a cluster's)."""
    env = os.environ.get("RAY_SERVE_ENABLE_HA_PROXY", "0").strip().lower() in ("1", "true")
    return env or (cfg.ray.throughput_optimized and cfg.ray.haproxy)


def _version(cfg: PlatformConfig, model: str, tier: str, short: bool) -> str:
    data = json.dumps([cfg.model_dump(mode="json"), model, tier, short], sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]
