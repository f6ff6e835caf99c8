"""GET /v1/models: every served tier with its card, status, measured speed and the caller's
prices (for the admin key: no prices)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import CatalogDep, Parts, PipelineDep, Reader
from zerolayer.gateway.metrics import tier_stats
from zerolayer.gateway.replies import ModelList, json_reply
from zerolayer.store.tiers import state_of

__all__ = ["router"]

router = APIRouter(route_class=BodyRoute)


@router.get("/v1/models", responses=json_reply(ModelList))
async def models(
    record: Reader, parts: Parts, pipeline: PipelineDep, catalog: CatalogDep
) -> dict[str, Any]:
    """The catalogue, as OpenAI's list of models with zerolayer's tier cards on each."""
    states = await pipeline.states() or {}
    ready = [t for t in catalog.served() if state_of(states, t).ready]
    cards = await parts.backend.cards(ready)
    if parts.live is not None:  # the live signals' verdicts go on each card
        report = await parts.live.report([str(t) for t in cards])
        cards = {t: {**c, "monitoring": report.get(str(t), {})} for t, c in cards.items()}
    measured = await tier_stats(parts.metrics)
    plan = None if record is None else record.plan  # the admin key: no plan, no prices
    data = catalog.cards(int(time.time()), cards, states, plan, measured)
    return {"object": "list", "data": data}
