"""Chunked prefill in the torch engine: what a long prompt arriving mid-stream costs the streams
already decoding, with the step's prefill budget while streams decode (prefill_tokens_busy) at
the whole budget (1024: the prompt goes in 1024-token parts) and at the CPU default (128).

  arrival   8 streams decode a short chat answer (48 tokens, greedy); 1.5 s in, a prompt of about
            1,500 tokens arrives. Reported: the streams' longest gap between two tokens, their
            p99 gap, and the long prompt's time to first token.
  lockstep  (--lockstep TIER) the tier's engine measured as `zerolayer collapse price` does
            (8 and 32 streams sent at once, 64 tokens each), with each pair of budgets given as
            the tier's engine_args: tokens/s and p99 inter-token latency.

Settings alternate in a seeded shuffle within each round; --repeats rounds; medians with the
lowest and highest round. Writes benchmarks/results/chunked_prefill.json.

  .venv/bin/python benchmarks/chunked_prefill.py [--repeats 5] [--lockstep dynamic]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "chunked_prefill.json"
BUSY = (1024, 128)  # prefill_tokens_busy: the whole budget, the CPU default
LOCKSTEP = ("1024/1024", "1024/128", "128/128")  # prefill_tokens / prefill_tokens_busy


async def arrival(
    model_dir: Path, short: list[int], long: list[int], busy: int
) -> dict[str, float]:
    from zerolayer.engines.base import SamplingSpec
    from zerolayer.engines.torch_engine import TorchEngine

    engine = TorchEngine(
        str(model_dir), max_model_len=2048, prefill_tokens=1024, prefill_tokens_busy=busy
    )
    await engine.start()
    salt = f"{busy}-{time.time()}"  # nothing from the prefix cache
    try:
        gaps: list[float] = []

        async def stream(i: int) -> None:
            last = None
            async for _ in engine.generate(SamplingSpec(f"s{i}", short, 48, 0.0, cache_salt=salt)):
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now

        streams = [asyncio.ensure_future(stream(i)) for i in range(8)]
        await asyncio.sleep(1.5)
        t0 = time.perf_counter()
        ttft = None
        async for _ in engine.generate(SamplingSpec("long", long, 4, 0.0, cache_salt=salt)):
            ttft = ttft or time.perf_counter() - t0
        await asyncio.gather(*streams)
        gaps.sort()
        assert ttft is not None
        return {
            "max_gap_s": round(gaps[-1], 3),
            "p99_gap_s": round(gaps[int(0.99 * len(gaps))], 3),
            "long_ttft_s": round(ttft, 3),
            "chunks": engine.counters["prefill_chunks"],
        }
    finally:
        await engine.shutdown()


def lockstep(cfg: Any, tier: str, pair: str) -> dict[str, Any]:
    from zerolayer.collapse.price import measure_tier

    whole, busy = (int(x) for x in pair.split("/"))
    model = cfg.default_model
    cfg.models[model].tiers[tier].engine_args = {
        "prefill_tokens": whole,
        "prefill_tokens_busy": busy,
    }
    got = measure_tier(cfg, model, tier, [8, 32], 64)
    return {
        str(s): {"tokens_per_s": r["tokens_per_s"], "p99_itl_ms": r["p99_itl_ms"]}
        for s, r in got["streams"].items()
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lockstep", metavar="TIER", help="also measure this tier in lockstep")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()

    from zerolayer.config import load_config
    from zerolayer.models.importer import ensure_model
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = load_config()
    model_dir = ensure_model(cfg, cfg.default_model)
    prompts = PromptBuilder(model_dir)
    short = prompts.chat([{"role": "user", "content": "Count from 1 to 50."}])
    text = " ".join(
        f"Paragraph {i}: the river runs past the old mill and the children watch the boats."
        for i in range(80)
    )
    long = prompts.chat([{"role": "user", "content": text + " Summarise."}])
    rng = random.Random(args.seed)
    rounds: dict[str, list[Any]] = {f"arrival busy={b}": [] for b in BUSY}
    if args.lockstep:
        rounds.update({f"lockstep {p}": [] for p in LOCKSTEP})
    for r in range(args.repeats):
        order = list(rounds)
        rng.shuffle(order)
        for name in order:
            if name.startswith("arrival"):
                got = asyncio.run(arrival(model_dir, short, long, int(name.split("=")[1])))
            else:
                got = lockstep(cfg, args.lockstep, name.split()[1])
            rounds[name].append(got)
            print(f"round {r + 1}/{args.repeats} {name}: {got}", flush=True)
    summary: dict[str, Any] = {}
    for name, runs in rounds.items():
        if name.startswith("arrival"):
            keys = ("max_gap_s", "p99_gap_s", "long_ttft_s")
            summary[name] = {k: spread([x[k] for x in runs]) for k in keys}
        else:
            summary[name] = {
                f"{s} {k}": spread([x[s][k] for x in runs])
                for s in ("8", "32")
                for k in ("tokens_per_s", "p99_itl_ms")
            }
    whole, chunked = rounds["arrival busy=1024"], rounds["arrival busy=128"]
    ratios = {
        k: spread([c[k] / w[k] for w, c in zip(whole, chunked, strict=True)])
        for k in ("max_gap_s", "long_ttft_s")
    }
    result = {
        "date": dt.date.today().isoformat(),
        "long_prompt_tokens": len(long),
        "repeats": args.repeats,
        "summary": summary,
        "ratio busy=128 / busy=1024": ratios,
        "rounds": rounds,
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"summary": summary, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
