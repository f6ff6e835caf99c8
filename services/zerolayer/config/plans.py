"""Customer plans: tiers, prices, per-key limits and priority (plans.yaml)."""

from __future__ import annotations

import math

from pydantic import Field, model_validator

from zerolayer.config.base import Strict

__all__ = ["TierPrice", "PlanLimits", "PlanConfig"]


class TierPrice(Strict):
    """What one tier costs a plan's keys, in US dollars per 1,000 tokens."""

    prompt_per_1k: float = Field(ge=0, description="USD per 1K prompt tokens")
    completion_per_1k: float = Field(ge=0, description="USD per 1K completion tokens")

    def micros(self, prompt_tokens: int, completion_tokens: int) -> int:
        """The cost of a request in micro-dollars (1e-6 USD), rounded up."""
        exact = prompt_tokens * self.prompt_per_1k + completion_tokens * self.completion_per_1k
        return math.ceil(round(exact * 1000, 6))


class PlanLimits(Strict):
    """Per-key limits of a plan; a missing value means no limit."""

    requests_per_minute: int | None = Field(default=None, ge=1, description="Requests per minute")
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Prompt + completion tokens per minute; a request reserves prompt tokens + "
        "max_tokens at admission and the reservation is reconciled when it ends",
    )
    concurrent_requests: int | None = Field(
        default=None, ge=1, description="Requests of one key in flight at once"
    )
    monthly_budget_usd: float | None = Field(
        default=None, ge=0, description="Spend per key and calendar month (UTC), in USD"
    )


class PlanConfig(Strict):
    """A customer plan: its tiers, prices, limits and priority under load."""

    description: str = Field(default="", description="What the plan is for")
    tiers: list[str] = Field(min_length=1, description="Tiers this plan's keys may call")
    default_tier: str = Field(description="Tier a bare model id resolves to")
    prices: dict[str, TierPrice] = Field(
        default_factory=dict, description="Price per tier; every tier of the plan needs one"
    )
    limits: PlanLimits = Field(default_factory=PlanLimits, description="Per-key limits")
    priority: int = Field(
        default=0,
        description="Higher is served first under load: admission control sheds the lowest "
        "priorities first",
    )
    sample_traffic: bool = Field(
        default=False,
        description="Keep a sample of this plan's prompts for recalibration (a key's own "
        "setting wins); off unless the plan's customers agreed to it",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PlanConfig:
        if self.default_tier not in self.tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not in tiers {self.tiers}")
        unpriced = [t for t in self.tiers if t not in self.prices]
        if unpriced:
            raise ValueError(f"no price for tier(s) {', '.join(unpriced)} (add them to prices)")
        stray = sorted(set(self.prices) - set(self.tiers))
        if stray:
            raise ValueError(f"prices name tier(s) {', '.join(stray)} that are not in tiers")
        return self
