"""What each plan charges for each served tier, now: its hand prices, and its `auto` prices from
the tiers' measured costs (artifacts.cost, written by `zerolayer collapse price`).

An `auto` price is the tier's measured cost per 1M tokens on the platform's hardware class
times the plan's margin, rounded up to the cent per 1M (never under cost x margin). A tier
priced `auto` whose cost is not measured yet on that class is priced as the dearest tier of its
plan whose price is known (a tier is never sold under what nobody measured); with none known,
it has no price and is not sold. Measured costs are read again at most every `ttl_s`, so a tier
measured while the platform runs (a background build) gets its auto price within that.

A hand price under the measured cost of its tier is refused at start (`below_cost`), unless the
plan says `below_cost: true` (a free plan, a promotion)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from zerolayer.artifacts.cost import read_cost
from zerolayer.config.plans import TierPrice
from zerolayer.errors import ConfigError

__all__ = ["Quote", "Prices", "auto_price", "per_1m", "per_1m_view"]

_CENT = Decimal("0.01")


def per_1m(per_1k: Decimal) -> str:
    """A price per 1K tokens as decimal text per 1M tokens."""
    return format((per_1k * 1000).normalize(), "f")


def per_1m_view(price: TierPrice) -> dict[str, str]:
    """A tier price per 1M tokens as people read it: prompt, cached prompt and completion."""
    return {
        "prompt_per_1m": per_1m(price.prompt_per_1k),
        "cached_prompt_per_1m": per_1m(price.cached),
        "completion_per_1m": per_1m(price.completion_per_1k),
    }


def auto_price(cost_per_1m: Mapping[str, Any], margin: Decimal) -> TierPrice:
    """cost x margin per 1M tokens, rounded up to a cent, as a TierPrice (per 1K)."""

    def part(key: str) -> Decimal:
        usd = (Decimal(str(cost_per_1m[key])) * margin).quantize(_CENT, rounding=ROUND_CEILING)
        return usd / 1000

    return TierPrice(prompt_per_1k=part("prompt"), completion_per_1k=part("completion"))


@dataclass(frozen=True)
class Quote:
    """A plan's price of a tier and where it comes from: "hand" (the plan's own figures),
    "auto" (measured cost x margin) or "unmeasured" (auto, not measured yet: priced as
    `like`)."""

    price: TierPrice
    basis: str
    like: str | None = None


def _measured(cfg: Any, model: str, tier: str) -> dict[str, Any] | None:
    """The tier's measured cost per 1M tokens on the platform's hardware class, or None."""
    cost = read_cost(cfg.artifact_root(model), tier)
    if not cost or cost.get("hardware_class") != cfg.hardware.hardware_class:
        return None
    per = cost.get("cost_per_1m_tokens") or {}
    if per.get("prompt") is None or per.get("completion") is None:
        return None
    return dict(per)


class Prices:
    """Each plan's price of each served tier (module doc), with the measured costs it reads
    kept for `ttl_s`."""

    def __init__(
        self,
        cfg: Any,
        ttl_s: float = 30.0,
        costs: Callable[[Any, str, str], dict[str, Any] | None] = _measured,
    ):
        self.cfg, self.ttl_s, self._costs = cfg, ttl_s, costs
        self._read: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}

    def cost(self, model: str, tier: str) -> dict[str, Any] | None:
        """The tier's measured cost per 1M tokens ({"prompt", "completion"}) or None."""
        now = time.monotonic()
        at, got = self._read.get((model, tier), (float("-inf"), None))
        if now - at >= self.ttl_s:
            got = self._costs(self.cfg, model, tier)
            self._read[(model, tier)] = (now, got)
        return got

    def quote(self, plan: str, model: str, tier: str) -> Quote | None:
        """The plan's price of the tier and its basis; None when the tier is outside the plan
        or cannot be priced (auto, and nothing of the plan has a known price)."""
        pc = self.cfg.plans[plan]
        if tier not in pc.tiers:
            return None
        if isinstance(set_ := pc.prices[tier], TierPrice):
            return Quote(set_, "hand")
        if (auto := self._known(plan, model, tier)) is not None:
            return Quote(auto, "auto")
        known = [(t, q) for t in pc.tiers if t != tier and (q := self._known(plan, model, t))]
        if not known:
            return None
        like, dearest = max(known, key=lambda kq: (kq[1].completion_per_1k, kq[1].prompt_per_1k))
        return Quote(dearest, "unmeasured", like)

    def _known(self, plan: str, model: str, tier: str) -> TierPrice | None:
        """The plan's hand price of the tier, or its auto price when its cost is measured."""
        pc = self.cfg.plans[plan]
        set_ = pc.prices[tier]
        if isinstance(set_, TierPrice):
            return set_
        cost = self.cost(model, tier)
        return None if cost is None else auto_price(cost, pc.margin)

    def price(self, plan: str, model: str, tier: str) -> TierPrice | None:
        """The plan's price of the tier (None: not in the plan, or not priced yet)."""
        q = self.quote(plan, model, tier)
        return None if q is None else q.price

    def below_cost(self) -> list[str]:
        """Every hand price under its tier's measured cost in a plan that does not allow it."""
        out = []
        for pname, pc in self.cfg.plans.items():
            if pc.below_cost:
                continue
            for model in self.cfg.models:
                for tier in pc.tiers:
                    set_ = pc.prices[tier]
                    cost = self.cost(model, tier) if tier in self.cfg.models[model].tiers else None
                    if not isinstance(set_, TierPrice) or cost is None:
                        continue
                    for kind, per_1k in (
                        ("prompt", set_.prompt_per_1k),
                        ("completion", set_.completion_per_1k),
                    ):
                        if Decimal(per_1m(per_1k)) < Decimal(str(cost[kind])):
                            out.append(
                                f"plan {pname!r} sells {model}:{tier} {kind} tokens at "
                                f"${per_1m(per_1k)} per 1M, under their measured cost of "
                                f"${cost[kind]} per 1M on {self.cfg.hardware.hardware_class}"
                            )
        return out

    def refuse_below_cost(self) -> None:
        """ConfigError naming every hand price under cost (see below_cost)."""
        if problems := self.below_cost():
            raise ConfigError(
                "prices under measured cost:\n  "
                + "\n  ".join(problems)
                + "\nraise them, price the tier `auto`, or set `below_cost: true` on the plan"
            )
