"""The production signals from a replica's counts to /metrics, `zerolayer status` and the
canary's KL: a scripted engine's counts (no model) through the real recorder, a real Redis and
the gateway's judgement."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
import redis.asyncio as aioredis
from zerolayer.config import PlatformConfig
from zerolayer.gateway.canary import CanaryRunner, topk_kl
from zerolayer.gateway.live import LiveSignals, band, render_live
from zerolayer.protocol import Target
from zerolayer.replicas.live import LiveRecorder
from zerolayer.status import render, summarize

TIER = "smollm2-135m:dynamic"
REFERENCE = {"thresholds": [0.01, 0.02, 0.03], "sparsity": [0.10, 0.20, 0.30], "skip_rate": 0.45}


class ScriptedSignals:
    """An engine whose signals() hands out what the test queued (unit test of metering)."""

    def __init__(self) -> None:
        self.queued: list[dict[str, Any]] = []

    async def signals(self) -> dict[str, Any]:
        return self.queued.pop(0) if self.queued else {}


def counts(sparsity: list[float], skip: float, tokens: int = 10, width: int = 100) -> dict:
    """One drained probe count: `tokens` tokens of `width` channels per layer."""
    total = tokens * width
    return {
        "tokens": tokens,
        "passes": tokens,
        "under": [round(s * total) for s in sparsity],
        "total": [total] * len(sparsity),
        "skipped": round(skip * total),
        "seen": total,
    }


def _gauge(text: str, name: str, tier: str = TIER) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'{name}{{tier="{tier}"}} '):
            return float(line.split()[-1])
    return None


def test_live_counts_become_signals_that_move_with_the_input(
    base_config: PlatformConfig, redis_url: str
) -> None:
    mon = base_config.monitoring.model_copy(update={"bucket_s": 60, "window_buckets": 5})

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], str]:
        client = aioredis.from_url(redis_url)
        engine = ScriptedSignals()
        now = [1_000_020.0]
        rec = LiveRecorder(client, TIER, engine, REFERENCE, mon, clock=lambda: now[0])  # type: ignore[arg-type]
        await rec.publish_reference()
        live = LiveSignals(client, mon)
        # six minutes of ordinary text: skip rates 0.44..0.47, sparsity on its calibration
        for minute, skip in enumerate([0.44, 0.46, 0.45, 0.47, 0.45, 0.46]):
            now[0] = 1_000_020.0 + 60 * minute
            engine.queued.append(
                {
                    "decode": counts([0.10, 0.21, 0.30], skip),
                    "prefix_cache": {"queries": 100, "hits": 40},
                }
            )
            await rec.flush()
        calm = await live.report([TIER], now=now[0])
        # then a minute of garbage: many more inputs skipped, layer 2 far sparser
        now[0] += 60
        engine.queued.append({"decode": counts([0.10, 0.21, 0.60], 0.80, tokens=40)})
        engine.queued.append({"prefill": counts([0.5, 0.5, 0.5], 0.85, tokens=200)})
        await rec.flush()
        await rec.flush()
        garbage = await live.report([TIER], now=now[0])
        await client.aclose()
        return calm[TIER], garbage[TIER], render_live(garbage)

    calm, garbage, text = asyncio.run(scenario())
    assert calm["activation_sparsity"] == pytest.approx([0.10, 0.21, 0.30])
    assert calm["drift_points"] == pytest.approx([0.0, 1.0, 0.0])
    assert calm["drift_flag"] is False and calm["skip_flag"] is False
    assert calm["skip_rate"] == pytest.approx(0.46)
    assert calm["skip_band"][0] < 0.44 and calm["skip_band"][1] > 0.47
    assert calm["prefix_cache_hit_rate"] == pytest.approx(0.40)
    # the garbage minute: the skip rate leaves its band, layer 2 drifts past 3 points
    assert garbage["skip_rate"] > calm["skip_band"][1] and garbage["skip_flag"] is True
    assert garbage["drift_points"][2] > 3 and garbage["drift_flag"] is True
    # prefill tokens count for the skip rate, not for the decode-only sparsity
    assert garbage["sampled_tokens"] == 4 * 10 + 40
    assert _gauge(text, "zerolayer_skip_rate_flag") == 1
    assert _gauge(text, "zerolayer_activation_drift_flag") == 1
    assert f'zerolayer_activation_drift_points{{tier="{TIER}",layer="2"}}' in text
    # `zerolayer status` reads the same text and marks both
    summary = summarize(text)
    sig = summary[TIER]["signals"]
    assert sig["skip_flag"] == 1 and sig["drift_flag"] == 1
    assert sig["sparsity"] == pytest.approx(sum(garbage["activation_sparsity"]) / 3)
    table = render(summary)
    assert "sparsity % live/cal" in table and "!" in table.splitlines()[-1]


def test_the_band_needs_history_or_a_calibrated_rate(base_config: PlatformConfig) -> None:
    mon = base_config.monitoring
    assert band([], None, mon) is None
    lo, hi = band([], 0.45, mon)  # type: ignore[misc]
    assert lo == pytest.approx(0.35) and hi == pytest.approx(0.55)
    lo, hi = band([0.40, 0.42, 0.44, 0.46], 0.9, mon)  # type: ignore[misc]
    assert 0.35 < lo < 0.37 and 0.49 < hi < 0.51  # the history wins over the calibration


def _dist(ps: list[float]) -> dict[str, Any]:
    ids = sorted(range(len(ps)), key=lambda i: -ps[i])
    return {"top_ids": [ids], "top_logprobs": [[math.log(ps[i]) for i in ids]]}


def test_topk_kl_is_exact_when_the_top_k_hold_everything() -> None:
    p, q = [0.7, 0.2, 0.1], [0.5, 0.3, 0.2]
    exact = sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))
    ref, got = {"tokens": [1, 2], **_dist(p)}, {"tokens": [1, 2], **_dist(q)}
    kl, n = topk_kl([ref], [got])
    assert n == 1 and kl == pytest.approx(exact)
    assert topk_kl([ref], [ref])[0] == pytest.approx(0.0)
    # a top 2 of a larger vocabulary: the rest is one bucket, the figure a bound from below
    p4, q4 = [0.6, 0.3, 0.05, 0.05], [0.2, 0.2, 0.3, 0.3]
    full = sum(a * math.log(a / b) for a, b in zip(p4, q4, strict=True))
    cut = lambda d: {k: [v[0][:2]] for k, v in d.items()}  # noqa: E731
    kl2, _ = topk_kl([{"tokens": [1, 2], **cut(_dist(p4))}], [{"tokens": [1, 2], **cut(_dist(q4))}])
    assert 0 < kl2 <= full + 1e-9
    with pytest.raises(ValueError, match="tokenized"):
        topk_kl([ref], [{**got, "tokens": [1, 3]}])


def test_the_canary_records_each_tier_and_flags_one_over_its_limit(
    base_config: PlatformConfig, redis_url: str
) -> None:
    p = [0.7, 0.2, 0.1]
    scored = {
        "baseline": p,
        "dynamic": [0.68, 0.21, 0.11],  # close to the baseline
        "sparse24": [0.1, 0.2, 0.7],  # far from it
    }
    ready = [Target("smollm2-135m", t) for t in scored]

    async def score(target: Target, texts: list[str], top_k: int) -> list[dict[str, Any]]:
        return [{"tokens": [1, 2], **_dist(scored[target.tier])} for _ in texts]

    async def tiers() -> list[Target]:
        return ready

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        client = aioredis.from_url(redis_url)
        runner = CanaryRunner(client, base_config, score, tiers, texts=["a", "b"])
        result = await runner.run()
        report = await LiveSignals(client, base_config.monitoring).report([str(t) for t in ready])
        await client.aclose()
        return result, report

    result, report = asyncio.run(scenario())
    assert result["smollm2-135m:baseline"]["kl"] == pytest.approx(0.0)
    assert result["smollm2-135m:dynamic"]["flag"] is False
    assert result["smollm2-135m:sparse24"]["flag"] is True
    assert result["smollm2-135m:sparse24"]["kl"] > base_config.monitoring.canary_kl_limit
    canary = report["smollm2-135m:sparse24"]["canary"]
    assert canary["flag"] is True and canary["positions"] == 2
    text = render_live(report)
    assert _gauge(text, "zerolayer_canary_flag", "smollm2-135m:sparse24") == 1
    assert _gauge(text, "zerolayer_canary_flag", "smollm2-135m:dynamic") == 0
