"""Decode steps of several rows with and without oneDNN's products (the torch engine on a CPU).

A decode step of n sequences multiplies an n-row input by every layer's weights, which are cold
in memory by then (the step reads all of them). Torch's matmul over the input-major weights the
compiled single-stream step needs runs those products far below the CPU's rate at 8-64 rows;
oneDNN's inner product over an output-major copy does better. This script loads the model twice
(onednn on and off) in one process and times decode steps of 1, 8, 32 and 64 rows (each row a
120-token prompt prefilled first) and a 128-token prefill part, in shuffled interleaved rounds;
ratios are medians of per-round ratios (on against off), with their spread.

  .venv/bin/python benchmarks/batch_products.py [--repeats 5] [--artifact dense|dynamic]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

ROWS = (1, 8, 32, 64)
CONTEXT = 120
STEPS = 6


def _setup(model: Any, rows: int) -> Any:
    from zerolayer.engines.torch_engine import SlotCache
    from zerolayer.engines.torch_engine.model import Prompt

    cache = SlotCache(model.shape, torch.float32, model.device, CONTEXT + 200)
    cache.ensure(rows, CONTEXT + 200)
    model.prefill_many([Prompt(list(range(100, 100 + CONTEXT)), s) for s in range(rows)], cache)
    return cache


def _step_s(model: Any, cache: Any, rows: int) -> float:
    t = time.perf_counter()
    for i in range(STEPS):
        model.decode([200] * rows, [CONTEXT + i] * rows, cache)
    return (time.perf_counter() - t) / STEPS


def _prefill_s(model: Any, cache: Any) -> float:
    from zerolayer.engines.torch_engine.model import Prompt

    t = time.perf_counter()
    model.prefill_many([Prompt(list(range(300, 428)), 0, CONTEXT)], cache)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--artifact", default="dense", choices=("dense", "dynamic"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/batch_products.json"))
    args = ap.parse_args()

    from zerolayer.config import load_config
    from zerolayer.engines.torch_engine import load_llama

    cfg = load_config()
    name = cfg.default_model
    folder = Path(cfg.cache_dir) / "artifacts" / name / args.artifact
    kind = (args.artifact, folder) if args.artifact != "dense" else ("dense", None)
    models = {flag: load_llama(cfg.model_dir(name), *kind, onednn=flag) for flag in (True, False)}
    if not models[True].onednn:
        raise SystemExit("oneDNN does not run here (not a CPU build with it): nothing to compare")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.artifact}, "
        f"{args.repeats} rounds (+1 warm-up); output-major copies "
        f"{models[True].report.batch_copy_bytes / 2**20:.0f} MiB"
    )
    caches = {(flag, n): _setup(m, n) for flag, m in models.items() for n in ROWS}
    cells = [(flag, n) for flag in models for n in ROWS] + [(flag, "prefill") for flag in models]
    seen: dict[tuple[bool, Any], list[float]] = {c: [] for c in cells}
    rng = random.Random(0)
    for r in range(args.repeats + 1):
        rng.shuffle(cells)
        for flag, n in cells:
            m = models[flag]
            if n == "prefill":
                got = _prefill_s(m, caches[(flag, 1)])
            else:
                got = _step_s(m, caches[(flag, n)], int(n))
            if r:  # the first round warms the allocator and oneDNN's primitive cache
                seen[(flag, n)].append(got)
        print(f"round {r}/{args.repeats} done", flush=True)
    rows: dict[str, Any] = {}
    print(f"{'step':10s} {'on ms':>8s} {'off ms':>8s}  off/on (rounds)")
    for n in (*ROWS, "prefill"):
        on, off = seen[(True, n)], seen[(False, n)]
        ratios = sorted(b / a for a, b in zip(on, off, strict=True))
        label = f"{n} rows" if n != "prefill" else "prefill 128"
        rows[label] = {
            "on_ms": round(statistics.median(on) * 1e3, 1),
            "off_ms": round(statistics.median(off) * 1e3, 1),
            "speedup": round(statistics.median(ratios), 3),
            "low": round(ratios[0], 3),
            "high": round(ratios[-1], 3),
        }
        x = rows[label]
        print(
            f"{label:12s} {x['on_ms']:8.1f} {x['off_ms']:8.1f}  {x['speedup']:.3f} "
            f"({x['low']:.2f}-{x['high']:.2f})"
        )
    args.out.write_text(
        json.dumps(
            {
                "artifact": args.artifact,
                "repeats": args.repeats,
                "threads": torch.get_num_threads(),
                "batch_copy_bytes": models[True].report.batch_copy_bytes,
                "measured": time.strftime("%Y-%m-%d %H:%M"),
                "command": f"python benchmarks/batch_products.py --repeats {args.repeats} "
                f"--artifact {args.artifact}",
                "steps": rows,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
