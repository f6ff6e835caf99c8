"""The Ray Serve application: one gateway ingress and one deployment per model tier."""

from __future__ import annotations

from typing import Any

from zerolayer.config import PlatformConfig
from zerolayer.gateway.catalog import tier_key
from zerolayer.gateway.deployment import gateway_deployment
from zerolayer.replicas.deployment import tier_deployment

__all__ = ["APP_NAME", "deployment_name", "build_app"]

APP_NAME = "zerolayer"


def deployment_name(model: str, tier: str) -> str:
    """Ray Serve deployment name of a tier (no ':' in deployment names)."""
    return f"{model}--{tier}"


def build_app(cfg: PlatformConfig) -> Any:
    """The bound application. cfg.redis.url must be set (embedded Redis already started)."""
    data = cfg.model_dump()
    handles = {
        tier_key(m, t): tier_deployment(deployment_name(m, t), cfg, m, t).bind(data, m, t)
        for m, mc in cfg.models.items()
        for t in mc.tiers
    }
    return gateway_deployment(cfg).bind(data, handles)
