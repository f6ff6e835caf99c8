"""The canary's KL of each tier artifact against the dense model, per canary text and overall,
as the platform's canary measures it (top-20 log-probabilities per position, torch engine for
every artifact), plus a deliberately damaged dynamic artifact (its MLP thresholds 40x the largest
chosen) for scale. The per-tier limits in platform/models.yaml are set from these figures.

Deterministic (no timing): one run suffices.

  .venv/bin/python benchmarks/canary.py [--artifacts DIR] [--tiers masked,dynamic,sparse24]

Writes benchmarks/results/canary.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "canary.json"


async def scored(model_dir: Path, kind: str, folder: Path | None) -> list[dict[str, Any]]:
    from zerolayer.engines.torch_engine import TorchEngine
    from zerolayer.gateway.canary import CANARY_TEXTS

    engine = TorchEngine(
        str(model_dir), artifact=kind, artifact_dir=None if folder is None else str(folder)
    )
    await engine.start()
    try:
        return await engine.canary(CANARY_TEXTS, 20)
    finally:
        await engine.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--artifacts", type=Path, default=None, help="default: the cache's")
    ap.add_argument("--tiers", default="masked,dynamic,sparse24")
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()

    from zerolayer.config import load_config
    from zerolayer.gateway.canary import topk_kl
    from zerolayer.models.importer import ensure_model

    cfg = load_config()
    model = cfg.default_model
    model_dir = ensure_model(cfg, model)
    root = args.artifacts or cfg.artifact_root(model)
    dense = asyncio.run(scored(model_dir, "dense", None))
    kinds = {k: root / k for k in args.tiers.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        if (root / "dynamic").exists():
            damaged = Path(tmp) / "dynamic"
            shutil.copytree(root / "dynamic", damaged)
            th = json.loads((damaged / "thresholds.json").read_text())
            top = max(th["thresholds"].values(), default=0.05)
            th["thresholds"] = {str(i): top * 40 for i in range(30)}
            (damaged / "thresholds.json").write_text(json.dumps(th))
            kinds["dynamic (damaged)"] = damaged
        rows = {}
        for name, folder in kinds.items():
            got = asyncio.run(scored(model_dir, name.split()[0], folder))
            kl, positions = topk_kl(dense, got)
            per_text = [round(topk_kl([a], [b])[0], 4) for a, b in zip(dense, got, strict=True)]
            card = json.loads((folder / "tier_card.json").read_text())
            rows[name] = {
                "kl": round(kl, 4),
                "positions": positions,
                "per_text": per_text,
                # which build: the domains its card was measured on
                "card_domains": card.get("domains") or card.get("eval", {}).get("corpus"),
            }
            print(f"{name:20s} KL {kl:.4f} over {positions} positions; per text {per_text}")
    out = {
        "date": time.strftime("%Y-%m-%d"),
        "command": f"benchmarks/canary.py --tiers {args.tiers}",
        "texts": ["prose", "code", "recipe", "licence", "Chinese", "French"],
        "tiers": rows,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
