"""/metrics: latency histograms and token counters per tier and plan, with values that follow
what the engine did."""

from __future__ import annotations

import json
import re
import time

import pytest
from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import CHAT

TIER = "smollm2-135m:baseline"


def _series(text: str, name: str, plan_name: str) -> dict[str, float]:
    """The samples of one metric for the tier and plan: {le or "": value}."""
    out: dict[str, float] = {}
    pattern = re.compile(rf'^{name}{{tier="{TIER}",plan="{plan_name}"(?:,le="([^"]+)")?}} (\S+)$')
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def test_latency_histograms_and_tokens_follow_the_engine(make_gateway: GatewayFactory) -> None:
    plans = {"fast": plan(), "slow": plan()}
    fast = make_gateway(plans=plans, key_plan="fast", engine=FakeEngine(SCRIPT))
    slow = make_gateway(plans=plans, key_plan="slow", engine=FakeEngine(SCRIPT, delay_s=0.06))
    usage = {"fast": [0, 0], "slow": [0, 0]}
    for name, gw in (("fast", fast), ("slow", slow)):
        for stream in (False, True):
            body = {**CHAT, "max_tokens": 8, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)
            assert r.status_code == 200
            if stream:
                frames = [x for x in r.text.split("\n\n") if x.startswith("data: {")]
                used = json.loads(frames[-1][6:])["usage"]
            else:
                used = r.json()["usage"]
            usage[name][0] += used["prompt_tokens"]
            usage[name][1] += used["completion_tokens"]
    # each gateway writes its counts within a second; either one's /metrics shows them all
    time.sleep(1.5)
    text = fast.client.get("/metrics").text
    assert "# TYPE zerolayer_time_to_first_token_seconds histogram" in text
    assert "# TYPE zerolayer_time_per_output_token_seconds histogram" in text
    for name in ("fast", "slow"):
        for metric in ("time_to_first_token", "time_per_output_token"):
            s = _series(text, f"zerolayer_{metric}_seconds_bucket", name)
            counts = [s[k] for k in s]  # in bound order, cumulative
            assert counts == sorted(counts) and s["+Inf"] == 2, (name, metric, s)
            total = _series(text, f"zerolayer_{metric}_seconds_count", name)[""]
            assert total == 2
        prompt = _series(text, "zerolayer_prompt_tokens_total", name)[""]
        completion = _series(text, "zerolayer_completion_tokens_total", name)[""]
        assert [prompt, completion] == usage[name]
    # the slow engine waits 60 ms before each token: its buckets under that stay empty
    for metric in ("time_to_first_token", "time_per_output_token"):
        slow_buckets = _series(text, f"zerolayer_{metric}_seconds_bucket", "slow")
        fast_buckets = _series(text, f"zerolayer_{metric}_seconds_bucket", "fast")
        assert slow_buckets["0.05"] == 0 and fast_buckets["0.05"] == 2, metric
        slow_sum = _series(text, f"zerolayer_{metric}_seconds_sum", "slow")[""]
        assert slow_sum >= 2 * 0.055, metric


def test_status_summarises_the_metrics_per_tier(make_gateway: GatewayFactory) -> None:
    from zerolayer.status import bucket_quantile, render, summarize

    assert bucket_quantile(0.5, [(0.1, 0), (0.2, 4), (float("inf"), 4)]) == pytest.approx(0.15)
    assert bucket_quantile(0.95, [(1.0, 1), (float("inf"), 10)]) == 1.0  # in +Inf: last bound
    assert bucket_quantile(0.5, [(1.0, 0), (float("inf"), 0)]) is None
    gw = make_gateway(
        plans={"stat": plan()}, key_plan="stat", engine=FakeEngine(SCRIPT, delay_s=0.03)
    )

    def mine() -> str:  # this plan's lines (other tests' counts share the Redis)
        text = gw.client.get("/metrics").text
        return "\n".join(x for x in text.splitlines() if x.startswith("#") or 'plan="stat"' in x)

    assert TIER not in summarize(mine())
    for _ in range(3):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "max_tokens": 4})
        assert r.status_code == 200
    row = summarize(mine())[TIER]
    assert row["requests"] == 3 and row["completion_tokens"] == 3 * 4
    assert row["ttft_p50_s"] is not None and 0.02 <= row["ttft_p50_s"] <= 0.1
    assert row["tpot_p50_s"] is not None and 0.02 <= row["tpot_p50_s"] <= 0.1
    table = render({TIER: row})
    assert TIER in table and "ttft p50/p95 ms" in table
