"""`zerolayer status`: what a running platform's /metrics says, per tier, in one table.

It reads the gateway's Prometheus text (no key needed, as for the cluster's Prometheus) and
shows per tier: requests, prompt and output tokens, time to first token and time per output
token (median and 95th percentile, estimated from the histograms as Prometheus'
histogram_quantile does), the measured queue wait, and sheds; then the production signals of
the collapsed tiers: live activation sparsity (mean over layers) against its calibrated value
and the largest drift of a layer, the dynamic tier's skip rate and its usual band, the canary
KL against the baseline tier and its limit, and the prefix cache hit rate. A `!` marks a
flagged signal."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

__all__ = ["bucket_quantile", "summarize", "render", "fetch_status"]


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the exposition: name -> [(labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), float(sample.value)))
    return out


def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The q-quantile of a histogram from its cumulative (upper bound, count) buckets, linear
    inside the bucket it falls in (the largest finite bound when it falls in +Inf); None when
    the histogram is empty."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def _by_tier(samples: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in samples:
        out[labels.get("tier", "")] += value
    return out


def _quantiles(
    samples: list[tuple[dict[str, str], float]],
) -> dict[str, tuple[float | None, float | None]]:
    """Per tier, p50 and p95 over every plan's buckets."""
    per: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in samples:
        per[labels.get("tier", "")][float(labels["le"])] += value
    return {
        tier: (bucket_quantile(0.5, b.items()), bucket_quantile(0.95, b.items()))
        for tier, b in per.items()
    }


def summarize(text: str) -> dict[str, dict[str, Any]]:
    """Per tier, the figures `render` shows (None where nothing was measured yet)."""
    fam = _families(text)
    counts = {
        "requests": _by_tier(fam.get("zerolayer_requests_total", [])),
        "prompt_tokens": _by_tier(fam.get("zerolayer_prompt_tokens_total", [])),
        "completion_tokens": _by_tier(fam.get("zerolayer_completion_tokens_total", [])),
        "shed": _by_tier(fam.get("zerolayer_admission_shed_total", [])),
    }
    ttft = _quantiles(fam.get("zerolayer_time_to_first_token_seconds_bucket", []))
    tpot = _quantiles(fam.get("zerolayer_time_per_output_token_seconds_bucket", []))
    waits = {labels["tier"]: v for labels, v in fam.get("zerolayer_queue_wait_seconds", [])}
    live = _signals(fam)
    tiers = sorted({t for c in counts.values() for t in c} | set(ttft) | set(waits) | set(live))
    return {
        t: {
            **{k: int(c.get(t, 0)) for k, c in counts.items()},
            "ttft_p50_s": ttft.get(t, (None, None))[0],
            "ttft_p95_s": ttft.get(t, (None, None))[1],
            "tpot_p50_s": tpot.get(t, (None, None))[0],
            "tpot_p95_s": tpot.get(t, (None, None))[1],
            "queue_wait_s": waits.get(t),
            "signals": live.get(t, {}),
        }
        for t in tiers
    }


# per tier gauges of the production signals: summary key <- metric name
_GAUGES = {
    "drift_max_points": "zerolayer_activation_drift_max_points",
    "drift_flag": "zerolayer_activation_drift_flag",
    "skip_rate": "zerolayer_skip_rate",
    "skip_band_low": "zerolayer_skip_rate_band_low",
    "skip_band_high": "zerolayer_skip_rate_band_high",
    "skip_flag": "zerolayer_skip_rate_flag",
    "canary_kl": "zerolayer_canary_kl",
    "canary_kl_limit": "zerolayer_canary_kl_limit",
    "canary_flag": "zerolayer_canary_flag",
    "prefix_cache_hit_rate": "zerolayer_prefix_cache_hit_rate",
}


def _signals(fam: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, dict[str, Any]]:
    """Per tier, the production signals /metrics has (absent ones left out)."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for key, name in _GAUGES.items():
        for labels, value in fam.get(name, []):
            out[labels["tier"]][key] = value
    for key, name in (
        ("sparsity", "zerolayer_activation_sparsity"),
        ("calibrated", "zerolayer_activation_sparsity_calibrated"),
    ):
        per: dict[str, list[float]] = defaultdict(list)
        for labels, value in fam.get(name, []):
            per[labels["tier"]].append(value)
        for tier, values in per.items():
            out[tier][key] = sum(values) / len(values)  # mean over the layers
    return dict(out)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def render(summary: dict[str, dict[str, Any]]) -> str:
    """The summary as a fixed-width table."""
    head = (
        f"{'tier':28s} {'requests':>8s} {'tok in':>8s} {'tok out':>8s} "
        f"{'ttft p50/p95 ms':>16s} {'tpot p50/p95 ms':>16s} {'queue ms':>8s} {'shed':>5s}"
    )
    lines = [head]
    for tier, s in summary.items():
        lines.append(
            f"{tier:28s} {s['requests']:8d} {s['prompt_tokens']:8d} {s['completion_tokens']:8d} "
            f"{_ms(s['ttft_p50_s']) + '/' + _ms(s['ttft_p95_s']):>16s} "
            f"{_ms(s['tpot_p50_s']) + '/' + _ms(s['tpot_p95_s']):>16s} "
            f"{_ms(s['queue_wait_s']):>8s} {s['shed']:5d}"
        )
    signals = {t: s["signals"] for t, s in summary.items() if s.get("signals")}
    if signals:
        lines += ["", _signals_table(signals)]
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}"


def _signals_table(signals: dict[str, dict[str, Any]]) -> str:
    """The production signals, one row per tier that has any (percent; ! = flagged)."""
    rows = [
        f"{'tier':28s} {'sparsity % live/cal':>19s} {'drift pts':>9s} "
        f"{'skip % (band)':>20s} {'canary KL/limit':>16s} {'prefix hit %':>12s}"
    ]
    for tier, s in signals.items():
        drift = s.get("drift_max_points")
        skip = _pct(s.get("skip_rate"))
        if "skip_band_low" in s:
            skip += f" ({_pct(s['skip_band_low'])}-{_pct(s['skip_band_high'])})"
        kl = "-" if "canary_kl" not in s else f"{s['canary_kl']:.3f}/{s['canary_kl_limit']:.2f}"
        rows.append(
            f"{tier:28s} {_pct(s.get('sparsity')) + '/' + _pct(s.get('calibrated')):>19s} "
            f"{'-' if drift is None else f'{drift:.1f}':>8s}{'!' if s.get('drift_flag') else ' '} "
            f"{skip:>19s}{'!' if s.get('skip_flag') else ' '} "
            f"{kl:>15s}{'!' if s.get('canary_flag') else ' '} "
            f"{_pct(s.get('prefix_cache_hit_rate')):>12s}"
        )
    return "\n".join(rows)


def fetch_status(url: str, timeout_s: float = 10.0) -> tuple[dict[str, Any], str]:
    """The platform's health and /metrics summary; (report, table)."""
    import httpx

    with httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s) as client:
        health = client.get("/healthz")
        metrics = client.get("/metrics")
        metrics.raise_for_status()
    summary = summarize(metrics.text)
    report = {"url": url, "health": health.json(), "tiers": summary}
    return report, f"health: {json.dumps(health.json())}\n{render(summary)}"
