"""GET /admin/operations: what an operator watches, per served tier and live: its state, the
requests admitted and shed, how they ended, the mean time to first token and per output token,
the current queue wait, tokens; and the collapse alerts (the live signals over their limits,
the same verdicts /metrics exports for Prometheus' rules). The console's Operations page polls
it."""

from __future__ import annotations

from typing import Any

__all__ = ["QUIET", "alerts_of"]

QUIET = ("ok", "client_disconnect")  # endings that are not the platform's failures


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
