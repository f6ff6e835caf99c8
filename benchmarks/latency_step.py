"""Single-stream decode steps of the torch engine's model, without the serving loop around it.

tiers.py measures latency mode through the engine (worker processes, request queues,
detokenizing), where the machine's noise is as large as the effect. This script loads the models
into one process and times their decode steps back to back, on the same chat prompt, in
interleaved rounds (each round starts one model later); ratios are medians of per-round ratios:
  dense, torch ops   the dense model's step as ~1,000 torch ops (the compiled step switched off)
  dense              the dense model's step as one compiled call (what every CPU tier runs)
  dynamic            the dynamic tier's artifact: the same compiled step, reading only the
                     weight rows of inputs that pass their thresholds
Ratios are against "dense" (the same engine running dense: latency mode's target).

  .venv/bin/python benchmarks/latency_step.py [--repeats 7] [--tokens 64] [--dynamic DIR ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

PROMPT = "Explain how a hash map works and when to use one."


def _tokens_per_s(model: Any, prompt: list[int], tokens: int, compiled: bool) -> float:
    from zerolayer.engines.torch_engine import SlotCache

    saved = model._layers_c
    if not compiled:
        model._layers_c = None
    try:
        cache = SlotCache(model.shape, torch.float32, model.device, len(prompt) + tokens + 1)
        cache.ensure(1, len(prompt) + tokens + 1)
        logits = model.prefill(prompt, 0, cache)
        t = time.perf_counter()
        for i in range(tokens):
            logits = model.decode([int(logits.argmax())], [len(prompt) + i], cache)[0]
        return tokens / (time.perf_counter() - t)
    finally:
        model._layers_c = saved


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dynamic", type=Path, nargs="*", help="dynamic artifact folders")
    args = ap.parse_args()

    from transformers import AutoTokenizer
    from zerolayer.config import load_config
    from zerolayer.engines.torch_engine import load_llama

    cfg = load_config()
    name = cfg.default_model
    model_dir = cfg.model_dir(name)
    folders = args.dynamic or [Path(cfg.cache_dir) / "artifacts" / name / "dynamic"]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    text = tok.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
    )
    prompt = tok.encode(text, add_special_tokens=False)

    dense = load_llama(model_dir)
    if dense._layers_c is None:
        raise SystemExit("no compiled step here (no C compiler?): nothing to compare")
    runs: dict[str, tuple[Any, bool]] = {
        "dense, torch ops": (dense, False),
        "dense": (dense, True),
    }
    for folder in folders:
        runs[f"dynamic {folder.parent.name}/{folder.name}"] = (
            load_llama(model_dir, "dynamic", folder),
            True,
        )
    names = list(runs)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, prompt {len(prompt)} "
        f"tokens, {args.tokens} new tokens, {args.repeats} rounds (+1 warm-up)"
    )
    seen: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.repeats + 1):
        order = names[r % len(names) :] + names[: r % len(names)]
        got = {n: _tokens_per_s(runs[n][0], prompt, args.tokens, runs[n][1]) for n in order}
        if r:  # the first round warms caches and the allocator
            for n in names:
                seen[n].append(got[n])
    print(f"{'model':40s} {'tok/s':>7s}  x dense (rounds)")
    for n in names:
        ratios = [a / b for a, b in zip(seen[n], seen["dense"], strict=True)]
        rounds = ", ".join(f"{x:.2f}" for x in ratios)
        print(
            f"{n:40s} {statistics.median(seen[n]):7.1f}  {statistics.median(ratios):.3f} ({rounds})"
        )


if __name__ == "__main__":
    main()
