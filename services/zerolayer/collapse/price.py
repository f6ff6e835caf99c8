"""What a tier costs to serve: its measured throughput per replica and the price of a replica-hour.

`zerolayer collapse price` starts each tier's engine as its replicas do (engines.build_engine with
the tier's settings and artifact), in a process of its own, and measures on chat prompts:
  decode  completion tokens/s at each of STREAMS concurrent streams (up to `tokens` greedy
          tokens each), and the p99 of the gaps between a stream's tokens (inter-token latency)
  prompt  prompt tokens/s over PREFILL_PROMPTS long prompts, PREFILL_AT_ONCE at a time, one
          output token each
and the objective: the most streams whose p99 inter-token latency is within the tier's
`p99_itl_ms` (models.yaml); its throughput is what a replica sells while keeping the objective.
Every request has a cache salt of its own, so no prompt is read from the prefix cache.

  cost_per_1m_tokens = replica_hour_usd / (tokens/s x 3600) x 1e6
for completion tokens at the objective's throughput and for prompt tokens at the prefill
throughput, with the replica-hour price of the platform's hardware class (`hardware` in the serve
config). The figures go to <artifacts>/<model>/costs/<tier>.json and are served on the tier's card
(`cost`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from zerolayer.engines.timing import tagged, timed_request

__all__ = [
    "STREAMS",
    "cost_per_1m",
    "at_objective",
    "measure_tier",
    "price_tiers",
    "tiers_to_price",
]

STREAMS = (1, 2, 4, 8, 16, 32)
PREFILL_PROMPTS = 16
PREFILL_AT_ONCE = 4
TAG = "@zerolayer-price "  # marks the worker's result among whatever else reaches stdout


def cost_per_1m(replica_hour_usd: Decimal, tokens_per_s: float) -> str:
    """USD per million tokens at a throughput, as decimal text rounded to the micro-dollar."""
    if tokens_per_s <= 0:
        raise ValueError("a throughput of zero tokens per second has no price")
    usd = Decimal(replica_hour_usd) / (Decimal(repr(tokens_per_s)) * 3600) * 10**6
    return format(usd.quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP), "f")


def at_objective(rows: dict[int, dict[str, float]], p99_itl_ms: float) -> tuple[int, bool]:
    """The most streams whose p99 inter-token latency is within the objective, and whether any
    is (if none is, one stream: the least a replica serves)."""
    within = [s for s, r in rows.items() if r["p99_itl_ms"] <= p99_itl_ms]
    return (max(within), True) if within else (min(rows), False)


# worker ----------------------------------------------------------------------------------------
def _chats(tokenizer: Any, n: int, long: bool = False) -> list[list[int]]:
    from zerolayer.collapse.chat import chat_prompts

    questions = chat_prompts("evaluation")
    out = []
    for i in range(n):
        q = questions[i % len(questions)]
        if long:  # a long prompt: a document to read first
            q = " ".join(questions[(i + j) % len(questions)] for j in range(24)) + "\n" + q
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        out.append(list(tokenizer.encode(text, add_special_tokens=False)))
    return out


async def _measure(engine: Any, tokenizer: Any, streams: list[int], tokens: int) -> dict[str, Any]:
    await engine.start()
    try:
        # warm-up: kernels, first allocations
        await timed_request(engine, _chats(tokenizer, 1)[0], 8, fresh=True)
        rows: dict[int, dict[str, float]] = {}
        for s in streams:
            chats = _chats(tokenizer, s)
            t0 = time.perf_counter()
            runs = await asyncio.gather(
                *(timed_request(engine, ids, tokens, fresh=True) for ids in chats)
            )
            wall = time.perf_counter() - t0
            gaps = sorted(g for r in runs for g in r.gaps)
            p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else wall
            rows[s] = {
                "tokens_per_s": round(sum(r.tokens for r in runs) / wall, 3),
                "p99_itl_ms": round(p99 * 1000, 2),
                "median_itl_ms": round(statistics.median(gaps or [wall]) * 1000, 2),
            }
        long = _chats(tokenizer, PREFILL_PROMPTS, long=True)
        t0 = time.perf_counter()
        for k in range(0, len(long), PREFILL_AT_ONCE):
            batch = long[k : k + PREFILL_AT_ONCE]
            await asyncio.gather(*(timed_request(engine, ids, 1, fresh=True) for ids in batch))
        prefill = sum(len(p) for p in long) / (time.perf_counter() - t0)
        info = engine.info()
    finally:
        await engine.shutdown()
    import torch

    return {
        "streams": rows,
        "prefill_tokens_per_s": round(prefill, 3),
        "gpu": bool(torch.cuda.is_available()),
        # what the replica computed in on this machine (a bfloat16 artifact serves float32 on a
        # CPU without bfloat16 products), and the processor: one class spans several
        "weight_dtype": info.get("weight_dtype", info.get("dtype")),
        "processor": _processor(),
    }


def _processor() -> str:
    """The CPU's model name (or the GPU's), as the operating system reports it."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _worker(spec: dict[str, Any]) -> None:
    """Measure the engine the spec describes (measure_tier's) and print the figures."""
    from pydantic import TypeAdapter
    from transformers import AutoTokenizer

    from zerolayer.config import KernelConfig, TierConfig
    from zerolayer.engines import build_engine

    tier = TypeAdapter(TierConfig).validate_python(spec["tier"])
    engine = build_engine(
        spec["model_dir"],
        tier,
        spec["max_model_len"],
        spec["artifact_dir"],
        KernelConfig.model_validate(spec["kernels"]),
    )
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    result = asyncio.run(_measure(engine, tokenizer, spec["streams"], spec["tokens"]))
    print(TAG + json.dumps(result), flush=True)


# parent ----------------------------------------------------------------------------------------
def measure_tier(
    cfg: Any, model: str, tier: str, streams: list[int], tokens: int
) -> dict[str, Any]:
    """One tier's throughput figures, measured in a process of its own (its engine's memory
    and threads are its own, as on a replica), on the engine this config gives the tier."""
    from zerolayer.models.importer import ensure_model

    folder = cfg.served_artifact_dir(model, tier)
    spec = {
        "model_dir": str(ensure_model(cfg, model)),
        "tier": cfg.models[model].tiers[tier].model_dump(mode="json"),
        "max_model_len": cfg.models[model].max_model_len,
        "artifact_dir": str(folder) if folder else None,
        "kernels": cfg.kernels.model_dump(mode="json"),
        "streams": streams,
        "tokens": tokens,
    }
    run = subprocess.run(
        [sys.executable, "-m", "zerolayer.collapse.price"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "TQDM_DISABLE": "1"},
        check=False,
    )
    for line in run.stdout.splitlines():
        if (got := tagged(line, TAG)) is not None:
            return got
    raise RuntimeError(f"measuring {model}:{tier} failed ({run.returncode}): {run.stderr[-2000:]}")


def tiers_to_price(cfg: Any, model: str, kinds: set[str], dense: bool = True) -> list[str]:
    """The served tiers a build of these artifact kinds makes (their cost is measured again),
    and with `dense` the dense tiers whose cost was never measured."""
    from zerolayer.artifacts.cost import read_cost

    root = cfg.artifact_root(model)
    return [
        t
        for t, tc in cfg.models[model].tiers.items()
        if tc.engine != "fake"
        and (
            tc.build_tier() in kinds
            or (dense and tc.build_tier() is None and read_cost(root, t) is None)
        )
    ]


def price_tiers(
    cfg: Any,
    model: str,
    tiers: list[str],
    streams: list[int] | None = None,
    tokens: int = 64,
    progress: Any = print,
    measured_by: str = "zerolayer collapse price",
) -> dict[str, dict[str, Any]]:
    """Measure each tier and write its cost file; the figures per tier. `measured_by` says how
    (a background build measures at its lower CPU priority, on a machine that serves)."""
    from zerolayer.artifacts import card_stamp
    from zerolayer.artifacts.cost import write_cost

    streams = sorted(set(streams or STREAMS))
    hw = cfg.hardware
    cls = hw.classes[hw.hardware_class]
    root = cfg.artifact_root(model)
    out: dict[str, dict[str, Any]] = {}
    for tier in tiers:
        tc = cfg.models[model].tiers[tier]
        progress(f"price {model}:{tier}: measuring {tc.engine} at {streams} streams")
        got = measure_tier(cfg, model, tier, streams, tokens)
        if bool(got.get("gpu")) != cls.gpu:
            raise RuntimeError(
                f"price {model}:{tier}: the hardware class {hw.hardware_class} is "
                f"{'a GPU' if cls.gpu else 'CPU-only'}, but this machine "
                f"{'has' if got.get('gpu') else 'has no'} GPU: its figures would not be that "
                "class's (measure where the tier's replicas run)"
            )
        rows = {int(s): r for s, r in got["streams"].items()}
        best, met = at_objective(rows, tc.p99_itl_ms)
        tps = rows[best]["tokens_per_s"]
        figures = {
            "tier": tier,
            "engine": tc.engine,
            "artifact": tc.artifact,
            "artifact_stamp": card_stamp(cfg.served_artifact_dir(model, tier)),
            "hardware_class": hw.hardware_class,
            "replica_hour_usd": str(cls.replica_hour_usd),
            "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "measured_by": measured_by,
            "tokens": tokens,
            "weight_dtype": got.get("weight_dtype"),
            "processor": got.get("processor"),
            "tokens_per_s": {
                "1": rows[min(rows)]["tokens_per_s"],
                str(max(rows)): rows[max(rows)]["tokens_per_s"],
                "objective": tps,
            },
            "objective": {"p99_itl_ms": tc.p99_itl_ms, "streams": best, "met": met},
            "streams": {str(s): r for s, r in rows.items()},
            "prefill_tokens_per_s": got["prefill_tokens_per_s"],
            "cost_per_1m_tokens": {
                "prompt": cost_per_1m(cls.replica_hour_usd, got["prefill_tokens_per_s"]),
                "completion": cost_per_1m(cls.replica_hour_usd, tps),
            },
        }
        write_cost(root, tier, figures)
        c = figures["cost_per_1m_tokens"]
        progress(
            f"price {model}:{tier}: {tps:.1f} tokens/s at {best} streams (p99 ITL "
            f"{rows[best]['p99_itl_ms']:.0f} ms, objective {tc.p99_itl_ms:.0f}"
            f"{'' if met else ', not met'}); ${c['prompt']} / ${c['completion']} per 1M "
            f"prompt / completion tokens on {hw.hardware_class}"
        )
        out[tier] = figures
    return out


if __name__ == "__main__":  # the worker: its spec as JSON on stdin
    _worker(json.loads(sys.stdin.read()))
