"""The production signals of collapsed tiers, read from Redis for /metrics and the tier cards:
what tier replicas counted (zerolayer.replicas.live, keys in zerolayer.store.keyspace) and what
the canary measured (zerolayer.gateway.canary).

Per tier:
  activation sparsity  per layer over the last window_buckets buckets (sampled decode steps),
                       its calibrated value, the drift between them in percentage points, and
                       a flag when a layer drifts more than drift_limit_points
  skip rate            the dynamic tier's share of skipped inputs in the newest bucket with
                       traffic (within the window), its usual band (the 10th to 90th percentile
                       of the earlier buckets' rates, widened by skip_band_points; before
                       min_history buckets, the calibrated rate +- 2 x skip_band_points) and a
                       flag outside it
  canary KL            the last canary run's KL against the baseline tier, its limit, a flag
  prefix cache         hit rate over the window (engines with a prefix cache)"""

from __future__ import annotations

import json
import time
from typing import Any

import redis.asyncio as aioredis

from zerolayer.config import MonitoringConfig
from zerolayer.store import keyspace

__all__ = ["LiveSignals", "band", "render_live"]


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of a non-empty list."""
    v = sorted(values)
    at = q * (len(v) - 1)
    lo = int(at)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (at - lo)


def band(
    history: list[float], calibrated: float | None, cfg: MonitoringConfig
) -> tuple[float, float] | None:
    """The skip rate's usual band (shares, not points), or None when there is nothing to judge
    by (no history and no calibrated rate)."""
    slack = cfg.skip_band_points / 100
    if len(history) >= cfg.min_history:
        return _quantile(history, 0.1) - slack, _quantile(history, 0.9) + slack
    if calibrated is None:
        return None
    return calibrated - 2 * slack, calibrated + 2 * slack


def _int(raw: dict[bytes, bytes], name: str) -> int:
    return int(raw.get(name.encode(), 0))


class LiveSignals:
    """Reads the live counts, references and canary results of tiers and judges them."""

    def __init__(self, client: aioredis.Redis, cfg: MonitoringConfig):
        self.client = client
        self.cfg = cfg

    async def report(self, tiers: list[str], now: float | None = None) -> dict[str, Any]:
        """Per tier, every signal that has data (see the module doc)."""
        c = self.cfg
        current = int((time.time() if now is None else now) // c.bucket_s)
        buckets = list(range(current - c.history_buckets, current + 1))
        pipe = self.client.pipeline(transaction=False)
        for tier in tiers:
            for b in buckets:
                pipe.hgetall(keyspace.live_bucket(tier, b))
            pipe.get(keyspace.live_reference(tier))
            pipe.hgetall(keyspace.canary(tier))
        got = await pipe.execute()
        per = len(buckets) + 2
        out = {}
        for k, tier in enumerate(tiers):
            at = k * per + len(buckets)
            out[tier] = self._judge(got[k * per : at], got[at], got[at + 1])
        return out

    def _judge(
        self, counts: list[dict[bytes, bytes]], ref_raw: bytes | None, canary: dict[bytes, bytes]
    ) -> dict[str, Any]:
        c = self.cfg
        ref = json.loads(ref_raw) if ref_raw else {}
        out: dict[str, Any] = {}
        window = counts[-c.window_buckets :]
        layers = len(ref.get("thresholds") or [])
        live = []
        for i in range(layers):
            total = sum(_int(b, f"t{i}") for b in window)
            live.append(sum(_int(b, f"u{i}") for b in window) / total if total else None)
        if any(v is not None for v in live):
            out["activation_sparsity"] = live
            out["sampled_tokens"] = sum(_int(b, "tokens") for b in window)
            calibrated = ref.get("sparsity")
            if calibrated and len(calibrated) == layers:
                out["calibrated_sparsity"] = calibrated
                drift = [
                    None if v is None or k is None else (v - k) * 100
                    for v, k in zip(live, calibrated, strict=True)
                ]
                out["drift_points"] = drift
                worst = max((abs(d) for d in drift if d is not None), default=0.0)
                out["drift_max_points"] = worst
                out["drift_flag"] = worst > c.drift_limit_points
        rates = [
            (_int(b, "skipped") / _int(b, "seen")) if _int(b, "seen") else None for b in counts
        ]
        seen = [j for j, r in enumerate(rates) if r is not None]
        # the newest bucket with traffic within the window
        latest = next((j for j in reversed(seen) if j >= len(rates) - c.window_buckets), None)
        rate = None if latest is None else rates[latest]
        if latest is not None and rate is not None:  # a bucket in `seen` has a rate
            history = [rates[j] for j in seen if j < latest]
            calibrated_rate = ref.get("skip_rate")
            b = band([r for r in history if r is not None], calibrated_rate, c)
            out["skip_rate"] = rate
            out["skip_rate_calibrated"] = calibrated_rate
            if b is not None:
                out["skip_band"] = list(b)
                out["skip_flag"] = not b[0] <= rate <= b[1]
        queries = sum(_int(b, "pc_queries") for b in window)
        if queries:
            out["prefix_cache_hit_rate"] = sum(_int(b, "pc_hits") for b in window) / queries
        if canary:
            kl = float(canary[b"kl"])
            limit = float(canary.get(b"limit", c.canary_kl_limit))
            out["canary"] = {
                "kl": kl,
                "limit": limit,
                "flag": kl > limit,
                "checked_at": float(canary.get(b"at", 0)),
                "positions": int(canary.get(b"positions", 0)),
            }
        return out


def _g(name: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    if not samples:
        return []
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    return lines + [f"{name}{{{labels}}} {value:.6g}" for labels, value in samples]


def render_live(report: dict[str, Any]) -> str:
    """The signals as Prometheus gauges (zerolayer_ names; labels tier, and layer)."""
    series: dict[str, list[tuple[str, float]]] = {}

    def add(name: str, labels: str, value: float | None) -> None:
        if value is not None:
            series.setdefault(name, []).append((labels, float(value)))

    for tier, s in sorted(report.items()):
        t = f'tier="{tier}"'
        for key, name in (
            ("activation_sparsity", "zerolayer_activation_sparsity"),
            ("calibrated_sparsity", "zerolayer_activation_sparsity_calibrated"),
            ("drift_points", "zerolayer_activation_drift_points"),
        ):
            for i, v in enumerate(s.get(key) or []):
                add(name, f'{t},layer="{i}"', v)
        add("zerolayer_activation_drift_max_points", t, s.get("drift_max_points"))
        if "drift_flag" in s:
            add("zerolayer_activation_drift_flag", t, int(s["drift_flag"]))
        add("zerolayer_live_sampled_tokens", t, s.get("sampled_tokens"))
        add("zerolayer_skip_rate", t, s.get("skip_rate"))
        add("zerolayer_skip_rate_calibrated", t, s.get("skip_rate_calibrated"))
        if "skip_band" in s:
            add("zerolayer_skip_rate_band_low", t, s["skip_band"][0])
            add("zerolayer_skip_rate_band_high", t, s["skip_band"][1])
            add("zerolayer_skip_rate_flag", t, int(s["skip_flag"]))
        add("zerolayer_prefix_cache_hit_rate", t, s.get("prefix_cache_hit_rate"))
        if "canary" in s:
            cn = s["canary"]
            add("zerolayer_canary_kl", t, cn["kl"])
            add("zerolayer_canary_kl_limit", t, cn["limit"])
            add("zerolayer_canary_flag", t, int(cn["flag"]))
            add("zerolayer_canary_checked_timestamp_seconds", t, cn["checked_at"])
    helps = {
        "zerolayer_activation_sparsity": "Share of sampled down_proj inputs at or under the "
        "silence map's threshold, per layer, over the live window",
        "zerolayer_activation_sparsity_calibrated": "The same share on the build's validation "
        "windows",
        "zerolayer_activation_drift_points": "Live minus calibrated sparsity, percentage points",
        "zerolayer_activation_drift_max_points": "Largest absolute drift over the layers",
        "zerolayer_activation_drift_flag": "1 when a layer drifts past the configured limit",
        "zerolayer_live_sampled_tokens": "Decode tokens sampled in the live window",
        "zerolayer_skip_rate": "Share of thresholded inputs the tier skipped, latest bucket",
        "zerolayer_skip_rate_calibrated": "The skip rate on the build's validation windows",
        "zerolayer_skip_rate_band_low": "Lower edge of the skip rate's usual band",
        "zerolayer_skip_rate_band_high": "Upper edge of the skip rate's usual band",
        "zerolayer_skip_rate_flag": "1 when the skip rate is outside its usual band",
        "zerolayer_prefix_cache_hit_rate": "Prompt tokens served from the prefix cache, share",
        "zerolayer_canary_kl": "KL of the tier against the baseline tier on the canary texts",
        "zerolayer_canary_kl_limit": "The canary KL's configured limit",
        "zerolayer_canary_flag": "1 when the canary KL is over its limit",
        "zerolayer_canary_checked_timestamp_seconds": "When the canary last measured the tier",
    }
    lines: list[str] = []
    for name, samples in series.items():
        lines += _g(name, helps[name], samples)
    return "\n".join(lines) + ("\n" if lines else "")
