"""Model ids: '<model>:<tier>', or a bare '<model>' that means the plan's default tier (or,
while that one is not ready, the first ready tier of the plan that costs no more)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zerolayer.config import PlatformConfig
from zerolayer.config.pricing import Prices, Quote, per_1m_view
from zerolayer.errors import (
    APIError,
    ModelNotFound,
    PermissionDenied,
    TierBuilding,
    TierFailed,
    TierUnavailable,
)
from zerolayer.protocol import Target
from zerolayer.store.tiers import TierState, state_of

BUILDING_RETRY_S = 30.0  # Retry-After of a tier still building (builds take minutes)
STARTING_RETRY_S = 10.0  # of a tier whose replica is loading the model

__all__ = ["Catalog", "SUPPORTED_PARAMETERS", "pricing", "compute_removed"]

# The sampling parameters every tier takes (the request bodies' fields, less the ones every
# request has or that only take their default: model, messages/prompt, n, logprobs), as model
# aggregators list them
SUPPORTED_PARAMETERS = [
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "user",
    "logprobs",
    "top_logprobs",
    "response_format",
    "structured_outputs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "safety_identifier",
    "prompt_cache_key",
]


def pricing(quote: Quote) -> dict[str, Any]:
    """A tier's prices for a plan as aggregators ask for them: USD per token (decimal text), per
    1K tokens as the API has always stated them, per 1M tokens as people read them, and where
    the price comes from (`basis`: hand, auto = measured cost x the plan's margin, unmeasured =
    auto but not measured yet, priced as `priced_as`)."""
    price = quote.price
    per_1k = {
        "prompt": price.prompt_per_1k,
        "cached_prompt": price.cached,
        "completion": price.completion_per_1k,
    }
    return {
        "currency": "USD",
        **{k: format(v / 1000, "f") for k, v in per_1k.items()},
        **price.applied(),
        **per_1m_view(price),
        "basis": quote.basis,
        **({"priced_as": quote.like} if quote.like else {}),
    }


class Catalog:
    """What is served, and which served tier a request's model id names for a plan."""

    def __init__(self, config: PlatformConfig, prices: Prices | None = None):
        self.config = config
        self.prices = prices or Prices(config)

    def served(self) -> list[Target]:
        """Every served tier."""
        return [Target(m, t) for m, mc in self.config.models.items() for t in mc.tiers]

    def resolve(
        self, model_id: str, plan: str, states: Mapping[str, TierState] | None = None
    ) -> Target:
        """The tier a request's model id names for a plan; 404 if not served, 403 if not in
        the plan. With the tier board's `states`, also one that is ready: a tier named in the
        id that is not gets its 503 (building, failed, starting), never another tier; a bare
        id whose default tier is not ready goes to the first ready tier of the plan that costs
        no more than the default (docs/decisions.md), else gets the default's 503."""
        name, _, tier = model_id.partition(":")
        model = self.config.models.get(name)
        plan_cfg = self.config.plans.get(plan)
        if model is None or (tier and tier not in model.tiers):
            raise ModelNotFound(
                f"the model {model_id!r} does not exist; served: {', '.join(self.list_ids())}",
                param="model",
            )
        if plan_cfg is None:
            raise PermissionDenied(f"this key's plan {plan!r} no longer exists", param="model")
        named = bool(tier)
        tier = tier or plan_cfg.default_tier
        if tier not in plan_cfg.tiers:
            raise PermissionDenied(
                f"tier {tier!r} is not part of plan {plan!r} (tiers: {', '.join(plan_cfg.tiers)})",
                param="model",
            )
        target = Target(name, tier)
        if states is None:
            return target
        state = state_of(states, target)
        if state.ready:
            return target
        if not named:
            for other in _no_dearer(self.prices, plan, name, tier):
                candidate = Target(name, other)
                if state_of(states, candidate).ready:
                    return candidate
        raise not_ready(target, state)

    def list_ids(self) -> list[str]:
        """Bare model ids and '<model>:<tier>' ids, as /v1/models lists them."""
        return [*self.config.models, *map(str, self.served())]

    def cards(
        self,
        created: int,
        tier_cards: dict[Target, dict[str, Any]] | None = None,
        states: Mapping[str, TierState] | None = None,
        plan: str | None = None,
        measured: Mapping[str, Mapping[str, float | None]] | None = None,
    ) -> list[dict[str, Any]]:
        """OpenAI model objects for /v1/models; each tier with its state (status, and a
        build's step and progress) and its tier card when known. With the caller's `plan`,
        also what model aggregators ask a provider for: the plan's prices (null for a tier
        outside it; a bare id has its default tier's), context length, most output tokens and
        the supported parameters. `measured`: per tier id, what the gateways measured of its
        requests (gateway.metrics.tier_stats), shown as its speed."""
        tier_cards, states, measured = tier_cards or {}, states or {}, measured or {}
        plan_cfg = self.config.plans.get(plan) if plan else None
        out = []

        def listing(model_name: str, model: Any, tier: str | None) -> dict[str, Any]:
            if plan_cfg is None:
                return {}
            tier = tier or plan_cfg.default_tier
            assert plan is not None
            quote = self.prices.quote(plan, model_name, tier)
            return {
                "in_plan": tier in plan_cfg.tiers,
                "pricing": pricing(quote) if quote else None,
                "context_length": model.max_model_len,
                # a prompt takes at least one token of the context
                "max_output_tokens": model.max_model_len - 1,
                "supported_parameters": SUPPORTED_PARAMETERS,
            }

        for name, model in self.config.models.items():
            out.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "zerolayer",
                    "description": model.description,
                    "max_model_len": model.max_model_len,
                    **listing(name, model, None),
                }
            )
            for tier, tc in model.tiers.items():
                out.append(
                    {
                        "id": str(Target(name, tier)),
                        "object": "model",
                        "created": created,
                        "owned_by": "zerolayer",
                        "root": name,
                        "tier": tier,
                        "engine": tc.engine,
                        "artifact": tc.artifact,
                        "max_model_len": model.max_model_len,
                        **listing(name, model, tier),
                        **state_of(states, Target(name, tier)).public(),
                        "speed": _speed(measured.get(str(Target(name, tier)))),
                        "compute_removed": compute_removed(tier_cards.get(Target(name, tier))),
                        "cost_per_1m_tokens": cost_per_1m(tier_cards.get(Target(name, tier))),
                        "tier_card": tier_cards.get(Target(name, tier)),
                    }
                )
        return out


def cost_per_1m(card: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What serving a million of the tier's tokens costs the platform, from its card's measured
    cost: prompt and completion (USD, decimal text), the hardware class and when it was
    measured (None while not measured)."""
    cost = (card or {}).get("cost")
    if not cost:
        return None
    per = cost.get("cost_per_1m_tokens") or {}
    return {
        "currency": "USD",
        "prompt": per.get("prompt"),
        "completion": per.get("completion"),
        "hardware_class": cost.get("hardware_class"),
        "measured": cost.get("measured"),
        "stale": bool(cost.get("stale")),
    }


def compute_removed(card: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a tier's artifact takes off the dense model's work, from its card: a share and what
    it is a share of (None while no card is known)."""
    if not card:
        return None
    if "mlp_flops_removed" in card:  # masked, pruned: MLP channels cut
        return {"share": card["mlp_flops_removed"], "of": "MLP FLOPs, removed"}
    if "weights_24" in card:  # 2:4: half of the chosen weights skipped by sparse tensor cores
        return {
            "share": round(card["weights_24"] / 2, 5),
            "of": "weight multiply-adds, skipped on 2:4 sparse tensor cores",
        }
    if "activation_sparsity" in card:  # dynamic: measured per token
        return {
            "share": card["activation_sparsity"],
            "of": "MLP down_proj inputs, skipped per token (measured)",
        }
    return {"share": 0.0, "of": "nothing: the dense model"}


def _speed(stats: Mapping[str, float | None] | None) -> dict[str, Any]:
    """A tier's measured speed: output tokens per second after the first token, seconds to the
    first token (means over its requests so far; None before any), and how many requests."""
    stats = stats or {}
    tps, ttft = stats.get("tokens_per_s"), stats.get("ttft_s")
    return {
        "tokens_per_s": None if tps is None else round(tps, 2),
        "ttft_s": None if ttft is None else round(ttft, 4),
        "requests": int(stats.get("requests") or 0),
    }


def _no_dearer(prices: Prices, plan: str, model: str, default: str) -> list[str]:
    """The plan's other tiers, in its order, that cost no more than its default tier now (none
    while the default has no price)."""
    base = prices.price(plan, model, default)
    if base is None:
        return []
    out = []
    for t in prices.cfg.plans[plan].tiers:
        p = prices.price(plan, model, t) if t != default else None
        if (
            p
            and p.prompt_per_1k <= base.prompt_per_1k
            and p.completion_per_1k <= base.completion_per_1k
        ):
            out.append(t)
    return out


def not_ready(target: Target, state: TierState) -> APIError:
    """The 503 of a tier that is not ready: building (Retry-After), failed, or starting."""
    if state.status == "building":
        where = state.step or "queued"
        if state.progress is not None:
            where += f", {state.progress:.0%}"
        return TierBuilding(
            f"the tier {target} is being built ({where}); it is served as soon as its "
            "artifact is ready",
            BUILDING_RETRY_S,
        )
    if state.status == "failed":
        return TierFailed(
            f"the tier {target} failed to build ({state.reason or 'no reason given'}); the "
            "next start of the platform builds it again"
        )
    return TierUnavailable(
        f"the tier {target} is starting (its replica is loading the model); retry shortly",
        STARTING_RETRY_S,
    )
