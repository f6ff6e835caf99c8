"""The Ray Serve applications: the platform's own (the gateway ingress, tokenfix, the chunker,
billing) and one per tier replica group (a tier, and its short-request group where one is
configured), named as its deployment. A tier's application is deployed when its artifact is
ready, so tiers join the running platform one by one; the gateway finds them by name
(gateway.deployment)."""

from __future__ import annotations

from typing import Any

from zerolayer.artifacts import card_stamp
from zerolayer.billing.deployment import billing_deployment
from zerolayer.chunker.deployment import chunker_deployment
from zerolayer.config import PlatformConfig
from zerolayer.gateway.deployment import deployment_name, gateway_deployment
from zerolayer.replicas.deployment import tier_deployment
from zerolayer.tokenfix.deployment import tokenfix_deployment

__all__ = ["APP_NAME", "deployment_name", "build_app", "tier_app_names", "tier_apps"]

APP_NAME = "zerolayer"


def build_app(cfg: PlatformConfig) -> Any:
    """The platform's bound application (no tier in it). cfg.redis.url must be set (embedded
    Redis already started)."""
    data = cfg.model_dump()
    tokenfix = None if cfg.tokenfix.in_gateway else tokenfix_deployment(cfg).bind(data)
    chunker = chunker_deployment(cfg).bind(data)
    billing = billing_deployment(cfg).bind(data)
    return gateway_deployment(cfg).bind(data, tokenfix, chunker, billing)


def _groups(cfg: PlatformConfig, model: str, tier: str) -> list[bool]:
    """The tier's replica groups: its own, and its short-request group if it has one."""
    return [False] + ([True] if cfg.models[model].tiers[tier].short_requests else [])


def tier_app_names(cfg: PlatformConfig, model: str, tier: str) -> list[str]:
    """The names of the tier's applications (what tier_apps would build)."""
    return [deployment_name(model, tier, short) for short in _groups(cfg, model, tier)]


def tier_apps(cfg: PlatformConfig, model: str, tier: str) -> dict[str, Any]:
    """The bound applications of one tier, by application name: the tier, and its short-request
    group if it has one."""
    data = cfg.model_dump()
    stamp = card_stamp(cfg.artifact_dir(model, tier))  # which artifact: see TierDeployment
    out = {}
    for short in _groups(cfg, model, tier):
        name = deployment_name(model, tier, short)
        out[name] = tier_deployment(name, cfg, model, tier, short, stamp).bind(data, model, tier)
    return out
