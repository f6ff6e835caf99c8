"""What the platform costs: the same 32 prompts (64 new tokens each) sent
  (a) straight to a vLLM engine in this process, all at once, and
  (b) through the platform over HTTP (Ray Serve proxy -> gateway -> replica -> vLLM) by 32
      concurrent clients,
interleaved a, b, a, b, ... for --repeats rounds after one warm-up round. Prints tokens/s of each
round and the median of the per-round ratios b/a; writes benchmarks/results/serving.json.

  .venv/bin/python benchmarks/serving.py [--stream] [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

TOPICS = [
    "a lighthouse keeper",
    "the moon",
    "a lost umbrella",
    "coffee",
    "a robot learning to paint",
    "winter in a small town",
    "the ocean at night",
    "a library",
    "an old bicycle",
    "rain",
    "a chess game",
    "a mountain village",
    "the first day of school",
    "a garden",
    "trains",
    "a clockmaker",
    "a city at dawn",
    "a cat on a roof",
    "friendship",
    "a desert road",
    "a violin",
    "autumn leaves",
    "a bakery",
    "the stars",
    "a river",
    "a snowstorm",
    "a market",
    "a bridge",
    "a kite",
    "an island",
    "a forest path",
    "a letter never sent",
]
RESULTS = Path(__file__).resolve().parent / "results" / "serving.json"


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a short story about {TOPICS[i]}."}]


async def run_engine(engine: Any, prompts: Any, n: int, max_tokens: int) -> tuple[int, float]:
    from zerolayer.engines.base import SamplingSpec

    async def one(i: int) -> int:
        spec = SamplingSpec(
            request_id=uuid.uuid4().hex,
            prompt_token_ids=prompts.chat(messages(i)),
            max_tokens=max_tokens,
            temperature=0.0,
        )
        return sum([len(d.token_ids) async for d in engine.generate(spec)])

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(counts), time.perf_counter() - t0


async def run_platform(
    base_url: str, key: str, n: int, max_tokens: int, stream: bool
) -> tuple[int, float]:
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, timeout=600, limits=limits
    ) as http:

        async def one(i: int) -> int:
            body = {
                "model": "smollm2-135m:baseline",
                "messages": messages(i),
                "temperature": 0,
                "max_tokens": max_tokens,
            }
            if not stream:
                r = await http.post("/chat/completions", json=body)
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            used = 0
            async with http.stream("POST", "/chat/completions", json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        chunk = json.loads(line[6:])
                        if chunk.get("usage"):
                            used = chunk["usage"]["completion_tokens"]
            return used

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(i) for i in range(n)))
        return sum(counts), time.perf_counter() - t0


def baseline_only(cfg: Any) -> Any:
    """The platform config serving only each model's baseline tier (what this benchmark sends
    to), with every plan reduced to it."""
    data = cfg.model_dump()
    for model in data["models"].values():
        model["tiers"] = {"baseline": model["tiers"]["baseline"]}
    free = {"prompt_per_1k": 0.0, "completion_per_1k": 0.0}
    for plan in data["plans"].values():
        plan["tiers"], plan["default_tier"] = ["baseline"], "baseline"
        plan["prices"] = {"baseline": plan["prices"].get("baseline", free)}
    return type(cfg).model_validate(data)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds (after one warm-up)")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--stream", action="store_true", help="clients stream (SSE) instead of one JSON reply"
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    from zerolayer.config import load_config
    from zerolayer.engines.vllm_engine import VLLMEngine
    from zerolayer.models.importer import ensure_model
    from zerolayer.serve.launcher import Platform
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = baseline_only(load_config())
    if args.requests > len(TOPICS):
        sys.exit(f"at most {len(TOPICS)} requests")
    model = cfg.default_model
    mcfg = cfg.models[model]
    tier = mcfg.tiers["baseline"]
    model_dir = ensure_model(cfg, model)
    platform = Platform(cfg).start()
    engine = VLLMEngine(
        str(model_dir),
        dtype=tier.dtype,
        max_model_len=mcfg.max_model_len,
        kv_cache_gib=tier.kv_cache_gib,
        max_num_seqs=tier.max_ongoing_requests,
    )
    prompts = PromptBuilder(model_dir)
    rows = []
    try:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(engine.start())
        for rnd in range(args.repeats + 1):
            tok_a, sec_a = loop.run_until_complete(
                run_engine(engine, prompts, args.requests, args.max_tokens)
            )
            tok_b, sec_b = loop.run_until_complete(
                run_platform(
                    platform.base_url,
                    platform.key or "",
                    args.requests,
                    args.max_tokens,
                    args.stream,
                )
            )
            a, b = tok_a / sec_a, tok_b / sec_b
            label = "warm-up" if rnd == 0 else f"round {rnd}"
            print(
                f"{label:8s} engine {a:8.1f} tok/s ({tok_a} tok)  platform {b:8.1f} tok/s "
                f"({tok_b} tok)  ratio {b / a:.3f}",
                flush=True,
            )
            if rnd:
                rows.append((a, b, b / a))
        loop.run_until_complete(engine.shutdown())
    finally:
        platform.stop()

    result = {
        "engine_tokens_per_s": round(statistics.median(r[0] for r in rows), 1),
        "platform_tokens_per_s": round(statistics.median(r[1] for r in rows), 1),
        "ratio": round(statistics.median(r[2] for r in rows), 3),
        "rounds": [
            {"engine": round(a, 1), "platform": round(b, 1), "ratio": round(r, 3)}
            for a, b, r in rows
        ],
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "client_streams": args.stream,
        "command": "python benchmarks/serving.py" + (" --stream" if args.stream else ""),
    }
    print(
        json.dumps(
            {k: result[k] for k in ("engine_tokens_per_s", "platform_tokens_per_s", "ratio")}
        )
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
