"""What keeping conversation state costs a continued turn, with the scripted fake engine behind
the platform (no model time, so the state's own cost is not hidden behind generation):

  stateful:  POST /v1/responses {"input": question, "previous_response_id": id}: the gateway
             reads the stored history from Redis, and stores the new response before it answers
  stateless: POST /v1/chat/completions with the whole history and the question in the body

Each client owns a history of --turns earlier turns (built through the Responses API, so both
sides send the model the same prompt) and continues from its end at every request (the history
does not grow between requests, so every request is the same size). Rounds run both modes in a
shuffled order, at 1 and at 32 concurrent clients, after one warm-up round; each records every
request's latency. Prints p50/p99 per round and the median of the per-round ratios
stateful/stateless (with their spread); writes benchmarks/results/conversations.json.

  .venv/bin/python benchmarks/conversations.py [--repeats 5] [--requests 320] [--turns 6]

With --cache it measures instead what the prefix cache gives a conversation, on an engine in
this process (the torch engine, or --engine vllm): a six-turn chat (a system prompt, questions,
the model's own greedy answers of up to --answer tokens, templated as the gateway does) run
turn by turn under one cache salt per round. At every turn it reports the share of the prompt's
tokens read from the prefix cache, and the time to the first token of that turn (warm) against
the same prompt under a salt never seen (cold: nothing cached, the same engine and code path),
the two in a shuffled order; median ratio warm/cold and spread over --repeats rounds; writes
benchmarks/results/conversations-cache.json.

  .venv/bin/python benchmarks/conversations.py --cache [--engine torch] [--repeats 7]
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

from gateway import SCRIPT, fake_config, pct

RESULTS = Path(__file__).resolve().parent / "results" / "conversations.json"
CACHE_RESULTS = RESULTS.with_name("conversations-cache.json")
SYSTEM = (
    "You are a patient geography tutor. Answer each question in two or three plain sentences, "
    "and connect it to what was said before when you can."
)
QUESTIONS = [
    "Where does the river Nile begin?",
    "Which countries does it flow through?",
    "Why was it important to ancient Egypt?",
    "How does the Aswan dam change its floods?",
    "What other long rivers are in Africa?",
    "Which of them carries the most water?",
]
MODEL = "smollm2-135m:baseline"
QUESTION = "And what follows from that, in a few words?"


async def histories(
    http: Any, root: str, clients: int, turns: int
) -> list[tuple[str, list[dict[str, str]]]]:
    """Per client: the id of the last of `turns` chained responses, and the same history as
    chat messages."""

    async def one(c: int) -> tuple[str, list[dict[str, str]]]:
        messages: list[dict[str, str]] = []
        prev = None
        for t in range(turns):
            text = f"Client {c}, question {t}: tell me about rivers, lakes and the sea."
            body: dict[str, Any] = {"model": MODEL, "input": text, "max_output_tokens": 16}
            if prev:
                body["previous_response_id"] = prev
            r = await http.post(root + "/v1/responses", json=body)
            r.raise_for_status()
            got = r.json()
            prev = got["id"]
            messages += [
                {"role": "user", "content": text},
                {"role": "assistant", "content": got["output"][0]["content"][0]["text"]},
            ]
        assert prev is not None
        return prev, messages

    return list(await asyncio.gather(*(one(c) for c in range(clients))))


async def load(
    http: Any,
    root: str,
    mode: str,
    chains: list[tuple[str, list[dict[str, str]]]],
    requests: int,
) -> list[float]:
    """Latencies (s) of `requests` continued turns, one client per chain."""
    latencies: list[float] = []
    left = [requests]

    async def client(prev: str, messages: list[dict[str, str]]) -> None:
        while left[0] > 0:
            left[0] -= 1
            if mode == "stateful":
                url = root + "/v1/responses"
                body: dict[str, Any] = {
                    "model": MODEL,
                    "input": QUESTION,
                    "previous_response_id": prev,
                    "max_output_tokens": 16,
                }
            else:
                url = root + "/v1/chat/completions"
                body = {
                    "model": MODEL,
                    "messages": messages + [{"role": "user", "content": QUESTION}],
                    "max_tokens": 16,
                }
            t0 = time.perf_counter()
            r = await http.post(url, json=body)
            latencies.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise RuntimeError(f"{url}: {r.status_code} {r.text[:200]}")
            got = r.json()
            text = (
                got["output"][0]["content"][0]["text"]
                if mode == "stateful"
                else got["choices"][0]["message"]["content"]
            )
            if text != "".join(SCRIPT):
                raise RuntimeError(f"{url}: unexpected reply {text!r}")

    await asyncio.gather(*(client(p, m) for p, m in chains))
    return latencies


async def _first(engine: Any, ids: list[int], tokens: int, salt: str) -> tuple[float, int, str]:
    """Time to the first token (s), the prompt tokens read from the cache, and the answer."""
    from zerolayer.protocol import SamplingSpec

    t0 = time.perf_counter()
    ttft, cached, text = 0.0, 0, ""
    async for d in engine.generate(
        SamplingSpec(uuid.uuid4().hex, ids, tokens, 0.0, cache_salt=salt)
    ):
        if not ttft:
            ttft, cached = time.perf_counter() - t0, d.cached_tokens or 0
        text += d.text
    return ttft, cached, text


async def measure_cache(args: argparse.Namespace) -> dict[str, Any]:
    from zerolayer.config import load_config
    from zerolayer.models.importer import ensure_model
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = load_config()
    model_dir = ensure_model(cfg, cfg.default_model)
    prompts = PromptBuilder(model_dir)
    if args.engine == "torch":
        from zerolayer.engines.torch_engine import TorchEngine

        engine: Any = TorchEngine(str(model_dir), max_model_len=2048, max_num_seqs=4)
    else:
        from zerolayer.engines.vllm_engine import VLLMEngine

        engine = VLLMEngine(str(model_dir), max_model_len=2048, kv_cache_gib=2, max_num_seqs=4)
    await engine.start()
    rng = random.Random(args.seed)
    turns = len(QUESTIONS)
    rows: list[dict[str, Any]] = []
    try:
        for rnd in range(args.repeats + 1):
            salt = uuid.uuid4().hex  # each round's conversation starts with nothing cached
            messages = [{"role": "system", "content": SYSTEM}]
            row: dict[str, Any] = {"turns": []}
            for t in range(turns):
                messages.append({"role": "user", "content": QUESTIONS[t]})
                ids = prompts.chat(messages)
                order = ["warm", "cold"]
                rng.shuffle(order)
                got: dict[str, tuple[float, int, str]] = {}
                for mode in order:
                    cold = mode == "cold"
                    tokens = 1 if cold else args.answer
                    got[mode] = await _first(
                        engine, ids, tokens, uuid.uuid4().hex if cold else salt
                    )
                (warm_s, cached, answer), cold_s = got["warm"], got["cold"][0]
                messages.append({"role": "assistant", "content": answer})
                row["turns"].append(
                    {
                        "prompt_tokens": len(ids),
                        "cached_tokens": cached,
                        "cached_share": round(cached / len(ids), 4),
                        "ttft_warm_ms": round(warm_s * 1000, 2),
                        "ttft_cold_ms": round(cold_s * 1000, 2),
                        "ratio": round(warm_s / cold_s, 4),
                    }
                )
            last = row["turns"][-1]
            label = "warm-up" if rnd == 0 else f"round {rnd}"
            print(
                f"{label:8s} turn {turns}: {last['prompt_tokens']} prompt tokens, "
                f"{last['cached_share']:.1%} cached, TTFT warm {last['ttft_warm_ms']:.1f} ms / "
                f"cold {last['ttft_cold_ms']:.1f} ms = {last['ratio']:.3f}",
                flush=True,
            )
            if rnd:
                rows.append(row)
    finally:
        await engine.shutdown()
    by_turn = []
    for t in range(turns):
        cells = [r["turns"][t] for r in rows]
        ratios = [c["ratio"] for c in cells]
        by_turn.append(
            {
                "turn": t + 1,
                "prompt_tokens": cells[0]["prompt_tokens"],
                "cached_share": statistics.median(c["cached_share"] for c in cells),
                "ttft_warm_ms": round(statistics.median(c["ttft_warm_ms"] for c in cells), 2),
                "ttft_cold_ms": round(statistics.median(c["ttft_cold_ms"] for c in cells), 2),
                "median_ratio": round(statistics.median(ratios), 4),
                "min_ratio": min(ratios),
                "max_ratio": max(ratios),
            }
        )
    return {
        "date": time.strftime("%Y-%m-%d"),
        "command": f"benchmarks/conversations.py --cache --engine {args.engine} "
        f"--repeats {args.repeats} --answer {args.answer}",
        "engine": args.engine,
        "turn6_cached_share": by_turn[-1]["cached_share"],
        "turn6_ttft_ratio": by_turn[-1]["median_ratio"],
        "target_cached_share": 0.8,
        "target_ttft_ratio": 0.5,
        "by_turn": by_turn,
        "rounds": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cache", action="store_true", help="measure the prefix cache instead")
    ap.add_argument("--engine", default="torch", help="with --cache: torch or vllm")
    ap.add_argument("--answer", type=int, default=64, help="with --cache: answer tokens at most")
    ap.add_argument("--repeats", type=int, default=5, help="measured rounds per client count")
    ap.add_argument("--requests", type=int, default=320, help="requests per round at 32 clients")
    ap.add_argument("--turns", type=int, default=6, help="earlier turns in each history")
    ap.add_argument("--seed", type=int, default=0, help="seed of the rounds' order")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.cache:
        out = asyncio.run(measure_cache(args))
        head = (
            "| turn | prompt tokens | cached share | TTFT warm ms | cold ms | warm/cold | spread |"
        )
        print("\n" + head)
        print("|---|---|---|---|---|---|---|")
        for r in out["by_turn"]:
            print(
                f"| {r['turn']} | {r['prompt_tokens']} | {r['cached_share']:.1%} | "
                f"{r['ttft_warm_ms']} | {r['ttft_cold_ms']} | {r['median_ratio']:.3f} | "
                f"{r['min_ratio']:.3f}-{r['max_ratio']:.3f} |"
            )
        path = args.out if args.out != RESULTS else CACHE_RESULTS
        if args.engine != "torch":
            path = path.with_name(f"{path.stem}-{args.engine}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"\nresults: {path}")
        return

    import httpx
    from zerolayer.config import load_config
    from zerolayer.serve.launcher import Platform

    rng = random.Random(args.seed)
    cfg = fake_config(load_config(), True)
    platform = Platform(cfg).start()
    results: dict[str, Any] = {}
    root = f"http://{cfg.host}:{cfg.port}"

    async def run() -> None:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        headers = {"Authorization": f"Bearer {platform.key}"}
        async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as http:
            chains = await histories(http, root, 32, args.turns)
            prompt = len(json.dumps(chains[0][1]))
            print(f"{args.turns} earlier turns per client ({prompt} characters of history)")
            for clients in (1, 32):
                n = args.requests if clients > 1 else max(50, args.requests // 4)
                rows = []
                for rnd in range(args.repeats + 1):
                    order = ["stateless", "stateful"]
                    rng.shuffle(order)
                    row: dict[str, Any] = {"order": order}
                    for mode in order:
                        lat = await load(http, root, mode, chains[:clients], n)
                        row[f"{mode}_p50_ms"] = round(pct(lat, 0.5), 2)
                        row[f"{mode}_p99_ms"] = round(pct(lat, 0.99), 2)
                    row["ratio_p50"] = round(row["stateful_p50_ms"] / row["stateless_p50_ms"], 3)
                    row["ratio_p99"] = round(row["stateful_p99_ms"] / row["stateless_p99_ms"], 3)
                    label = "warm-up" if rnd == 0 else f"round {rnd}"
                    print(
                        f"{clients:2d} clients {label:8s} stateless p50 "
                        f"{row['stateless_p50_ms']:7.2f} ms p99 {row['stateless_p99_ms']:7.2f}  "
                        f"stateful p50 {row['stateful_p50_ms']:7.2f} ms p99 "
                        f"{row['stateful_p99_ms']:7.2f}  ratio p50 {row['ratio_p50']:.3f}",
                        flush=True,
                    )
                    if rnd:
                        rows.append(row)
                keys = [k for k in rows[0] if k != "order"]
                summary = {k: round(statistics.median(r[k] for r in rows), 3) for k in keys}
                ratios = [r["ratio_p50"] for r in rows]
                summary["ratio_p50_spread"] = [min(ratios), max(ratios)]
                results[f"clients_{clients}"] = {**summary, "rounds": rows, "requests": n}

    try:
        asyncio.run(run())
    finally:
        platform.stop()
    out = {
        "ratio_p50_1": results["clients_1"]["ratio_p50"],
        "ratio_p99_1": results["clients_1"]["ratio_p99"],
        "ratio_p50_32": results["clients_32"]["ratio_p50"],
        "ratio_p99_32": results["clients_32"]["ratio_p99"],
        "target_ratio_p50_32": 1.1,
        "turns": args.turns,
        "engine": "fake (16 scripted tokens)",
        "by_clients": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "by_clients"}))


if __name__ == "__main__":
    main()
