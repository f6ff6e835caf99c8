"""What grammar-constrained decoding costs: decode throughput of requests under a JSON schema,
against the same requests unconstrained, on the same engine in one process (zerolayer's torch
engine and vLLM, the dense model).

Two schemas, each a list of at least 64 words (so a constrained answer cannot end before
--tokens tokens; the prompts ask for a long list, so the unconstrained answers run as long;
tokens/s counts the tokens each actually made): `plain` (strings of any length, as schemas
from pydantic models are) and `bounded` (each string at most 12 characters: a maxLength makes
the grammar's token mask far costlier to compute). Each round runs every (schema or none,
streams) case once in a shuffled order. Prints per engine, schema and streams the median
ratio of tokens/s (constrained / unconstrained) over the rounds and the spread; writes
benchmarks/results/structured.json.

  .venv/bin/python benchmarks/structured.py [--engines torch,vllm] [--repeats 5]
      [--streams 1,32] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "structured.json"
sys.path.insert(0, str(HERE))
from live_overhead import ratio_fields  # noqa: E402


def _words(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"words": {"type": "array", "items": item, "minItems": 64}},
        "required": ["words"],
        "additionalProperties": False,
    }


SCHEMAS = {
    "plain": _words({"type": "string"}),
    "bounded": _words({"type": "string", "maxLength": 12}),
}
TOPICS = ["animals", "colours", "cities", "foods", "tools", "plants", "sports", "jobs"]


async def _run(engine: Any, chats: list[list[int]], tokens: int, schema: str) -> float:
    """tokens/s of these requests run at once (under SCHEMAS[schema]; "": unconstrained)."""
    from zerolayer.engines.grammar import dumps
    from zerolayer.protocol import Constraint, SamplingSpec

    constraint = Constraint("json_schema", dumps(SCHEMAS[schema])) if schema else None

    async def one(ids: list[int]) -> int:
        n = 0
        spec = SamplingSpec(uuid.uuid4().hex, ids, tokens, 0.0, constraint=constraint)
        async for d in engine.generate(spec):
            n += len(d.token_ids)
        return n

    t0 = time.perf_counter()
    done = await asyncio.gather(*(one(ids) for ids in chats))
    return sum(done) / (time.perf_counter() - t0)


def _engine(name: str, model_dir: Path, streams: int) -> Any:
    if name == "torch":
        from zerolayer.engines.torch_engine import TorchEngine

        return TorchEngine(str(model_dir), max_model_len=1024, max_num_seqs=streams, kv_cache_gib=1)
    from zerolayer.engines.vllm_engine import VLLMEngine

    return VLLMEngine(str(model_dir), max_model_len=1024, kv_cache_gib=2, max_num_seqs=streams)


async def measure(name: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from zerolayer.config import load_config
    from zerolayer.models.importer import ensure_model
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = load_config()
    model_dir = ensure_model(cfg, cfg.default_model)
    prompts = PromptBuilder(model_dir)
    most = max(args.streams)
    chats = [
        prompts.chat(
            [{"role": "user", "content": f"List one hundred {TOPICS[i % len(TOPICS)]} as JSON."}]
        )
        for i in range(most)
    ]
    engine = _engine(name, model_dir, most)
    await engine.start()
    cases = [(c, s) for c in ("", *SCHEMAS) for s in args.streams]
    tps: dict[tuple[str, int], list[float]] = {c: [] for c in cases}
    try:
        for c, s in cases:  # warm-up (kernels, allocator, the grammar's compile cache)
            await _run(engine, chats[:s], 8, c)
        rng = random.Random(0)
        for k in range(args.repeats):
            order = list(cases)
            rng.shuffle(order)
            for schema, streams in order:
                got = await _run(engine, chats[:streams], args.tokens, schema)
                tps[(schema, streams)].append(got)
            print(f"{name}: round {k + 1}/{args.repeats} done", flush=True)
    finally:
        await engine.shutdown()
    rows = []
    for schema in SCHEMAS:
        for streams in args.streams:
            rows.append(
                {
                    "engine": name,
                    "schema": schema,
                    "streams": streams,
                    **ratio_fields(
                        tps[(schema, streams)], tps[("", streams)], "constrained", "free"
                    ),
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--engines", default="torch,vllm")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--streams", default="1,32")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    rows = [r for e in args.engines.split(",") for r in asyncio.run(measure(e, args))]
    print("\n| engine | schema | streams | tokens/s free | constrained | ratio (median) | spread |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['engine']} | {r['schema']} | {r['streams']} | {r['median_tps_free']} | "
            f"{r['median_tps_constrained']} | {r['median_ratio']:.3f} | "
            f"{r['min_ratio']:.3f}-{r['max_ratio']:.3f} |"
        )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "date": time.strftime("%Y-%m-%d"),
        "command": f"benchmarks/structured.py --engines {args.engines} --streams "
        + f"{','.join(map(str, args.streams))} --tokens {args.tokens} --repeats {args.repeats}",
        "rows": rows,
    }
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nresults: {args.results}")


if __name__ == "__main__":
    main()
