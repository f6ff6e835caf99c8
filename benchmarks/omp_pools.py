"""What a second OpenMP thread pool costs the torch engine on a CPU.

GNU OpenMP keeps one pool of worker threads per thread that starts parallel regions. When the
threads it manages outnumber the cores, its idle workers stop spinning between regions and sleep,
so every region waits for a wake-up. The torch engine used to load its model on one thread
(asyncio.to_thread) and decode on another: two pools, on 2 cores more threads than cores. It now
loads on its worker thread. Two measurements, each configuration in a fresh process (the pools
are per process), in rounds whose order is drawn at random:

  region    microseconds per call of the compiled kernel on a 64 x 64 weight (almost nothing but
            the parallel region's start and end), from the only thread that ran regions ("one
            pool") and from a thread started after another one ran a region ("two pools")
  engine    single-stream decode tokens/s through TorchEngine (64 greedy tokens, one chat prompt
            per round), dense and dynamic, started as it is now ("one pool") and after a torch
            op on another thread, which is what the old load left behind ("two pools"); and
            the dynamic/dense ratio (latency mode's figure) in each configuration

Medians over the rounds, with the per-round ratios; writes benchmarks/results/omp_pools.json.

  .venv/bin/python benchmarks/omp_pools.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serving import TOPICS, messages  # noqa: E402

RESULTS = HERE / "results" / "omp_pools.json"
TAG = "@@omp "
POOLS = ("one pool", "two pools")
ARTIFACTS = ("dense", "dynamic")


def _second_pool() -> None:
    """What the old load left behind: a thread that ran a parallel region and lives on (as
    asyncio.to_thread's executor thread does), so GNU OpenMP keeps its pool and idle workers."""
    import torch

    ran = threading.Event()

    def keep() -> None:
        torch.randn(512, 512) @ torch.randn(512, 512)
        ran.set()
        threading.Event().wait()

    threading.Thread(target=keep, daemon=True).start()
    ran.wait()


def region_child(pools: str) -> None:
    import torch
    from zerolayer.engines.torch_engine import kernels

    kernel = kernels.load()
    if kernel is None:
        raise SystemExit("no compiled kernel here (no C compiler?)")
    if pools == "two pools":
        _second_pool()
    w, x = torch.randn(64, 64), torch.randn(1, 64)
    out: dict[str, float] = {}

    def bench() -> None:
        for _ in range(1000):
            kernel.run(w, x, 0.0)
        t = time.perf_counter()
        for _ in range(20_000):
            kernel.run(w, x, 0.0)
        out["us"] = (time.perf_counter() - t) / 20_000 * 1e6

    t = threading.Thread(target=bench)  # the engine's loop runs on a thread of its own too
    t.start()
    t.join()
    print(TAG + json.dumps(out), flush=True)


def engine_child(pools: str, artifact: str, topic: int) -> None:
    from zerolayer.config import load_config
    from zerolayer.engines.base import SamplingSpec
    from zerolayer.engines.torch_engine import TorchEngine
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = load_config()
    name = cfg.default_model
    model_dir = cfg.model_dir(name)
    folder = None if artifact == "dense" else str(cfg.artifact_root(name) / artifact)
    engine = TorchEngine(
        str(model_dir), artifact=artifact, artifact_dir=folder, max_num_seqs=32, kv_cache_gib=1
    )
    ids = PromptBuilder(model_dir).chat(messages(topic % len(TOPICS)))

    async def one() -> float:
        spec = SamplingSpec(uuid.uuid4().hex, ids, 64, temperature=0.0)
        n, first, last = 0, 0.0, 0.0
        async for d in engine.generate(spec):
            now = time.perf_counter()
            if n == 0:
                first = now
            n += len(d.token_ids)
            last = now
        return (n - 1) / (last - first)

    async def run() -> float:
        if pools == "two pools":
            _second_pool()
        await engine.start()
        await one()  # warm-up
        tps = statistics.median([await one() for _ in range(3)])
        await engine.shutdown()
        return tps

    print(TAG + json.dumps({"tps": asyncio.run(run())}), flush=True)


def _child(*args: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    line = next(x for x in run.stdout.splitlines() if x.startswith(TAG))
    return json.loads(line[len(TAG) :])


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "rounds": [round(v, 3) for v in values],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "region":
            region_child(rest[0])
        else:
            engine_child(rest[0], rest[1], int(rest[2]))
        return

    rng = random.Random(args.seed)
    region: dict[str, list[float]] = {p: [] for p in POOLS}
    tps: dict[tuple[str, str], list[float]] = {(p, a): [] for p in POOLS for a in ARTIFACTS}
    for r in range(args.repeats):
        jobs: list[tuple[str, ...]] = [("region", p) for p in POOLS]
        jobs += [("engine", p, a) for p in POOLS for a in ARTIFACTS]
        rng.shuffle(jobs)
        for job in jobs:
            if job[0] == "region":
                region[job[1]].append(_child("region", job[1])["us"])
            else:
                tps[(job[1], job[2])].append(_child("engine", job[1], job[2], str(r))["tps"])
        print(
            f"round {r + 1}: region "
            + ", ".join(f"{p} {region[p][-1]:.1f} us" for p in POOLS)
            + "; tok/s "
            + ", ".join(f"{a} {p} {tps[(p, a)][-1]:.1f}" for p in POOLS for a in ARTIFACTS),
            flush=True,
        )
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "command": f".venv/bin/python benchmarks/omp_pools.py --repeats {args.repeats}",
        "region_us": {p: _spread(region[p]) for p in POOLS},
        "region_two_over_one": _spread(
            [b / a for a, b in zip(region["one pool"], region["two pools"], strict=True)]
        ),
        "engine_tps": {f"{a}, {p}": _spread(tps[(p, a)]) for p in POOLS for a in ARTIFACTS},
        "engine_one_over_two": {
            a: _spread(
                [x / y for x, y in zip(tps[("one pool", a)], tps[("two pools", a)], strict=True)]
            )
            for a in ARTIFACTS
        },
        "dynamic_over_dense": {
            p: _spread([x / y for x, y in zip(tps[(p, "dynamic")], tps[(p, "dense")], strict=True)])
            for p in POOLS
        },
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for key in ("region_two_over_one", "engine_one_over_two", "dynamic_over_dense"):
        print(key, json.dumps(result[key]))


if __name__ == "__main__":
    main()
