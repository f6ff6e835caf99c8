"""What the Batch API does on the started platform (Ray Serve, Redis, the gateway's batch worker),
in three parts:

  machinery  a --lines batch of chat requests through the scripted fake engine (16 tokens, no
             model time): requests per second from creation to `completed`, --repeats batches
  tier       a --real-lines batch through a real torch tier (the dense model): completion
             tokens per second from creation to `completed`, against the same engine's offline
             throughput at its best batch size (8, 16 or 32 requests at once, found in this
             process before the platform starts; the same prompts and max_tokens), measured
             again beside each batch in --tier-repeats rounds (shuffled order): median of the
             per-round ratios and spread
  priority   interactive time to first token at 8 streaming clients (each pausing a random
             0 to --pause-s before each request), with a batch running and without, in
             --repeats interleaved rounds of --round-s seconds each (shuffled order): median
             of the per-round ratios of p50 TTFT (with / without) and spread

Targets: machinery at least 500 requests/s; tier at least 0.9 of offline; priority at most 1.2.
Writes benchmarks/results/batch.json.

  .venv/bin/python benchmarks/batch.py [--parts machinery,tier,priority] [--lines 1000]
      [--real-lines 96] [--tokens 48] [--repeats 5] [--tier-repeats 5] [--round-s 12]
      [--pause-s 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gateway import cpu_ms_per_request, fake_config, pct  # noqa: E402
from serving import CpuMeter  # noqa: E402

RESULTS = HERE / "results" / "batch.json"
MODEL = "smollm2-135m:baseline"
TOPICS = ["rivers", "lakes", "mountains", "deserts", "islands", "forests", "cities", "seas"]


def question(i: int) -> str:
    return f"Write three sentences about {TOPICS[i % len(TOPICS)]} (note {i})."


def batch_file(n: int, tokens: int) -> bytes:
    lines = []
    for i in range(n):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": question(i)}],
            "max_tokens": tokens,
            "temperature": 0,
        }
        lines.append(
            {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def run_batch(oc: Any, n: int, tokens: int) -> tuple[float, int, dict[str, Any]]:
    """Seconds from creation to completed, completion tokens of its answers, the batch."""
    made = oc.files.create(file=("in.jsonl", io.BytesIO(batch_file(n, tokens))), purpose="batch")
    t0 = time.perf_counter()
    batch = oc.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while True:
        got = oc.batches.retrieve(batch.id)
        if got.status in ("completed", "failed", "expired", "cancelled"):
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if got.status != "completed" or got.request_counts.failed:
        raise RuntimeError(f"batch ended {got.status}: {got.request_counts}")
    out = [json.loads(x) for x in oc.files.content(got.output_file_id).read().splitlines()]
    completion = sum(o["response"]["body"]["usage"]["completion_tokens"] for o in out)
    return wall, completion, got.model_dump()


def platform_with(cfg: Any, tier: dict[str, Any]) -> Any:
    """The platform config with one tier `baseline` as given, a benchmark plan, fast polling."""
    base = fake_config(cfg, True)
    data = base.model_dump()
    data["models"][cfg.default_model]["tiers"] = {"baseline": tier}
    data["batches"]["poll_s"] = 0.05
    return type(cfg).model_validate(data)


def machinery(cfg: Any, args: argparse.Namespace) -> dict[str, Any]:
    from openai import OpenAI
    from zerolayer.serve.launcher import Platform

    pcfg = fake_config(cfg, True)
    data = pcfg.model_dump()
    data["batches"]["poll_s"] = 0.05
    data["batches"]["concurrency"] = args.concurrency
    platform = Platform(type(cfg).model_validate(data)).start()
    try:
        oc = OpenAI(base_url=platform.base_url, api_key=platform.key, max_retries=0, timeout=600)
        run_batch(oc, 50, 16)  # warm-up
        rates = []
        meter = CpuMeter()  # where the CPU goes: per request and process role, over all batches
        for k in range(args.repeats):
            meter.start()
            wall, _, _ = run_batch(oc, args.lines, 16)
            meter.stop("batch")
            rates.append(args.lines / wall)
            print(
                f"machinery: batch {k + 1}: {args.lines} requests in {wall:.2f} s = "
                f"{rates[-1]:.0f}/s",
                flush=True,
            )
    finally:
        platform.stop()
    return {
        "lines": args.lines,
        "concurrency": args.concurrency,
        "median_lines_per_s": round(statistics.median(rates), 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "cpu_ms_per_request_by_role": cpu_ms_per_request(meter, "batch", args.lines * args.repeats),
        "target_lines_per_s": 500,
    }


class Offline:
    """The torch engine as the tier runs it (2 threads, its prefix cache, which the requests'
    shared chat template prefix hits), in this process on a loop of its own, kept for the whole
    run so that each round measures it again beside the tier: completion tokens/s over the same
    requests, `width` at once."""

    def __init__(self, model_dir: Path, prompts: Any, n: int, tokens: int):
        from zerolayer.engines.torch_engine import TorchEngine

        self.ids = [prompts.chat([{"role": "user", "content": question(i)}]) for i in range(n)]
        self.tokens = tokens
        self.engine = TorchEngine(
            str(model_dir), max_model_len=1024, max_num_seqs=32, kv_cache_gib=1, threads=2
        )
        self.runner = asyncio.Runner()
        self.runner.run(self.engine.start())

    def rate(self, width: int) -> float:
        return self.runner.run(self._rate(width))

    async def _rate(self, width: int) -> float:
        from zerolayer.protocol import SamplingSpec

        gate = asyncio.Semaphore(width)

        async def one(x: list[int]) -> int:
            async with gate:
                spec = SamplingSpec(uuid.uuid4().hex, x, self.tokens, 0.0)
                return sum([len(d.token_ids) async for d in self.engine.generate(spec)])

        t0 = time.perf_counter()
        made = sum(await asyncio.gather(*(one(x) for x in self.ids)))
        return made / (time.perf_counter() - t0)

    def close(self) -> None:
        self.runner.run(self.engine.shutdown())
        self.runner.close()


def tier(cfg: Any, args: argparse.Namespace) -> dict[str, Any]:
    from openai import OpenAI
    from zerolayer.models.importer import ensure_model
    from zerolayer.serve.launcher import Platform
    from zerolayer.tokenfix.prompt import PromptBuilder

    model_dir = ensure_model(cfg, cfg.default_model)
    off = Offline(model_dir, PromptBuilder(model_dir), args.real_lines, args.tokens)
    rng = random.Random(args.seed)
    rows = []
    try:
        off.rate(8)  # warm-up
        best = {w: off.rate(w) for w in (8, 16, 32)}
        width = max(best, key=lambda w: best[w])
        print(f"offline tokens/s by requests at once: {best}", flush=True)
        platform = Platform(platform_with(cfg, torch_tier(args))).start()
        try:
            oc = OpenAI(
                base_url=platform.base_url, api_key=platform.key, max_retries=0, timeout=600
            )
            run_batch(oc, 8, 8)  # warm-up
            for k in range(args.tier_repeats):
                order = ["offline", "tier"]
                rng.shuffle(order)
                row: dict[str, Any] = {}
                for what in order:
                    if what == "offline":
                        row["offline"] = off.rate(width)
                    else:
                        wall, completion, _ = run_batch(oc, args.real_lines, args.tokens)
                        row["tier"] = completion / wall
                row["ratio"] = row["tier"] / row["offline"]
                rows.append({k: round(v, 4) for k, v in row.items()})
                print(
                    f"tier: round {k + 1}: {row['tier']:.1f} tokens/s, offline "
                    f"{row['offline']:.1f} = {row['ratio']:.3f}",
                    flush=True,
                )
        finally:
            platform.stop()
    finally:
        off.close()
    ratios = [r["ratio"] for r in rows]
    return {
        "lines": args.real_lines,
        "max_tokens": args.tokens,
        "offline_tokens_per_s": {str(k): round(v, 1) for k, v in best.items()},
        "offline_best_width": width,
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": round(min(ratios), 4),
        "max_ratio": round(max(ratios), 4),
        "rounds": rows,
        "target_ratio": 0.9,
    }


def torch_tier(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "engine": "torch",
        "artifact": "dense",
        "max_ongoing_requests": 64,  # as the shipped torch tiers
        "kv_cache_gib": 1,
        "threads": 2,  # as the shipped torch tiers: Ray gives num_cpus < 1 one thread
        "ray_actor_options": {"num_cpus": 0.5, "num_gpus": 0},
    }


def _token_chunk(line: str) -> bool:
    """Whether an SSE line is a chunk that carries generated text (not the first chunk, whose
    delta only names the role: the gateway sends it once a replica took the request)."""
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


async def ttft(
    http: Any, root: str, clients: int, seconds: float, pause_s: float, seed: int
) -> list[float]:
    """Times to first token (the first chunk with text) of streamed chat requests sent by
    `clients` for `seconds`, each client pausing a random 0 to `pause_s` before each request
    (so the clients' requests do not arrive in lockstep, each round in a phase of its own)."""
    out: list[float] = []
    end = time.monotonic() + seconds

    async def client(c: int) -> None:
        i = 0
        rng = random.Random(seed * 1000 + c)
        while time.monotonic() < end:
            await asyncio.sleep(rng.uniform(0, pause_s))
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": question(1000 + c * 100 + i)}],
                "max_tokens": 16,
                "stream": True,
            }
            t0 = time.perf_counter()
            async with http.stream("POST", root + "/v1/chat/completions", json=body) as r:
                first = None
                async for line in r.aiter_lines():
                    if first is None and _token_chunk(line):
                        first = time.perf_counter() - t0
                if first is not None:
                    out.append(first)
            i += 1

    await asyncio.gather(*(client(c) for c in range(clients)))
    return out


def priority(cfg: Any, args: argparse.Namespace) -> dict[str, Any]:
    import httpx
    from openai import OpenAI
    from zerolayer.serve.launcher import Platform

    platform = Platform(platform_with(cfg, torch_tier(args))).start()
    rng = random.Random(args.seed)
    rows = []
    try:
        oc = OpenAI(base_url=platform.base_url, api_key=platform.key, max_retries=0, timeout=600)
        root = platform.base_url.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {platform.key}"}

        async def measure(with_batch: bool) -> float:
            async with httpx.AsyncClient(headers=headers, timeout=120) as http:
                batch = None
                if with_batch:
                    data = batch_file(400, args.tokens)
                    made = oc.files.create(file=("b.jsonl", io.BytesIO(data)), purpose="batch")
                    batch = oc.batches.create(
                        input_file_id=made.id,
                        endpoint="/v1/chat/completions",
                        completion_window="24h",
                    )
                    while oc.batches.retrieve(batch.id).request_counts.completed < 4:
                        await asyncio.sleep(0.1)
                got = await ttft(http, root, 8, args.round_s, args.pause_s, rng.randrange(1 << 30))
                if batch is not None:
                    oc.batches.cancel(batch.id)
                    while oc.batches.retrieve(batch.id).status != "cancelled":
                        await asyncio.sleep(0.1)
                return pct(got, 0.5)  # milliseconds

        asyncio.run(measure(False))  # warm-up
        for k in range(args.repeats):
            order = [False, True]
            rng.shuffle(order)
            row: dict[str, Any] = {}
            for with_batch in order:
                row["with" if with_batch else "without"] = asyncio.run(measure(with_batch))
            row["ratio"] = row["with"] / row["without"]
            rows.append(row)
            print(
                f"priority: round {k + 1}: p50 TTFT without {row['without']:.0f} ms, "
                f"with a batch {row['with']:.0f} ms = {row['ratio']:.3f}",
                flush=True,
            )
    finally:
        platform.stop()
    ratios = [r["ratio"] for r in rows]
    return {
        "clients": 8,
        "round_s": args.round_s,
        "pause_s": args.pause_s,
        "median_ratio": round(statistics.median(ratios), 4),
        "min_ratio": round(min(ratios), 4),
        "max_ratio": round(max(ratios), 4),
        "rounds": rows,
        "target_ratio": 1.2,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--parts", default="machinery,tier,priority")
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=48, help="batches.concurrency (machinery)")
    ap.add_argument("--real-lines", type=int, default=96)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tier-repeats", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=12.0)
    ap.add_argument("--pause-s", type=float, default=0.2, help="priority clients' longest pause")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    from zerolayer.config import load_config

    cfg = load_config()
    parts = args.parts.split(",")
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv)}
    if args.out.exists():
        out = {**json.loads(args.out.read_text()), **out}
    for name, run in (("machinery", machinery), ("tier", tier), ("priority", priority)):
        if name in parts:
            out[name] = run(cfg, args)
            print(json.dumps({name: {k: v for k, v in out[name].items() if k != "rounds"}}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
