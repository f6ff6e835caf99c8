"""The Ray Serve deployment of one model tier."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve

from zerolayer.config import PlatformConfig
from zerolayer.engines import build_engine
from zerolayer.protocol import End, Failed, ReplicaEvent, SamplingSpec
from zerolayer.replicas.artifacts import live_reference, require_artifact, tier_card
from zerolayer.replicas.core import TierReplica
from zerolayer.replicas.live import LiveRecorder
from zerolayer.store.connect import async_client

__all__ = ["TierDeployment"]


class TierDeployment:
    """One replica of '<model>:<tier>'; the engine starts in the constructor, so Ray Serve only
    routes to a replica that has loaded its model."""

    async def __init__(self, config: dict[str, Any], model: str, tier: str):
        cfg = PlatformConfig.model_validate(config)
        mcfg = cfg.models[model]
        model_dir = str(cfg.model_dir(model))
        tc = mcfg.tiers[tier]
        # a missing artifact fails the replica here, at deploy time, naming the folder
        folder = require_artifact(cfg, model, tier)
        card = tier_card(cfg, model, tier)
        reference = live_reference(cfg, model, card)
        engine = build_engine(
            model_dir,
            tc,
            mcfg.max_model_len,
            str(folder) if folder else None,
            cfg.kernels,
            cfg.monitoring,
            reference.get("thresholds"),
        )
        from transformers import AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(model_dir))
        self.replica = TierReplica(f"{model}:{tier}", engine, vocab, mcfg.max_model_len)
        await self.replica.start()
        self.replica.card = {**card, "serving": engine.info()}
        self.live = LiveRecorder(
            async_client(cfg.redis), f"{model}:{tier}", engine, reference, cfg.monitoring
        )
        self.live.start()

    async def stream(self, spec: SamplingSpec) -> AsyncIterator[ReplicaEvent]:
        """Events of one request (streamed through the handle)."""
        async for ev in self.replica.stream(spec):
            yield ev

    async def complete(self, spec: SamplingSpec) -> End | Failed:
        """The whole result of one request."""
        return await self.replica.complete(spec)

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
    name: str, cfg: PlatformConfig, model: str, tier: str, short: bool = False
) -> Any:
    """TierDeployment as a Ray Serve deployment with the tier's scaling options (those of its
    short-request group when `short`)."""
    tc = cfg.models[model].tiers[tier]
    group = tc.short_requests if short and tc.short_requests is not None else tc
    return serve.deployment(
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
    )
