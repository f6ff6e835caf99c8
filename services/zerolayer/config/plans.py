"""Customer plans: tiers, prices, per-key limits and priority (plans.yaml)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Literal

from pydantic import Field, field_validator, model_validator

from zerolayer.config.base import Strict

__all__ = [
    "AUTO",
    "NANOS_PER_USD",
    "TierPrice",
    "PlanLimits",
    "PlanConfig",
    "nanos_usd",
    "usd_nanos",
    "usd_text",
]


NANOS_PER_USD = 10**9  # money is counted in integer nano-dollars everywhere
AUTO = "auto"  # a tier priced from its measured cost (config.pricing)
_PER_TOKEN = Decimal(NANOS_PER_USD) / 1000  # nanos per token for a price of 1 USD per 1K
_NANO_PER_1K = 1 / _PER_TOKEN  # a price of one nano-dollar per token, in USD per 1K


def usd_nanos(usd: Decimal) -> int:
    """A dollar amount in nano-dollars (exact: amounts have at most 9 decimals)."""
    return int(usd * NANOS_PER_USD)


def nanos_usd(nanos: int) -> Decimal:
    """Nano-dollars as an exact dollar amount, written with at least cents and no trailing zeros
    past them (48_000_000 -> 0.048, 10**9 -> 1.00)."""
    exact = Decimal(nanos).scaleb(-9).normalize()
    exponent = exact.as_tuple().exponent  # an int for a finite amount ('n'/'N'/'F': not one)
    return exact if isinstance(exponent, int) and exponent < -2 else exact.quantize(Decimal("0.01"))


def usd_text(nanos: int) -> str:
    """Nano-dollars as a dollar amount's text, never in exponent form ("0.000000005")."""
    return format(nanos_usd(nanos), "f")


def _exact_price(value: Decimal) -> Decimal:
    nanos = value * _PER_TOKEN
    if nanos != nanos.to_integral_value():
        raise ValueError(
            f"{value} USD per 1K tokens is not a whole number of nano-dollars per token "
            "(at most 6 decimals)"
        )
    return value


class TierPrice(Strict):
    """What one tier costs a plan's keys, in US dollars per 1,000 tokens: exact decimals (at
    most 6 places, a whole number of nano-dollars per token), never floats."""

    prompt_per_1k: Decimal = Field(ge=0, description="USD per 1K prompt tokens")
    completion_per_1k: Decimal = Field(ge=0, description="USD per 1K completion tokens")
    cached_prompt_per_1k: Decimal | None = Field(
        default=None,
        ge=0,
        description="USD per 1K prompt tokens the engine served from its prefix cache; "
        "default: a tenth of the prompt price",
    )

    @field_validator("prompt_per_1k", "completion_per_1k", "cached_prompt_per_1k", mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        # YAML reads 0.1 as a float: take its shortest text, never its binary expansion
        return Decimal(repr(value)) if isinstance(value, float) else value

    @field_validator("prompt_per_1k", "completion_per_1k", "cached_prompt_per_1k")
    @classmethod
    def _whole_nanos(cls, value: Decimal | None) -> Decimal | None:
        return None if value is None else _exact_price(value)

    @property
    def cached(self) -> Decimal:
        """The price of a cached prompt token's thousand: as set, else a tenth of the prompt
        price (as OpenAI bills a cached read), rounded to the nano-dollar per token."""
        if self.cached_prompt_per_1k is not None:
            return self.cached_prompt_per_1k
        return (self.prompt_per_1k / 10).quantize(_NANO_PER_1K, rounding=ROUND_HALF_UP)

    def nanos(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> int:
        """The exact cost of a request in nano-dollars (1e-9 USD); `cached_tokens` of the
        prompt tokens are priced at the cached price."""
        fresh = prompt_tokens - cached_tokens
        return int(
            (
                fresh * self.prompt_per_1k
                + cached_tokens * self.cached
                + completion_tokens * self.completion_per_1k
            )
            * _PER_TOKEN
        )

    def batched(self, share: Decimal) -> TierPrice:
        """The price of a batch's request: `share` of each price (the cached one too),
        rounded to the nano-dollar per token."""

        def part(value: Decimal) -> Decimal:
            return (value * share).quantize(_NANO_PER_1K, rounding=ROUND_HALF_UP)

        return TierPrice(
            prompt_per_1k=part(self.prompt_per_1k),
            completion_per_1k=part(self.completion_per_1k),
            cached_prompt_per_1k=part(self.cached),
        )

    def applied(self) -> dict[str, str]:
        """The prices as a usage event and an invoice state them (decimal strings)."""
        return {
            "prompt_per_1k": str(self.prompt_per_1k),
            "cached_prompt_per_1k": str(self.cached),
            "completion_per_1k": str(self.completion_per_1k),
        }


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
    api_requests_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Requests per minute to every other route (usage, keys, conversations, "
        "stored responses, models): counted apart from the model calls' requests_per_minute",
    )
    monthly_budget_usd: Decimal | None = Field(
        default=None, ge=0, description="Spend per key and calendar month (UTC), in USD"
    )
    stored_bytes: int | None = Field(
        default=None,
        ge=1,
        description="Bytes of stored responses and conversations per tenant (its keys share "
        "it); a write past it is a 403 storage_quota_exceeded",
    )
    stored_objects: int | None = Field(
        default=None,
        ge=1,
        description="Stored responses and conversations per tenant (its keys share it)",
    )

    @field_validator("monthly_budget_usd", mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        return Decimal(repr(value)) if isinstance(value, float) else value

    @field_validator("monthly_budget_usd")
    @classmethod
    def _cents_or_finer(cls, value: Decimal | None) -> Decimal | None:
        if value is not None and value != value.quantize(Decimal("1e-9")):
            raise ValueError("a budget has at most 9 decimals")
        return value

    @property
    def budget_nanos(self) -> int | None:
        """The monthly budget in nano-dollars (None: no budget)."""
        return None if self.monthly_budget_usd is None else usd_nanos(self.monthly_budget_usd)


class PlanConfig(Strict):
    """A customer plan: its tiers, prices, limits and priority under load."""

    description: str = Field(default="", description="What the plan is for")
    tiers: list[str] = Field(min_length=1, description="Tiers this plan's keys may call")
    default_tier: str = Field(description="Tier a bare model id resolves to")
    prices: dict[str, TierPrice | Literal["auto"]] = Field(
        default_factory=dict,
        description="Price per tier; every tier of the plan needs one: USD per 1K tokens, or "
        "`auto` (the tier's measured cost x margin)",
    )
    margin: Decimal = Field(
        default=Decimal("3"),
        gt=0,
        description="An `auto` price is the tier's measured cost per 1M tokens times this, "
        "rounded up to a cent",
    )
    below_cost: bool = Field(
        default=False,
        description="Allow hand prices under the tiers' measured cost (else refused at start)",
    )
    limits: PlanLimits = Field(default_factory=PlanLimits, description="Per-key limits")
    batch_price_share: Decimal = Field(
        default=Decimal("0.5"),
        gt=0,
        le=1,
        description="What a request of a batch (the Batch API) costs, as a share of the "
        "interactive price: half by default, as OpenAI bills batches",
    )
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

    @field_validator("margin", mode="before")
    @classmethod
    def _margin_text(cls, value: object) -> object:
        return Decimal(repr(value)) if isinstance(value, float) else value

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
