"""Collapse compiler quality table: for each method and level, the perplexity change and KL vs the
dense model on the evaluation corpus, the share of MLP FLOPs removed (or activations skipped, or MLP
weights made 2:4) and bytes on disk; then the tiers the builder chooses within their budgets.

Quality numbers are deterministic for a given seed (no timing involved), so one run suffices.

  .venv/bin/python benchmarks/collapse.py [--samples 100] [--eval-samples 32] [--out DIR]
      [--tiers masked,pruned,dynamic,sparse24]

Writes benchmarks/results/collapse.json and the silence map pictures (under --out), prints a
markdown table for docs/benchmarks.md. With --tiers naming only some tiers, only those are
rebuilt (no method rows) and their entries in the existing results file are replaced.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "collapse.json"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--samples", type=int, default=None, help="calibration samples (models.yaml)")
    ap.add_argument(
        "--eval-samples", type=int, default=None, help="evaluation samples (models.yaml)"
    )
    ap.add_argument("--out", type=Path, default=None, help="artifact folder (default: a temp dir)")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--tiers", default="masked,pruned,dynamic,sparse24", help="builder tiers")
    args = ap.parse_args()
    tiers = [t for t in args.tiers.split(",") if t]
    everything = set(tiers) >= {"masked", "pruned", "dynamic", "sparse24"}

    from zerolayer.artifacts import Dynamic
    from zerolayer.collapse.ablate import activation_threshold
    from zerolayer.collapse.build import Builder
    from zerolayer.collapse.commands import build_settings
    from zerolayer.collapse.domains import standard_corpora
    from zerolayer.collapse.model import decoder_layers, projection
    from zerolayer.collapse.reconstruct import obs_keep, repaired
    from zerolayer.collapse.select import dynamic_thresholds, protected
    from zerolayer.collapse.sparse24 import MLP_PROJ, input_norms, sparsified
    from zerolayer.collapse.strategies import build
    from zerolayer.collapse.strategies.dynamic import measured_sparsity
    from zerolayer.config import load_config
    from zerolayer.models.importer import ensure_model

    cfg = load_config()
    model = cfg.default_model
    settings = build_settings(cfg, model, samples=args.samples, eval_samples=args.eval_samples)
    out = args.out or Path(tempfile.mkdtemp(prefix="zerolayer-collapse-"))
    cache = Path(cfg.cache_dir) / "corpora"
    model_dir = ensure_model(cfg, model)
    b = Builder(model_dir, out, standard_corpora(model_dir, cache), settings, model)
    smap, grams = b.silence_map(), b.grams()
    protect = protected(smap)
    layers = decoder_layers(b.model)
    cut_layers = b.cut_layers
    rows = []

    def row(method: str, level: str, q: dict, removed: float, what: str, nbytes: int | str) -> None:
        rows.append(
            {
                "method": method,
                "level": level,
                "ppl_delta": q["ppl_delta"],
                "kl": q["kl"],
                "removed": round(removed, 4),
                "removed_what": what,
                "bytes": nbytes,
            }
        )
        print(
            f"{method:34s} {level:>6s}  ppl {q['ppl_delta']:+8.2%}  kl {q['kl']:.4f}  "
            f"{what} {removed:.1%}",
            flush=True,
        )

    full = sum(projection(layer, "mlp").in_features for layer in layers)
    for share in (0.05, 0.10, 0.20) if everything else ():
        keep = {
            i: obs_keep(projection(layers[i], "mlp").weight.detach(), grams[i], share, protect[i])
            for i in cut_layers
        }
        q = b.evaluator.evaluate(repaired(b.model, keep, grams), desc=f"uniform {share}").as_dict()
        removed = sum(int((~k).sum()) for k in keep.values()) / full
        row("static uniform, OBS + repair", f"{share:.0%}", q, removed, "MLP FLOPs", "-")
    for share in (0.25, 0.40, 0.50, 0.60) if everything else ():
        th = dynamic_thresholds(smap, {i: share for i in range(len(layers))})
        q = b.evaluator.evaluate(
            activation_threshold(b.model, th), desc=f"dynamic {share}"
        ).as_dict()
        row(
            "dynamic, one quantile per layer",
            f"{share:.0%}",
            q,
            measured_sparsity(b, Dynamic(th))["mlp"],
            "activations",
            "-",
        )
    if everything:
        norms = input_norms(b.model, b.calib_windows[:16])
        all_mlp = [(i, p) for i in range(len(layers)) for p in MLP_PROJ]
        q = b.evaluator.evaluate(sparsified(b.model, all_mlp, norms), desc="2:4 all MLP").as_dict()
        row("2:4 on every MLP projection", "100%", q, 1.0, "MLP weights 2:4", "-")

    cards = build(b, tiers)
    measure = {
        "masked": ("mlp_flops_removed", "MLP FLOPs"),
        "pruned": ("mlp_flops_removed", "MLP FLOPs"),
        "dynamic": ("activation_sparsity", "activations"),
        "sparse24": ("weights_24", "projection weights 2:4"),
    }
    for tier, (key, what) in measure.items():
        if tier not in cards:
            continue
        card = cards[tier]
        row(
            f"{tier} tier (builder)",
            "chosen",
            card["quality"],
            card.get(key, 0.0),
            what,
            card["bytes_on_disk"],
        )

    fields = {
        "masked": ("mlp_flops_removed",),
        "dynamic": ("activation_sparsity",),
        "sparse24": ("mlp_weights_24", "weights_24"),
    }
    old = args.results.exists() and not everything
    result = json.loads(args.results.read_text()) if old else {}
    if old:  # keep the other rows; replace the rebuilt tiers' rows
        rebuilt = {f"{t} tier (builder)" for t in cards}
        rows = [r for r in result.get("table", []) if r["method"] not in rebuilt] + rows
    for tier, keys in fields.items():
        if tier in cards:
            q = cards[tier]["quality"]
            result[tier] = {
                "ppl_delta": q["ppl_delta"],
                "worst_domain": q["worst_domain"],
                **{k: cards[tier].get(k) for k in keys},
                "domains": {d: e["ppl_delta"] for d, e in q["domains"].items()},
                "leave_one_domain_out": cards[tier].get("leave_one_domain_out"),
            }
            result["dense_ppl"] = {d: e["dense_ppl"] for d, e in q["domains"].items()}
    result["settings"] = {
        "samples": settings.samples,
        "validation_samples_per_domain": settings.validation_samples,
        "eval_samples_per_domain": settings.eval_samples,
        "domains": b.corpora.domains(),
        "seq_len": settings.seq_len,
        "seed": settings.seed,
        "distill_epochs": settings.distill_epochs,
    }
    order = ["masked", "pruned", "dynamic", "sparse24"]
    rows.sort(key=lambda r: order.index(r["method"].split()[0]) if "builder" in r["method"] else -1)
    result["table"] = rows
    print("\n| method | level | ppl change | KL | removed | bytes |\n|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['method']} | {r['level']} | {r['ppl_delta']:+.2%} | {r['kl']:.4f} | "
            f"{r['removed']:.1%} {r['removed_what']} | {r['bytes']} |"
        )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nresults: {args.results}\nsilence map: {out / 'silence_map' / 'silence_map.png'}")


if __name__ == "__main__":
    main()
