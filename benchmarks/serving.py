"""What the platform costs: the same 32 prompts (64 new tokens each) sent
  (a) straight to a vLLM engine in this process, all at once, and
  (b) through the platform over HTTP (Ray Serve proxy -> gateway -> replica -> vLLM) by 32
      concurrent clients,
both in every round, in a shuffled order, for --repeats rounds after one warm-up round. Prints
tokens/s of each round, the median of the per-round ratios b/a and their spread; writes
benchmarks/results/serving.json (serving-stream.json with --stream). With --cpu it also prints,
per path, the CPU seconds every process group used while that path ran (where the cores went).

  .venv/bin/python benchmarks/serving.py [--stream] [--repeats N] [--cpu]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
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
RESULTS = Path(__file__).resolve().parent / "results"


def _group(proc: Any) -> str:
    """A process's name, prefixed by whose it is: the platform's (under a Ray worker or Ray's
    own servers) or this benchmark's in-process engine."""
    name = proc.name()
    if name.startswith(("ray::", "raylet", "gcs_server", "redis", "valkey")):
        return name
    try:
        for parent in proc.parents():
            if parent.name().startswith(("ray::", "raylet")):
                return f"platform {name}"
    except Exception:
        pass
    return f"bench {name}"


class CpuMeter:
    """CPU seconds (user + system) each process group of this user used between start() and
    stop(), summed over the rounds."""

    def __init__(self) -> None:
        self.totals: dict[str, dict[str, float]] = {}
        self._before: dict[int, tuple[str, float]] = {}

    @staticmethod
    def _sample() -> dict[int, tuple[str, float]]:
        import os

        import psutil

        out = {}
        for proc in psutil.process_iter():
            try:
                if proc.uids().real != os.getuid():
                    continue
                t = proc.cpu_times()
                out[proc.pid] = (_group(proc), t.user + t.system)
            except Exception:
                continue
        return out

    def start(self) -> None:
        self._before = self._sample()

    def stop(self, phase: str) -> None:
        after = self._sample()
        acc = self.totals.setdefault(phase, {})
        for pid, (group, sec) in after.items():
            used = sec - self._before.get(pid, (group, 0.0))[1]
            if used > 0:
                acc[group] = acc.get(group, 0.0) + used

    def report(self) -> dict[str, dict[str, float]]:
        return {
            phase: dict(
                sorted(
                    ((g, round(s, 1)) for g, s in acc.items() if s >= 0.05), key=lambda kv: -kv[1]
                )
            )
            for phase, acc in self.totals.items()
        }


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
    to), with every plan reduced to it, and admission control off: 32 requests at once queue
    past its threshold in vLLM, and a round started within its window of the last one would be
    shed (503) for the dev key's plan."""
    data = cfg.model_dump()
    data["gateway"]["queue_wait_threshold_ms"] = 1e9
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
    ap.add_argument("--repeats", type=int, default=5, help="measured rounds (after one warm-up)")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--stream", action="store_true", help="clients stream (SSE) instead of one JSON reply"
    )
    ap.add_argument("--cpu", action="store_true", help="CPU seconds per process group and path")
    ap.add_argument("--seed", type=int, default=0, help="seed of the per-round order")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out = args.out or RESULTS / ("serving-stream.json" if args.stream else "serving.json")
    order = random.Random(args.seed)
    meter = CpuMeter() if args.cpu else None

    from zerolayer.config import VllmTier, load_config
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
    assert isinstance(tier, VllmTier), "the baseline tier is served by vLLM"
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
            paths = ["engine", "platform"]
            order.shuffle(paths)
            got: dict[str, tuple[int, float]] = {}
            for path in paths:
                if meter and rnd:
                    meter.start()
                if path == "engine":
                    coro = run_engine(engine, prompts, args.requests, args.max_tokens)
                else:
                    coro = run_platform(
                        platform.base_url,
                        platform.key or "",
                        args.requests,
                        args.max_tokens,
                        args.stream,
                    )
                got[path] = loop.run_until_complete(coro)
                if meter and rnd:
                    meter.stop(path)
            (tok_a, sec_a), (tok_b, sec_b) = got["engine"], got["platform"]
            a, b = tok_a / sec_a, tok_b / sec_b
            label = "warm-up" if rnd == 0 else f"round {rnd}"
            print(
                f"{label:8s} {paths[0]:8s} first  engine {a:8.1f} tok/s ({tok_a} tok)  "
                f"platform {b:8.1f} tok/s ({tok_b} tok)  ratio {b / a:.3f}",
                flush=True,
            )
            if rnd:
                rows.append((a, b, b / a, paths[0]))
        loop.run_until_complete(engine.shutdown())
    finally:
        platform.stop()

    ratios = [r[2] for r in rows]
    result: dict[str, Any] = {
        "engine_tokens_per_s": round(statistics.median(r[0] for r in rows), 1),
        "platform_tokens_per_s": round(statistics.median(r[1] for r in rows), 1),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        "rounds": [
            {"first": first, "engine": round(a, 1), "platform": round(b, 1), "ratio": round(r, 3)}
            for a, b, r, first in rows
        ],
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "client_streams": args.stream,
        "command": "python benchmarks/serving.py"
        + (" --stream" if args.stream else "")
        + f" --repeats {args.repeats}"
        + (" --cpu" if args.cpu else ""),
    }
    if meter:
        result["cpu_seconds"] = meter.report()
        for phase, groups in result["cpu_seconds"].items():
            print(f"CPU seconds while the {phase} path ran ({args.repeats} rounds):")
            for group, sec in groups.items():
                print(f"  {sec:8.1f}  {group}")
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "engine_tokens_per_s",
                    "platform_tokens_per_s",
                    "ratio",
                    "ratio_min",
                    "ratio_max",
                )
            }
        )
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
