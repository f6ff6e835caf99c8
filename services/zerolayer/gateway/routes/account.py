"""GET /v1/account: what a key may see of itself (its record, its plan's tiers, prices and
limits, this month's spend against its budget), as providers' dashboards show it; and GET
/admin/account, which answers 200 to the admin key alone (the console asks it to tell an
operator from a customer)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from zerolayer.config import PlanConfig, usd_text
from zerolayer.config.pricing import Prices, per_1m_view
from zerolayer.errors import PermissionDenied
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import CatalogDep, CurrentKey, Parts
from zerolayer.gateway.limits import month_of
from zerolayer.gateway.replies import Account, json_reply

__all__ = ["plan_view", "router"]


def plan_view(name: str, plan: PlanConfig, prices: Prices, model: str) -> dict[str, Any]:
    """A plan as its keys see it: tiers, default, each tier's price now for `model` (per 1K
    tokens as the API states them, per 1M as people read them, and its basis; null for a tier
    not priced yet), limits (null: none)."""
    lim = plan.limits

    def view(tier: str) -> dict[str, str] | None:
        quote = prices.quote(name, model, tier)
        if quote is None:
            return None
        return {**quote.price.applied(), **per_1m_view(quote.price), "basis": quote.basis}

    return {
        "name": name,
        "description": plan.description,
        "tiers": plan.tiers,
        "default_tier": plan.default_tier,
        "margin": format(plan.margin, "f"),
        "prices": {t: view(t) for t in plan.tiers},
        "limits": {
            "requests_per_minute": lim.requests_per_minute,
            "tokens_per_minute": lim.tokens_per_minute,
            "concurrent_requests": lim.concurrent_requests,
            "monthly_budget_usd": (
                None if lim.monthly_budget_usd is None else format(lim.monthly_budget_usd, "f")
            ),
            "api_requests_per_minute": lim.api_requests_per_minute,
            "stored_bytes": lim.stored_bytes,
            "stored_objects": lim.stored_objects,
        },
    }


router = APIRouter(route_class=BodyRoute)


@router.get("/v1/account", responses=json_reply(Account))
async def account(record: CurrentKey, parts: Parts, catalog: CatalogDep) -> dict[str, Any]:
    """The key's record, plan, prices, limits, this month's spend, and what its tenant
    stores against the plan's storage quota."""
    plan = parts.config.plans.get(record.plan)
    if plan is None:
        raise PermissionDenied(f"this key's plan {record.plan!r} no longer exists")
    month, _ = month_of(parts.limiter.now())
    spent = await parts.limiter.spent(record.key_id, month)
    budget = plan.limits.budget_nanos
    storage = None
    if parts.conversations is not None:
        used, objects = await parts.conversations.stored(record.owner)
        storage = {
            "bytes": used,
            "objects": objects,
            "max_bytes": plan.limits.stored_bytes,
            "max_objects": plan.limits.stored_objects,
        }
    return {
        "object": "account",
        "key": record.public(),
        "plan": plan_view(record.plan, plan, catalog.prices, parts.config.default_model),
        "month": month,
        # what the key's requests of the month cost, those in flight at their worst case
        "spent_usd": usd_text(spent),
        "budget_usd": None if budget is None else usd_text(budget),
        "remaining_usd": None if budget is None else usd_text(max(0, budget - spent)),
        "storage": storage,
    }
