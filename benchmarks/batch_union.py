"""What a batch could skip: for the dynamic tier's thresholds, the share of each projection's
weight rows whose input is under the threshold for every token of a batch of B decode tokens
(one token each from B different sequences), at B = 1, 8, 32 and 64.

A batch-aware product would read only the other rows, with the same answers (each token's
thresholded inputs are zero either way), so this share bounds what skipping rows per batch can
save on a step's projection reads. Tokens come from the evaluation windows of every collapse
domain, run through the dense checkpoint with the tier's weights and thresholds (the
compiler's view of it); a batch draws B windows at random and one position in each.

  .venv/bin/python benchmarks/batch_union.py [--windows 4] [--length 128] [--batches 200]

Prints a table and writes benchmarks/results/batch_union.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
from pathlib import Path
from typing import Any

import torch

SIZES = (1, 8, 32, 64)
OUT = Path(__file__).parent / "results" / "batch_union.json"


def silent_masks(model: Any, art: Any, windows: list[list[int]]) -> dict[tuple[int, str], Any]:
    """Per (layer, input kind) the [windows, positions, inputs] mask of inputs the thresholds
    zeroed, read after the cut's own hooks."""
    from zerolayer.collapse.apply import dynamic_cut
    from zerolayer.collapse.model import input_modules, removing

    seen: dict[tuple[int, str], list[torch.Tensor]] = {}
    handles = []
    with dynamic_cut(model, art):
        for kind, th in art.inputs().items():
            for i, _, modules in input_modules(model, [kind]):
                if i not in th:
                    continue

                def pre(_m: Any, args: tuple[torch.Tensor, ...], key: tuple[int, str] = (i, kind)):
                    seen.setdefault(key, []).append(args[0][0] == 0)

                handles.append(modules[0].register_forward_pre_hook(pre))  # one reader is enough
        with removing(handles), torch.no_grad():
            for w in windows:
                model(torch.tensor([w]), use_cache=False)
    return {k: torch.stack(v) for k, v in seen.items()}


def row_bytes(model: Any, key: tuple[int, str]) -> int:
    """The float32 bytes of one input row over every projection that reads that input."""
    from zerolayer.collapse.model import input_modules

    i, kind = key
    for j, _, modules in input_modules(model, [kind]):
        if j == i:
            return sum(m.weight.shape[0] for m in modules) * 4
    raise KeyError(key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=4, help="evaluation windows per domain")
    ap.add_argument("--length", type=int, default=128, help="tokens per window")
    ap.add_argument("--batches", type=int, default=200, help="random batches per size")
    ap.add_argument("--artifacts", type=Path, default=None, help="a model's artifact folder")
    args = ap.parse_args()

    from transformers import AutoTokenizer
    from zerolayer.collapse.apply import load_dynamic
    from zerolayer.collapse.corpus import domain_windows
    from zerolayer.collapse.domains import standard_corpora
    from zerolayer.config import load_config
    from zerolayer.models.importer import ensure_model

    cfg = load_config()
    model_dir = ensure_model(cfg, cfg.default_model)
    folder = (args.artifacts or cfg.artifact_root(cfg.default_model)) / "dynamic"
    model, art = load_dynamic(model_dir, folder)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    corpora = standard_corpora(model_dir, Path(cfg.cache_dir) / "corpora")
    per_domain = domain_windows(tok, corpora.evaluation, args.windows, args.length, seed=7)
    windows = [w for ws in per_domain.values() for w in ws]
    print(f"{len(windows)} windows of {args.length} tokens from {', '.join(per_domain)}")
    masks = silent_masks(model, art, windows)
    nbytes = {k: row_bytes(model, k) * m.shape[-1] for k, m in masks.items()}
    total = sum(nbytes.values())
    rng = random.Random(0)
    n_w, n_p = len(windows), args.length
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "command": "benchmarks/batch_union.py "
        f"--windows {args.windows} --length {args.length} --batches {args.batches}",
        "tokens": n_w * n_p,
        "sizes": {},
    }
    for b in SIZES:
        per_kind: dict[str, list[float]] = {}
        skipped_bytes = []
        for _ in range(args.batches):
            rows = [rng.randrange(n_w) for _ in range(b)] if b > n_w else rng.sample(range(n_w), b)
            pos = [rng.randrange(n_p) for _ in range(b)]
            saved = 0.0
            for key, m in masks.items():
                share = float(m[rows, pos].all(dim=0).float().mean())
                per_kind.setdefault(key[1], []).append(share)
                saved += share * nbytes[key]
            skipped_bytes.append(saved / total)
        result["sizes"][str(b)] = {
            "projection_bytes_skippable": round(statistics.median(skipped_bytes), 4),
            "per_input": {k: round(statistics.mean(v), 4) for k, v in per_kind.items()},
        }
    kinds = list(result["sizes"]["1"]["per_input"])
    print("batch | share of thresholded rows' bytes skippable | " + " | ".join(kinds))
    for b, r in result["sizes"].items():
        cells = " | ".join(f"{r['per_input'][k]:.3f}" for k in kinds)
        print(f"{b:>5} | {r['projection_bytes_skippable']:.3f} | {cells}")
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
