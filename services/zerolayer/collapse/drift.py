"""Drift: calibrate on a new text sample and compare with a stored silence map.

The stored map's per-layer thresholds are applied to both maps, so a channel "changes state" when
its share of tokens under the same absolute threshold crosses `silent_share` (default 0.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from zerolayer.collapse.draw import save_figure
from zerolayer.collapse.silence_map import SilenceMap

__all__ = ["compare", "draw_drift", "kind_report", "write_report"]


def compare(
    stored: SilenceMap, new: SilenceMap, silent_share: float = 0.5, top: int = 50
) -> dict[str, Any]:
    """Per layer change in silence ratio and mean |a|, and the channels that changed state."""
    q = stored.meta.get("quantile", 0.1)
    out: dict[str, Any] = {
        "quantile": q,
        "silent_share": silent_share,
        "stored": stored.meta,
        "new": new.meta,
    }
    for kind, old in stored.stats.items():
        cur = new.stats[kind]
        idx = old.threshold_bins(q)
        scale = (cur.mean_abs.mean(1) / old.mean_abs.mean(1).clamp_min(1e-12)) - 1
        out[kind] = {
            **kind_report(
                old.silent_fraction_under(idx), cur.silent_fraction_under(idx), silent_share, top
            ),
            "mean_abs_change": [round(float(v), 5) for v in scale],
        }
    return out


def kind_report(
    f_old: torch.Tensor, f_new: torch.Tensor, silent_share: float = 0.5, top: int = 50
) -> dict[str, Any]:
    """One kind's drift from each channel's share of tokens under the stored threshold, stored
    and new ([layers, channels]): per layer silence ratios, and the channels that changed
    state (silent on at least silent_share of tokens, or not)."""
    s_old, s_new = f_old >= silent_share, f_new >= silent_share
    changed = (s_old != s_new).nonzero().tolist()
    changed.sort(key=lambda lc: -abs(float(f_new[lc[0], lc[1]] - f_old[lc[0], lc[1]])))
    ratio_old, ratio_new = s_old.float().mean(1), s_new.float().mean(1)
    return {
        "silence_ratio_stored": [round(float(v), 5) for v in ratio_old],
        "silence_ratio_new": [round(float(v), 5) for v in ratio_new],
        "silence_ratio_change": [round(float(v), 5) for v in ratio_new - ratio_old],
        "channels_changed": len(changed),
        "became_silent": int((s_new & ~s_old).sum()),
        "became_active": int((s_old & ~s_new).sum()),
        "mean_abs_silent_share_change": round(float((f_new - f_old).abs().mean()), 6),
        "top_changes": [
            {
                "layer": lc[0],
                "channel": lc[1],
                "stored": round(float(f_old[lc[0], lc[1]]), 4),
                "new": round(float(f_new[lc[0], lc[1]]), 4),
            }
            for lc in changed[:top]
        ],
        "_diff": f_new - f_old,
    }


def draw_drift(report: dict[str, Any], path: Path) -> Path:
    """Per kind: the change of each channel's silent share (heatmap) and of each layer's ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("mlp", "attn") if k in report]
    fig, axes = plt.subplots(
        len(kinds),
        2,
        figsize=(15, 4 * len(kinds)),
        squeeze=False,
        gridspec_kw={"width_ratios": [4, 1]},
    )
    for row, kind in zip(axes, kinds, strict=True):
        diff: torch.Tensor = report[kind]["_diff"]
        lim = max(0.05, float(diff.abs().max()))
        im = row[0].imshow(
            diff.numpy(),
            aspect="auto",
            cmap="coolwarm",
            vmin=-lim,
            vmax=lim,
            interpolation="nearest",
        )
        row[0].set_title(f"{kind}: change of silent share per channel (new - stored)")
        row[0].set_xlabel("channel")
        row[0].set_ylabel("layer")
        fig.colorbar(im, ax=row[0], fraction=0.025, pad=0.01)
        change = report[kind]["silence_ratio_change"]
        row[1].barh(range(len(change)), change, color=["#c33" if c > 0 else "#36c" for c in change])
        row[1].invert_yaxis()
        row[1].set_title("silence ratio change")
        row[1].set_xlabel("new - stored")
    return save_figure(fig, path, dpi=80)


def write_report(report: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """drift.json (without the raw difference tensors) and drift.png."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    png = draw_drift(report, folder / "drift.png")
    clean = {
        k: ({kk: vv for kk, vv in v.items() if kk != "_diff"} if isinstance(v, dict) else v)
        for k, v in report.items()
    }
    js = folder / "drift.json"
    js.write_text(json.dumps(clean, indent=1) + "\n")
    return js, png
