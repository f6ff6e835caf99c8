"""What each tier answers: a few questions to the dense model and to every tier artifact, greedy,
through zerolayer's torch engine (the same weights the tiers serve). A spot check that perplexity
alone does not give: a cut can stay within its perplexity budget and still lose facts.

  .venv/bin/python benchmarks/answers.py [--artifacts DIR] [--max-tokens 40]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

QUESTIONS = (
    "What is the capital of France?",
    "What is the capital of Germany?",
    "How many legs does a spider have?",
    "Write a Python function that reverses a string.",
)


async def _answers(model_dir: Path, artifact: str, folder: Path | None, n: int) -> list[str]:
    from zerolayer.engines.base import SamplingSpec
    from zerolayer.engines.torch_engine import TorchEngine
    from zerolayer.tokenfix.prompt import PromptBuilder

    prompts = PromptBuilder(model_dir)
    engine = TorchEngine(
        str(model_dir), artifact=artifact, artifact_dir=str(folder) if folder else None
    )
    await engine.start()
    try:
        out = []
        for i, q in enumerate(QUESTIONS):
            spec = SamplingSpec(f"q{i}", prompts.chat([{"role": "user", "content": q}]), n, 0.0)
            out.append("".join([d.text async for d in engine.generate(spec)]))
        return out
    finally:
        await engine.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--artifacts", type=Path, default=None, help="a model's artifact folder")
    ap.add_argument("--max-tokens", type=int, default=40)
    args = ap.parse_args()
    from zerolayer.config import load_config
    from zerolayer.models.importer import ensure_model

    cfg = load_config()
    model_dir = ensure_model(cfg, cfg.default_model)
    root = args.artifacts or cfg.artifact_root(cfg.default_model)
    for kind in ("dense", "masked", "dynamic", "sparse24"):
        folder = None if kind == "dense" else root / kind
        if folder is not None and not (folder / "tier_card.json").exists():
            print(f"{kind}: no artifact in {folder}")
            continue
        for q, a in zip(
            QUESTIONS, asyncio.run(_answers(model_dir, kind, folder, args.max_tokens)), strict=True
        ):
            print(f"{kind:9s} {q}\n          -> {a[:100]!r}")


if __name__ == "__main__":
    main()
