"""The torch engine's live signals on the real model and the real compiler's tiny artifacts:
sampled steps counted without changing what is generated, garbage input raising the dynamic
tier's skip rate on the metrics, the calibrated reference on every card, and the canary's KL
over its limit for a deliberately damaged tier."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from zerolayer.engines.base import SamplingSpec
from zerolayer.engines.torch_engine import TorchEngine
from zerolayer.engines.torch_engine.probe import Probe
from zerolayer.gateway.canary import CanaryRunner
from zerolayer.protocol import Target

PROSE = [
    "The history of the city begins in the twelfth century, when merchants settled by the river.",
    "Bees carry pollen from flower to flower, and many crops depend on them for their fruit.",
    "The library opens at nine and closes at six; on Sundays it stays closed all day.",
    "A good map shows the roads, the rivers and the hills, and says how far apart places are.",
    "Winter came early that year, and the lake froze over before the end of November.",
]
NORMAL = [
    "Explain in two sentences why the sky is blue.",
    "Write a short note to a colleague about moving Tuesday's meeting to Thursday.",
    "What are three good habits for writing readable Python code?",
]


def _thresholds(build: dict[str, Any]) -> list[float]:
    summary = json.loads((build["out"] / "silence_map" / "silence_map.json").read_text())
    return summary["mlp"]["thresholds"]


async def _generate(engine: TorchEngine, chats: list[list[int]], n: int) -> list[list[int]]:
    out = []
    for k, ids in enumerate(chats):
        tokens: list[int] = []
        async for d in engine.generate(SamplingSpec(f"r{k}", ids, n, temperature=0.0)):
            tokens += d.token_ids
        out.append(tokens)
    return out


def test_sampled_steps_are_counted_and_generate_the_same_tokens(
    model_dir: Path, prompts: Any, tiny_build: dict[str, Any]
) -> None:
    thresholds = _thresholds(tiny_build)

    async def go() -> tuple[list[list[int]], list[list[int]], dict[str, Any], dict[str, Any]]:
        plain = TorchEngine(str(model_dir))
        watched = TorchEngine(str(model_dir), live_sample_rate=0.5, live_thresholds=thresholds)
        await plain.start()
        await watched.start()
        try:
            chats = [prompts.chat([{"role": "user", "content": t}]) for t in NORMAL[:2]]
            a = await _generate(plain, chats, 9)
            b = await _generate(watched, chats, 9)
            return a, b, await watched.signals(), await watched.signals()
        finally:
            await plain.shutdown()
            await watched.shutdown()

    plain, watched, first, again = asyncio.run(go())
    assert watched == plain  # a sampled step runs torch ops, with the same result
    assert first["sample_rate"] == 0.5
    decode, prefill = first["decode"], first["prefill"]
    # every other decode step and every other prefill (the first of each is sampled)
    steps = sum(len(t) - 1 for t in watched)
    assert decode["passes"] == (steps + 1) // 2
    assert prefill["passes"] == 1
    width = decode["total"][0] // decode["tokens"]
    assert width == 1536 and all(t == decode["tokens"] * width for t in decode["total"])
    shares = Probe.rates(decode)["sparsity"]
    assert all(0.0 < s < 1.0 for s in shares)
    # per channel: the same tokens, and the channels' counts add up to the layer's
    assert decode["rows"] == [decode["tokens"]] * len(thresholds)
    for c, u in zip(decode["channels"], decode["under"], strict=True):
        assert c.shape == (1536,) and int(c.sum()) == u and int(c.max()) <= decode["tokens"]
    assert decode["seen"] == 0  # the dense model thresholds nothing: no skip rate
    assert "decode" not in again and "prefill" not in again  # drained


def test_garbage_input_raises_the_skip_rate_on_the_metrics(
    model_dir: Path, prompts: Any, tiny_build: dict[str, Any], redis_url: str
) -> None:
    """The tiny build's dynamic tier, one minute of plain prose per request and then a minute of
    degenerate raw prompts (a character repeated: about 0.7 of the thresholded inputs skipped
    against 0.25): its counts go through the replica's recorder and Redis to the gateway's
    /metrics text, which flags the garbage minute."""
    import redis.asyncio as aioredis
    from zerolayer.config import MonitoringConfig
    from zerolayer.gateway.live import LiveSignals, render_live
    from zerolayer.replicas.live import LiveRecorder

    tier = "smollm2-135m:live-test"
    cfg = MonitoringConfig(bucket_s=60, window_buckets=5, min_history=3)

    async def go() -> list[dict[str, Any]]:
        engine = TorchEngine(
            str(model_dir),
            artifact="dynamic",
            artifact_dir=str(tiny_build["out"] / "dynamic"),
            live_sample_rate=1.0,
            live_thresholds=_thresholds(tiny_build),
        )
        client = aioredis.from_url(redis_url)
        now = [2_000_030.0]
        rec = LiveRecorder(client, tier, engine, {}, cfg, clock=lambda: now[0])
        live = LiveSignals(client, cfg)
        await engine.start()
        reports = []
        try:
            minutes = [[t] for t in PROSE] + [[c * 300 for c in "q>"]]
            for k, texts in enumerate(minutes):
                now[0] = 2_000_030.0 + 60 * k
                await _generate(engine, [prompts.completion(t) for t in texts], 4)
                await rec.flush()
                reports.append((await live.report([tier], now=now[0]))[tier])
            reports[-1]["text"] = render_live({tier: reports[-1]})
        finally:
            await client.aclose()
            await engine.shutdown()
        return reports

    reports = asyncio.run(go())
    calm, garbage = reports[-2], reports[-1]
    assert all(r["skip_flag"] is False for r in reports[3:-1]), reports
    assert garbage["skip_rate"] > calm["skip_band"][1] > calm["skip_rate"], (calm, garbage)
    assert garbage["skip_rate"] - calm["skip_rate"] > 0.2
    assert garbage["skip_flag"] is True
    assert f'zerolayer_skip_rate_flag{{tier="{tier}"}} 1' in garbage["text"]


def test_every_card_carries_its_calibrated_reference(tiny_build: dict[str, Any]) -> None:
    dense = json.loads((tiny_build["out"] / "silence_map" / "live_reference.json").read_text())
    thresholds = _thresholds(tiny_build)
    # the silence map's summary keeps 8 decimals (tiny thresholds are not within 1e-6 of them)
    assert dense["thresholds"] == pytest.approx(thresholds, abs=1e-8) and dense["skip_rate"] is None
    for kind, card in tiny_build["cards"].items():
        ref = card["live_reference"]
        assert ref["thresholds"] == pytest.approx(thresholds, abs=1e-8), kind
        assert len(ref["sparsity"]) == len(thresholds) and ref["tokens"] > 0
        assert all(0.0 <= s <= 1.0 for s in ref["sparsity"])
        assert (ref["skip_rate"] is not None) == (kind == "dynamic"), kind
    # the cut tiers' sparsity differs from the dense model's (their weights changed)
    assert tiny_build["cards"]["dynamic"]["live_reference"]["sparsity"] != dense["sparsity"]


def test_a_damaged_tier_raises_the_canary_kl_over_its_limit(
    model_dir: Path, tiny_build: dict[str, Any], tmp_path: Path, base_config: Any, redis_url: str
) -> None:
    import redis.asyncio as aioredis
    from zerolayer.gateway.live import LiveSignals, render_live

    damaged = tmp_path / "dynamic"
    shutil.copytree(tiny_build["out"] / "dynamic", damaged)
    th = json.loads((damaged / "thresholds.json").read_text())
    top = max(th["thresholds"].values(), default=0.05)
    th["thresholds"] = {str(i): top * 40 for i in range(30)}  # most MLP inputs zeroed
    (damaged / "thresholds.json").write_text(json.dumps(th))
    engines = {
        "baseline": TorchEngine(str(model_dir)),
        "dynamic": TorchEngine(
            str(model_dir), artifact="dynamic", artifact_dir=str(tiny_build["out"] / "dynamic")
        ),
        "sparse24": TorchEngine(  # served under another tier name: the damaged dynamic cut
            str(model_dir), artifact="dynamic", artifact_dir=str(damaged)
        ),
    }

    async def score(target: Target, texts: list[str], top_k: int) -> list[dict[str, Any]]:
        return await engines[target.tier].canary(texts, top_k)

    async def ready() -> list[Target]:
        return [Target("smollm2-135m", t) for t in engines]

    async def go() -> tuple[dict[str, Any], str]:
        for e in engines.values():
            await e.start()
        client = aioredis.from_url(redis_url)
        try:
            cfg = base_config.model_copy(deep=True)
            for tier in engines:  # the default limit on every tier here
                cfg.models["smollm2-135m"].tiers[tier].canary_kl_limit = None
            result = await CanaryRunner(client, cfg, score, ready).run()
            report = await LiveSignals(client, cfg.monitoring).report(
                [str(t) for t in await ready()]
            )
            return result, render_live(report)
        finally:
            await client.aclose()
            for e in engines.values():
                await e.shutdown()

    result, text = asyncio.run(go())
    limit = base_config.monitoring.canary_kl_limit
    healthy, broken = result["smollm2-135m:dynamic"], result["smollm2-135m:sparse24"]
    assert result["smollm2-135m:baseline"]["kl"] == pytest.approx(0.0, abs=1e-9)
    assert broken["kl"] > limit and broken["flag"] is True
    assert broken["kl"] > 3 * healthy["kl"], (healthy, broken)
    assert broken["positions"] > 6 * 10  # every canary text scored
    assert 'zerolayer_canary_flag{tier="smollm2-135m:sparse24"} 1' in text


def test_shutdown_answers_a_queued_canary_job(model_dir: Path) -> None:
    """A canary still queued when the replica stops gets an error, not a hang."""

    async def go() -> None:
        engine = TorchEngine(str(model_dir))
        await engine.start()
        gate = threading.Event()
        holding = asyncio.ensure_future(engine._submit(lambda: gate.wait(30)))  # the worker waits
        await asyncio.sleep(0.3)
        job = asyncio.ensure_future(engine.canary(["a short text to score"], 5))
        await asyncio.sleep(0.3)
        stopping = asyncio.ensure_future(engine.shutdown())  # queued behind the canary job
        await asyncio.sleep(0.3)
        assert not job.done()
        gate.set()
        await asyncio.wait_for(stopping, 30)
        assert await holding is True
        with pytest.raises(RuntimeError, match="shut down"):
            await asyncio.wait_for(job, 10)
        with pytest.raises(RuntimeError):  # and nothing new is taken
            await engine.canary(["another"], 5)

    asyncio.run(go())
