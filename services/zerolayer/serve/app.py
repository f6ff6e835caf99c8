"""The Ray Serve application: the gateway ingress, tokenfix, the chunker, and one deployment per
model tier (plus a tier's short-request group where one is configured)."""

from __future__ import annotations

from typing import Any

from zerolayer.chunker.deployment import chunker_deployment
from zerolayer.config import PlatformConfig
from zerolayer.gateway.deployment import gateway_deployment
from zerolayer.protocol import Target
from zerolayer.replicas.deployment import tier_deployment
from zerolayer.tokenfix.deployment import tokenfix_deployment

__all__ = ["APP_NAME", "deployment_name", "build_app"]

APP_NAME = "zerolayer"


def deployment_name(model: str, tier: str, short: bool = False) -> str:
    """Ray Serve deployment name of a tier (no ':' in deployment names)."""
    return f"{model}--{tier}" + ("--short" if short else "")


def build_app(cfg: PlatformConfig) -> Any:
    """The bound application. cfg.redis.url must be set (embedded Redis already started)."""
    data = cfg.model_dump()
    handles = {}
    for m, mc in cfg.models.items():
        for t, tc in mc.tiers.items():
            handles[Target(m, t)] = tier_deployment(deployment_name(m, t), cfg, m, t).bind(
                data, m, t
            )
            if tc.short_requests is not None:
                name = deployment_name(m, t, short=True)
                deployment = tier_deployment(name, cfg, m, t, short=True)
                handles[Target(m, t, short=True)] = deployment.bind(data, m, t)
    tokenfix = None if cfg.tokenfix.in_gateway else tokenfix_deployment(cfg).bind(data)
    chunker = chunker_deployment(cfg).bind(data)
    return gateway_deployment(cfg).bind(data, handles, tokenfix, chunker)
