"""What each tier buys: tokens/s at 1, 8, 32 and 64 concurrent streams, the cost per 1M
completion tokens that follows, time to first token and peak memory of every tier artifact on
each engine that serves it, on the same prompts, with the tier card's perplexity change.

Every engine runs in its own worker process (started once, so its peak memory is its own); the
parent drives them in rounds, one engine at a time, interleaved: round r measures every engine
before round r+1 starts, in an order of its own (seeded shuffle), each run after --settle idle
seconds (a vLLM engine keeps its threads spinning for a while after a run). One warm-up round, then
--repeats measured rounds; ratios are medians of the per-round ratios, with their spread (the
lowest and highest round). A round's single-stream figure is the median decode rate of
--one-stream-requests requests in a row; at more streams, completion tokens over wall time
(prefill included). Every request carries a cache salt of its own: no prompt is read from a prefix
cache. Cost per 1M completion tokens = the platform's replica-hour price of its hardware class /
(tokens/s x 3600) x 1e6. Writes benchmarks/results/tiers.json.

Besides the artifacts as served, some engines measure one lever alone: torch:baseline@bfloat16
(the dense model with bfloat16 projection weights) and torch:dynamic@float32 (the dynamic
artifact's thresholds with float32 weights), so the served dynamic tier (both levers) can be set
against each.

  .venv/bin/python benchmarks/tiers.py [--repeats 5] [--artifacts DIR] [--engines NAME,...]

Artifacts default to the platform's (<cache>/artifacts/<model>); missing ones are built first
with the model's collapse settings (zerolayer up does the same). --engines measures only some
engines (with vllm:baseline and each one's same-engine baseline always added, so every ratio
comes from one run) and merges them into the results file: the entries of engines it did not
run stay as they were, each entry says which run measured it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from serving import TOPICS, messages  # noqa: E402
from zerolayer.engines.timing import tagged, timed_request  # noqa: E402

RESULTS = HERE / "results" / "tiers.json"
MAX_TOKENS = 64
STREAMS = (1, 8, 32, 64)
# (name, engine, artifact): what each worker serves
ENGINES = [
    ("vllm:baseline", "vllm", "dense"),
    ("vllm:masked", "vllm", "pruned"),
    ("torch:baseline", "torch", "dense"),
    ("torch:baseline@bfloat16", "torch", "dense"),
    ("torch:masked", "torch", "masked"),
    ("torch:sparse24", "torch", "sparse24"),
    ("torch:dynamic@float32", "torch", "dynamic"),
    ("torch:dynamic", "torch", "dynamic"),
]
# the served tiers of platform/models.yaml and the engine each runs on
SERVED = {
    "baseline": "vllm:baseline",
    "masked": "vllm:masked",
    "sparse24": "torch:sparse24",
    "dynamic": "torch:dynamic",
}


def selected(names: list[str] | None) -> list[tuple[str, str, str]]:
    """The ENGINES rows to run: all, or those named plus vllm:baseline and each one's
    same-engine baseline (every ratio needs its baseline measured in the same run)."""
    if not names:
        return list(ENGINES)
    known = {n for n, _, _ in ENGINES}
    if unknown := [n for n in names if n not in known]:
        raise SystemExit(f"unknown engine(s) {unknown}; known: {sorted(known)}")
    want = {*names, "vllm:baseline", *(f"{n.split(':')[0]}:baseline" for n in names)}
    return [row for row in ENGINES if row[0] in want]


def peak_rss(pid: int) -> int:
    """Peak resident memory (VmHWM) of a process and all its descendants, bytes."""
    import psutil

    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    total = 0
    for p in procs:
        try:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


# worker ----------------------------------------------------------------------------------------
TAG = "@zerolayer-bench "  # marks the worker's replies among whatever else reaches stdout


def _reply(obj: dict[str, Any]) -> None:
    print(TAG + json.dumps(obj), flush=True)


async def _serve(engine: Any, prompts: Any) -> None:
    await engine.start()
    _reply({"ready": True})
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "quit":
            break
        ask = json.loads(line)
        streams = int(ask["streams"])
        chats = [prompts.chat(messages(i % len(TOPICS))) for i in range(streams)]
        if streams == 1:
            # one stream: the decode rate after the first token, the median of `requests`
            # requests one after another (one request is about a second: a burst of load on
            # the machine would otherwise decide the round)
            n = int(ask.get("requests", 1))
            runs = [await timed_request(engine, chats[0], MAX_TOKENS, fresh=True) for _ in range(n)]
            reply = {
                "tokens": sum(r.tokens for r in runs),
                "tps": statistics.median((r.tokens - 1) / r.decode_s for r in runs),
                "ttft_s": statistics.median(r.ttft_s for r in runs),
            }
        else:
            t0 = time.perf_counter()
            runs = await asyncio.gather(
                *(timed_request(engine, ids, MAX_TOKENS, fresh=True) for ids in chats)
            )
            wall = time.perf_counter() - t0
            tokens = sum(r.tokens for r in runs)
            reply = {
                "tokens": tokens,
                "tps": tokens / wall,
                "ttft_s": statistics.median(r.ttft_s for r in runs),
            }
        reply["peak_mem_bytes"] = peak_rss(os.getpid())
        _reply(reply)
    await engine.shutdown()


def worker(name: str, artifacts: Path) -> None:
    from zerolayer.config import load_config
    from zerolayer.engines.torch_engine import TorchEngine
    from zerolayer.engines.vllm_engine import VLLMEngine
    from zerolayer.models.importer import ensure_model
    from zerolayer.tokenfix.prompt import PromptBuilder

    cfg = load_config()
    model = cfg.default_model
    model_dir = ensure_model(cfg, model)
    kind, artifact = next((e, a) for n, e, a in ENGINES if n == name)
    folder = None if artifact == "dense" else artifacts / artifact
    max_len = cfg.models[model].max_model_len
    seqs = max(STREAMS)
    if kind == "vllm":
        engine: Any = VLLMEngine(
            str(folder or model_dir), max_model_len=max_len, kv_cache_gib=1, max_num_seqs=seqs
        )
    else:
        # "@dtype": the projections' precision set apart from the artifact's (one lever alone)
        weights = name.partition("@")[2] or None
        engine = TorchEngine(
            str(model_dir),
            artifact=artifact,
            artifact_dir=str(folder) if folder else None,
            weight_dtype=weights,
            max_model_len=max_len,
            max_num_seqs=seqs,
            kv_cache_gib=1,
        )
    asyncio.run(_serve(engine, PromptBuilder(model_dir)))


# parent ----------------------------------------------------------------------------------------
class Worker:
    def __init__(self, name: str, artifacts: Path):
        self.name = name
        env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "TQDM_DISABLE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", name, "--artifacts", str(artifacts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.name} exited ({self.proc.wait()})")
            if (got := tagged(line, TAG)) is not None:
                return got

    def run(self, streams: int, requests: int = 1) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"streams": streams, "requests": requests}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _cards(artifacts: Path, kinds: set[str]) -> dict[str, float]:
    out = {"dense": 0.0}
    for kind in sorted(kinds - {"dense"}):
        card = json.loads((artifacts / kind / "tier_card.json").read_text())
        out[kind] = card["quality"]["ppl_delta"]
    return out


def ratio(rows: list[dict[str, Any]], a: str, b: str, key: str) -> dict[str, float]:
    """The median of the per-round ratios a/b of one figure, and the lowest and highest."""
    got = sorted(r[a][key] / r[b][key] for r in rows)
    return {
        "median": round(statistics.median(got), 3),
        "low": round(got[0], 3),
        "high": round(got[-1], 3),
    }


def entry(
    rows: list[dict[str, Any]], name: str, kind: str, ppl: float | None, usd: Any, stamp: str
) -> dict[str, Any]:
    """One engine's figures over the measured rounds: per stream count its tokens/s (median),
    ratios against the same engine's baseline and vLLM's (the served baseline) with their
    spread, and the cost per 1M completion tokens at the replica-hour price `usd`."""
    from zerolayer.collapse.price import cost_per_1m

    def med(key: str) -> float:
        return round(statistics.median(r[name][key] for r in rows), 3)

    tps = {str(s): med(f"tps_{s}") for s in STREAMS}
    return {
        "tps": tps,
        "vs_baseline": {str(s): ratio(rows, name, f"{kind}:baseline", f"tps_{s}") for s in STREAMS},
        "vs_served_baseline": {
            str(s): ratio(rows, name, "vllm:baseline", f"tps_{s}") for s in STREAMS
        },
        "cost_per_1m_completion": {s: cost_per_1m(usd, t) for s, t in tps.items()},
        "ttft_s": med("ttft_s"),
        "peak_mem_bytes": int(max(r[name]["peak_mem_bytes"] for r in rows)),
        "ppl_delta": ppl,
        "measured": stamp,
    }


def _ppl(delta: float | None) -> str:
    return "ppl not on a card" if delta is None else f"ppl {delta:+.2%}"


def draw(result: dict[str, Any], path: Path) -> Path:
    """Per stream count, bars of tokens/s per engine and artifact, each labelled with its speed
    against the same engine's baseline; the perplexity change under each name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from zerolayer.collapse.draw import save_figure

    engines = result["engines"]
    names = list(engines)
    fig, axes = plt.subplots(1, len(STREAMS), figsize=(4.2 * len(STREAMS), 5))
    for ax, s in zip(axes, STREAMS, strict=True):
        vals = [engines[n]["tps"][str(s)] for n in names]
        colors = ["#4c72b0" if n.startswith("vllm") else "#dd8452" for n in names]
        bars = ax.bar(range(len(names)), vals, color=colors)
        for b, n in zip(bars, names, strict=True):
            e = engines[n]
            if e.get("measured") != result["setup"].get("measured"):
                b.set_hatch("//")  # from an earlier run
                b.set_alpha(0.45)
            ax.annotate(
                f"x{e['vs_baseline'][str(s)]['median']:.2f}",
                (b.get_x() + b.get_width() / 2, b.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        labels = [f"{n}\n{_ppl(engines[n]['ppl_delta'])}" for n in names]
        ax.set_xticks(range(len(names)), labels, rotation=40, ha="right", fontsize=7)
        ax.set_title(
            f"{s} stream{'s' if s > 1 else ''}: tokens/s" + (" (decode)" if s == 1 else "")
        )
        ax.set_ylim(0, max(vals) * 1.2)
    setup = result["setup"]
    title = (
        f"Tiers of SmolLM2-135M on {setup['cpus']} CPU cores (median of {setup['repeats']} "
        "rounds; x = vs the same engine's baseline)"
    )
    if any(e.get("measured") != setup.get("measured") for e in engines.values()):
        title += "\nhatched: measured in an earlier run (the machine's speed differs between runs)"
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path, 110)


def merged(
    old: dict[str, Any],
    engines: dict[str, Any],
    rows: list[dict[str, Any]],
    setup: dict[str, Any],
    dynamic_ppl: float | None,
) -> dict[str, Any]:
    """The results file with this run's engines in it: `old` (a previous file, {} for a run of
    every engine) keeps the entries of engines this run did not measure; the served tiers and
    latency mode are rebuilt from the merged engines; `runs` lists every run the file draws
    on (setup and rounds), newest last."""
    # entries of the file's earlier layout (1 and 32 streams only) are not comparable: left out
    kept = {n: e for n, e in old.get("engines", {}).items() if "tps" in e}
    every = {**kept, **engines}
    result: dict[str, Any] = {
        tier: {"engine": name.split(":")[0], **every[name]}
        for tier, name in SERVED.items()
        if name in every
    }
    if "torch:dynamic" in engines and "torch:baseline" in engines:
        result["latency_mode"] = {
            "dense_tps_1": engines["torch:baseline"]["tps"]["1"],
            "masked_tps_1": engines["torch:dynamic"]["tps"]["1"],
            "ratio": engines["torch:dynamic"]["vs_baseline"]["1"]["median"],
            "ppl_delta": dynamic_ppl,
            "engine": "torch",
            "measured": setup["measured"],
        }
    elif "latency_mode" in old:
        result["latency_mode"] = old["latency_mode"]
    result["engines"] = every
    measured = set(engines)
    earlier = old.get("runs", [])
    if not earlier and "rounds" in old:  # a file written before runs were kept
        earlier = [
            {"engines": sorted(old["engines"]), "setup": old["setup"], "rounds": old["rounds"]}
        ]
    # a run whose every engine this one measured again is no longer drawn on
    runs = [r for r in earlier if set(r["engines"]) - measured]
    runs.append({"engines": sorted(measured), "setup": setup, "rounds": rows})
    result["runs"] = runs
    result["setup"] = setup
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=5, help="measured rounds after one warm-up")
    ap.add_argument("--artifacts", type=Path, default=None, help="a model's artifact folder")
    ap.add_argument("--settle", type=float, default=5.0, help="idle seconds before each run")
    ap.add_argument(
        "--one-stream-requests",
        type=int,
        default=3,
        help="single-stream requests per engine and round (their median decode rate counts)",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--engines",
        default="",
        help="comma-separated engine:artifact names to measure and merge into --out (default: all)",
    )
    ap.add_argument("--draw-only", action="store_true", help="redraw the picture from --out")
    args = ap.parse_args()
    if args.draw_only:
        print(draw(json.loads(args.out.read_text()), args.out.with_suffix(".png")))
        return
    if args.worker:
        worker(args.worker, args.artifacts)
        return

    from zerolayer.artifacts import is_built
    from zerolayer.config import load_config

    cfg = load_config()
    model = cfg.default_model
    artifacts = args.artifacts or cfg.artifact_root(model)
    run = selected([n for n in args.engines.split(",") if n])
    kinds = {a for _, _, a in run}
    if args.artifacts is None:
        # the masked artifact is built with the pruned one (one cut, two forms)
        wanted = sorted({"pruned" if k == "masked" else k for k in kinds} - {"dense"})
        if missing := [k for k in wanted if not is_built(artifacts / k)]:
            build = ["collapse", "build", "--model", model, "--tiers", ",".join(missing)]
            subprocess.run([sys.executable, "-m", "zerolayer.cli", *build], check=True)
    ppl = _cards(artifacts, kinds)
    workers = []
    try:
        for name, _, _ in run:
            print(f"starting {name}", flush=True)
            workers.append(Worker(name, artifacts))
        rows: list[dict[str, Any]] = []
        for rnd in range(args.repeats + 1):
            row: dict[str, Any] = {}
            # each round runs the workers in its own order (seeded shuffle), and every run waits
            # --settle seconds first: vLLM's engine core keeps its threads spinning for a while
            # after a run, and in a fixed cyclic order the engine after it always paid for that
            # (it made torch:baseline look 1.2x slower than torch:masked at one stream)
            order = list(workers)
            random.Random(rnd).shuffle(order)
            for w in order:
                row[w.name] = {"peak_mem_bytes": 0}
                for streams in STREAMS:
                    time.sleep(args.settle)
                    got = w.run(streams, args.one_stream_requests)
                    row[w.name][f"tps_{streams}"] = got["tps"]
                    if streams == 1:
                        row[w.name]["ttft_s"] = got["ttft_s"]
                    peak = max(row[w.name]["peak_mem_bytes"], got["peak_mem_bytes"])
                    row[w.name]["peak_mem_bytes"] = peak
                label = "warm-up" if rnd == 0 else f"round {rnd}"
                figures = "  ".join(f"{k}: {row[w.name][f'tps_{k}']:6.1f}" for k in STREAMS)
                print(f"{label:8s} {w.name:24s} tok/s at {figures}", flush=True)
            if rnd:
                rows.append(row)
    finally:
        for w in workers:
            w.close()

    stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    hw = cfg.hardware
    usd = hw.classes[hw.hardware_class].replica_hour_usd
    # a lever measured alone ("@dtype") is on no tier card: its perplexity is not known here
    engines = {
        name: entry(rows, name, kind, None if "@" in name else ppl[artifact], usd, stamp)
        for name, kind, artifact in run
    }
    command = "python benchmarks/tiers.py" + (f" --engines {args.engines}" if args.engines else "")
    setup = {
        "streams": list(STREAMS),
        "one_stream_requests": args.one_stream_requests,
        "max_tokens": MAX_TOKENS,
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "hardware_class": hw.hardware_class,
        "replica_hour_usd": str(usd),
        "command": command,
        "measured": stamp,
    }
    result = merged(
        json.loads(args.out.read_text()) if args.engines and args.out.exists() else {},
        engines,
        rows,
        setup,
        ppl.get("dynamic"),
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, e in engines.items():
        figures = "  ".join(
            f"{k}: {e['tps'][str(k)]:6.1f} (x{e['vs_baseline'][str(k)]['median']:.3f}, "
            f"${e['cost_per_1m_completion'][str(k)]}/1M)"
            for k in STREAMS
        )
        print(f"{name:24s} {figures}  {_ppl(e['ppl_delta'])}")
    print(f"results: {args.out}\npicture: {draw(result, args.out.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
