"""What sampling the live signals costs the torch engine: decode throughput with the probe at a
sampling rate, against the same engine with sampling off, measured in one process on one engine
(the rate is switched between runs, so both run on the same thread and OpenMP pool).

Each round runs every (rate, streams) case once in a shuffled order: `streams` requests of
--tokens new tokens each, at once (1 stream: the compiled single-stream step, which a sampled
step leaves for torch ops; more streams: batched torch steps, where the probe only adds its
counting). Prints per case the median ratio of tokens/s against rate 0 over the rounds, and the
spread; writes benchmarks/results/live_overhead.json.

  .venv/bin/python benchmarks/live_overhead.py [--tiers dynamic,baseline] [--repeats 7]
      [--rates 0.01,0.05,1] [--streams 1,8] [--tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "live_overhead.json"
PROMPTS = [
    "Tell me about the history of the printing press.",
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator keeps food cold.",
    "What should I pack for a week of hiking?",
    "Describe a busy market on a Saturday morning.",
    "How do vaccines train the immune system?",
    "Give me three tips for learning a new language.",
    "Why do leaves change colour in autumn?",
]


async def _run(engine: Any, chats: list[list[int]], tokens: int) -> float:
    """tokens/s of these requests run at once."""
    from zerolayer.engines.base import SamplingSpec

    async def one(ids: list[int]) -> int:
        n = 0
        spec = SamplingSpec(uuid.uuid4().hex, ids, tokens, temperature=0.0)
        async for d in engine.generate(spec):
            n += len(d.token_ids)
        return n

    t0 = time.perf_counter()
    done = await asyncio.gather(*(one(ids) for ids in chats))
    return sum(done) / (time.perf_counter() - t0)


async def measure(tier: str, args: argparse.Namespace) -> dict[str, Any]:
    from zerolayer.config import load_config
    from zerolayer.engines.torch_engine import TorchEngine
    from zerolayer.models.importer import ensure_model
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = load_config()
    model = cfg.default_model
    model_dir = ensure_model(cfg, model)
    tc = cfg.models[model].tiers[tier]
    folder = cfg.artifact_dir(model, tier)
    summary = cfg.artifact_root(model) / "silence_map" / "silence_map.json"
    thresholds = json.loads(summary.read_text())["mlp"]["thresholds"]
    engine = TorchEngine(
        str(model_dir),
        artifact="dense" if folder is None else tc.build_tier() or "dense",
        artifact_dir=None if folder is None else str(folder),
        max_model_len=cfg.models[model].max_model_len,
        max_num_seqs=max(args.streams),
        kv_cache_gib=1,
        live_thresholds=thresholds,
    )
    prompts = PromptBuilder(model_dir)
    chats = [prompts.chat([{"role": "user", "content": p}]) for p in PROMPTS]
    await engine.start()
    cases = [(r, s) for r in [0.0, *args.rates] for s in args.streams]
    tps: dict[tuple[float, int], list[float]] = {c: [] for c in cases}
    try:
        for s in args.streams:  # warm-up (kernels, allocator)
            await _run(engine, chats[:s], 8)
        rng = random.Random(0)
        for k in range(args.repeats):
            order = list(cases)
            rng.shuffle(order)
            for rate, streams in order:
                engine.set_sample_rate(rate)
                tps[(rate, streams)].append(await _run(engine, chats[:streams], args.tokens))
                await engine.signals()  # drained, as a replica's recorder does
            print(f"{tier}: round {k + 1}/{args.repeats} done", flush=True)
    finally:
        await engine.shutdown()
    rows = []
    for rate, streams in cases:
        if rate == 0.0:
            continue
        rows.append(
            {
                "tier": tier,
                "rate": rate,
                "streams": streams,
                **ratio_fields(tps[(rate, streams)], tps[(0.0, streams)], "on", "off"),
            }
        )
    return {"tier": tier, "rows": rows}


def ratio_fields(
    candidate: list[float], baseline: list[float], name: str, base_name: str
) -> dict[str, float]:
    """The candidate's tokens/s over the baseline's, run by run (interleaved rounds): median,
    min and max of the ratios, and each side's median tokens/s."""
    ratios = [a / b for a, b in zip(candidate, baseline, strict=True)]
    return {
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": round(min(ratios), 4),
        "max_ratio": round(max(ratios), 4),
        f"median_tps_{base_name}": round(statistics.median(baseline), 1),
        f"median_tps_{name}": round(statistics.median(candidate), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tiers", default="dynamic,sparse24")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rates", default="0.01,0.05,1")
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    args.streams = [int(s) for s in args.streams.split(",")]
    results = [asyncio.run(measure(t, args)) for t in args.tiers.split(",")]
    rows = [r for res in results for r in res["rows"]]
    print("\n| tier | sampling rate | streams | tokens/s off | on | ratio (median) | spread |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['tier']} | {r['rate']:g} | {r['streams']} | {r['median_tps_off']} | "
            f"{r['median_tps_on']} | {r['median_ratio']:.3f} | "
            f"{r['min_ratio']:.3f}-{r['max_ratio']:.3f} |"
        )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "benchmarks/live_overhead.py "
        + f"--tiers {args.tiers} --rates {','.join(f'{r:g}' for r in args.rates)} "
        + f"--tokens {args.tokens} --repeats {args.repeats}",
        "rows": rows,
    }
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nresults: {args.results}")


if __name__ == "__main__":
    main()
