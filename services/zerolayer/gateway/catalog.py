"""Model ids: '<model>:<tier>', or a bare '<model>' that means the plan's default tier."""

from __future__ import annotations

from typing import Any

from zerolayer.config import PlatformConfig
from zerolayer.errors import ModelNotFound, PermissionDenied
from zerolayer.protocol import Target

__all__ = ["Catalog"]


class Catalog:
    """What is served, and which served tier a request's model id names for a plan."""

    def __init__(self, config: PlatformConfig):
        self.config = config

    def served(self) -> list[Target]:
        """Every served tier."""
        return [Target(m, t) for m, mc in self.config.models.items() for t in mc.tiers]

    def resolve(self, model_id: str, plan: str) -> Target:
        """The tier a request's model id names for a plan; 404 if not served, 403 if not in
        the plan."""
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
        tier = tier or plan_cfg.default_tier
        if tier not in plan_cfg.tiers:
            raise PermissionDenied(
                f"tier {tier!r} is not part of plan {plan!r} (tiers: {', '.join(plan_cfg.tiers)})",
                param="model",
            )
        return Target(name, tier)

    def list_ids(self) -> list[str]:
        """Bare model ids and '<model>:<tier>' ids, as /v1/models lists them."""
        return [*self.config.models, *map(str, self.served())]

    def cards(
        self, created: int, tier_cards: dict[Target, dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """OpenAI model objects for /v1/models; each tier with its tier card when known."""
        tier_cards = tier_cards or {}
        out = []
        for name, model in self.config.models.items():
            out.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "zerolayer",
                    "description": model.description,
                    "max_model_len": model.max_model_len,
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
                        "tier_card": tier_cards.get(Target(name, tier)),
                    }
                )
        return out
