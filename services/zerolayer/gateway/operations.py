"""GET /admin/operations: what an operator watches, per served tier and live: its state, the
requests admitted and shed, how they ended, the mean time to first token and per output token,
the current queue wait, tokens; and the collapse alerts (the live signals over their limits,
the same verdicts /metrics exports for Prometheus' rules). The console's Operations page polls
it."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends

from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.deps import admin_keys
from zerolayer.gateway.flow import Flow
from zerolayer.gateway.metrics import finished_by_tier, tier_stats
from zerolayer.gateway.parts import GatewayParts
from zerolayer.store.tiers import state_of

__all__ = ["alerts_of", "operations_router"]

_QUIET = ("ok", "client_disconnect")  # endings that are not the platform's failures


def alerts_of(tier: str, signals: dict[str, Any], drift_limit: float) -> list[dict[str, Any]]:
    """The live signals of a tier that are over their limits, one alert each."""
    out = []
    if signals.get("drift_flag"):
        worst = float(signals["drift_max_points"])
        out.append(
            {
                "tier": tier,
                "signal": "activation_drift",
                "value": worst,
                "limit": drift_limit,
                "message": f"activation sparsity drifted {worst:.1f} points from its "
                f"calibration (limit {drift_limit:g})",
            }
        )
    if signals.get("skip_flag"):
        rate, (low, high) = float(signals["skip_rate"]), signals["skip_band"]
        out.append(
            {
                "tier": tier,
                "signal": "skip_rate",
                "value": rate,
                "limit": [low, high],
                "message": f"skip rate {rate:.1%} is outside its usual band "
                f"{max(0.0, low):.1%}-{min(1.0, high):.1%}",
            }
        )
    canary = signals.get("canary") or {}
    if canary.get("flag"):
        out.append(
            {
                "tier": tier,
                "signal": "canary_kl",
                "value": canary["kl"],
                "limit": canary["limit"],
                "message": f"canary KL {canary['kl']:.4f} against the baseline is over its "
                f"limit {canary['limit']:g}",
            }
        )
    return out


def operations_router(parts: GatewayParts, flow: Flow, catalog: Catalog) -> APIRouter:
    """The route of GET /admin/operations."""
    router = APIRouter(dependencies=[Depends(admin_keys)])  # the admin key

    @router.get("/admin/operations")
    async def operations() -> dict[str, Any]:
        served = [str(t) for t in catalog.served()]
        states = await flow.states() or {}
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
            failed = sum(n for status, n in by_end.items() if status not in _QUIET)
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
                    "queue_wait_s": flow.admission.wait_s(name),
                    "prompt_tokens": int(s.get("prompt_tokens") or 0),
                    "completion_tokens": int(s.get("completion_tokens") or 0),
                    "alerts": len(tier_alerts),
                }
            )
        return {"object": "operations", "at": int(time.time()), "tiers": tiers, "alerts": alerts}

    return router
