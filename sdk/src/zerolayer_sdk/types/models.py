"""GET /v1/models: every model and tier, with tier cards and status."""

from __future__ import annotations

from typing import Any

from .._models import BaseModel

__all__ = ["TierCard", "Pricing", "Cost", "Model"]


class TierCard(BaseModel):
    """What the collapse compiler measured of a tier (quality against the dense model per text
    domain, the budget it was built to) and what the serving engine reports (hardware
    sparsity, offload, the live signals under `monitoring`). Every field the platform sends is
    kept."""

    tier: str | None = None
    model: str | None = None
    method: str | None = None
    quality: dict[str, Any] | None = None
    budget_ppl_delta: float | None = None
    monitoring: dict[str, Any] | None = None
    flips: dict[str, Any] | None = None  # answers changed against dense, per domain
    cost: dict[str, Any] | None = None  # measured cost of serving it (collapse price)


class Pricing(BaseModel):
    """A tier's prices for the caller's plan, in USD as decimal text: per token (`prompt`,
    `cached_prompt`, `completion`), per 1K tokens (`prompt_per_1k`, ...) and per 1M
    (`prompt_per_1m`, ...); `basis`: "hand", "auto" (the tier's measured cost x the plan's
    margin) or "unmeasured" (auto, not measured yet: priced as `priced_as`)."""

    currency: str = "USD"
    prompt: str | None = None
    cached_prompt: str | None = None
    completion: str | None = None
    prompt_per_1k: str | None = None
    cached_prompt_per_1k: str | None = None
    completion_per_1k: str | None = None
    prompt_per_1m: str | None = None
    cached_prompt_per_1m: str | None = None
    completion_per_1m: str | None = None
    basis: str | None = None
    priced_as: str | None = None


class Cost(BaseModel):
    """What serving a million of a tier's tokens costs the platform (USD as decimal text),
    measured on `hardware_class` at `measured`; `stale` when measured on an earlier artifact."""

    currency: str = "USD"
    prompt: str | None = None
    completion: str | None = None
    hardware_class: str | None = None
    measured: str | None = None
    stale: bool = False


class Model(BaseModel):
    """A model (`smollm2-135m`: the plan's default tier) or one of its tiers
    (`smollm2-135m:masked`) with its state: ready, starting, building (step, progress) or
    failed (reason)."""

    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = "zerolayer"
    description: str | None = None
    root: str | None = None
    tier: str | None = None
    engine: str | None = None
    artifact: str | None = None
    max_model_len: int | None = None
    status: str | None = None
    step: str | None = None
    progress: float | None = None
    reason: str | None = None
    tier_card: TierCard | None = None
    in_plan: bool | None = None
    pricing: Pricing | None = None  # None for a tier outside the caller's plan
    cost_per_1m_tokens: Cost | None = None  # None while not measured
    context_length: int | None = None
    max_output_tokens: int | None = None
    supported_parameters: list[str] | None = None

    @property
    def ready(self) -> bool:
        """Whether the tier takes requests now (a bare model id is always listed ready)."""
        return self.tier is None or self.status in (None, "ready")
