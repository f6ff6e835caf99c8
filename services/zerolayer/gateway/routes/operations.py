"""GET /admin/operations: what an operator watches, per served tier and live (the figures and
alerts: zerolayer.gateway.operations); the console's Operations page polls it."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends

from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import CatalogDep, Parts, PipelineDep, admin_keys
from zerolayer.gateway.metrics import finished_by_tier, tier_stats
from zerolayer.gateway.operations import QUIET, alerts_of
from zerolayer.gateway.replies import Operations, json_reply
from zerolayer.store.tiers import state_of

__all__ = ["router"]

# the admin key, before anything else
router = APIRouter(dependencies=[Depends(admin_keys)], route_class=BodyRoute)


@router.get("/admin/operations", responses=json_reply(Operations))
async def operations(parts: Parts, pipeline: PipelineDep, catalog: CatalogDep) -> dict[str, Any]:
    """Per served tier, live: state, requests, sheds, endings, latencies, queue wait, tokens;
    and the collapse alerts."""
    served = [str(t) for t in catalog.served()]
    states = await pipeline.states() or {}
    stats = await tier_stats(parts.metrics)
    ended = await finished_by_tier(parts.metrics)
    live = await parts.live.report(served) if parts.live is not None else {}
    drift_limit = parts.config.monitoring.drift_limit_points
    tiers, alerts = [], []
    for t in catalog.served():
        name = str(t)
        s = stats.get(name, {})
        by_end = ended.get(name, {})
        done = sum(by_end.values())
        failed = sum(n for status, n in by_end.items() if status not in QUIET)
        tier_alerts = alerts_of(name, live.get(name, {}), drift_limit)
        alerts += tier_alerts
        tiers.append(
            {
                "tier": name,
                "state": state_of(states, t).status,
                "requests": int(s.get("requests") or 0),
                "shed": int(s.get("shed") or 0),
                "finished": dict(sorted(by_end.items())),
                "error_rate": failed / done if done else None,
                "ttft_s": s.get("ttft_s"),
                "tpot_s": s.get("tpot_s"),
                "tokens_per_s": s.get("tokens_per_s"),
                "queue_wait_s": pipeline.admission.wait_s(name),
                "prompt_tokens": int(s.get("prompt_tokens") or 0),
                "completion_tokens": int(s.get("completion_tokens") or 0),
                "alerts": len(tier_alerts),
            }
        )
    return {"object": "operations", "at": int(time.time()), "tiers": tiers, "alerts": alerts}
