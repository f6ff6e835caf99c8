"""Draw what each tier costs per text domain, with the domain in and left out of calibration,
and its budget, from the results of benchmarks/collapse.py (no measuring here).

  .venv/bin/python benchmarks/draw_domains.py [--results FILE] [--out PNG]

Writes docs/img/tier_domains.png by default.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
TIERS = {"masked": 0.03, "dynamic": 0.03, "sparse24": 0.10}  # platform/models.yaml budgets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", type=Path, default=HERE / "results" / "collapse-domains.json")
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "img" / "tier_domains.png")
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(args.results.read_text())
    tiers = [t for t in TIERS if t in data]
    fig, axes = plt.subplots(1, len(tiers), figsize=(5 * len(tiers), 4), squeeze=False)
    for ax, tier in zip(axes[0], tiers, strict=True):
        row = data[tier]
        domains = list(row["domains"])
        seen = [100 * row["domains"][d] for d in domains]
        loo = (row.get("leave_one_domain_out") or {}).get("domains", {})
        out = [100 * loo[d]["ppl_delta_left_out"] if d in loo else 0.0 for d in domains]
        x = range(len(domains))
        ax.bar([i - 0.2 for i in x], seen, 0.4, label="in calibration", color="#36c")
        ax.bar([i + 0.2 for i in x], out, 0.4, label="left out of calibration", color="#c63")
        ax.axhline(100 * TIERS[tier], color="#444", linestyle="--", linewidth=1, label="budget")
        ax.axhline(0, color="#999", linewidth=0.5)
        ax.set_xticks(list(x), domains)
        ax.set_title(f"{tier}: worst {row['worst_domain']} {100 * row['ppl_delta']:+.2f}%")
        ax.set_ylabel("perplexity change vs dense, %")
        ax.legend(fontsize=8)
    fig.suptitle("Each tier's cost per text domain (evaluation parts, 16 windows of 256 tokens)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=80)
    print(args.out)


if __name__ == "__main__":
    main()
