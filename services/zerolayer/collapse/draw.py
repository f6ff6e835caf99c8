"""Pictures of a silence map: a PNG heatmap (layer x channel) and one self-contained interactive
HTML page (no network references): clicking a channel shows its mean |a| over the calibration
samples, next to a per-layer silence bar."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zerolayer.collapse.silence_map import SilenceMap

__all__ = ["draw_png", "draw_html", "encode_u8", "save_figure"]


def draw_png(smap: SilenceMap, path: Path, quantile: float | None = None) -> Path:
    """Heatmaps of each channel's silent share (tokens under its layer's threshold), one panel
    per kind, layers as rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    q = smap.meta.get("quantile", 0.1) if quantile is None else quantile
    kinds = list(smap.stats)
    fig, axes = plt.subplots(len(kinds), 1, figsize=(14, 4.2 * len(kinds)), squeeze=False)
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        frac = smap.stats[kind].silent_fraction(q).numpy()
        im = ax.imshow(frac, aspect="auto", cmap="magma", vmin=0, vmax=1, interpolation="nearest")
        what = (
            "MLP intermediate (down_proj input)"
            if kind == "mlp"
            else "attention output (o_proj input)"
        )
        ax.set_title(f"{what}: share of tokens with |a| under the layer's q={q} threshold")
        ax.set_xlabel("channel")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01)
    fig.suptitle(
        f"silence map: {smap.meta.get('model', '')}, {smap.meta.get('samples', '?')} samples "
        f"x {smap.meta.get('seq_len', '?')} tokens of "
        f"{smap.meta.get('corpus', {}).get('name', '?')}"
    )
    return save_figure(fig, path, dpi=90)


def save_figure(fig: Any, path: Path, dpi: int) -> Path:
    """Lay out, write (creating the folder) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def encode_u8(values: torch.Tensor) -> tuple[str, float]:
    """Values >= 0 as base64 bytes on a log scale (0 -> 0, max -> 255); returns data and max, so a
    page can decode v = max * 10 ** ((b / 255 - 1) * 4) for b > 0 (four decades of range)."""
    v = values.float().clamp_min(0).numpy()
    top = float(v.max()) or 1.0
    with np.errstate(divide="ignore"):
        scaled = (np.log10(np.maximum(v, 1e-30) / top) / 4 + 1) * 255
    b = np.clip(np.round(scaled), 0, 255).astype(np.uint8)
    b[v <= top * 1e-4] = 0
    return base64.b64encode(b.tobytes()).decode(), top


_PAGE = Path(__file__).with_name("silence_map_page.html")


def page_data(smap: SilenceMap, quantile: float | None = None, silent_share: float = 0.5) -> dict:
    """The JSON the page embeds."""
    q = smap.meta.get("quantile", 0.1) if quantile is None else quantile
    summary = smap.summary(q, silent_share=silent_share, top=0)
    kinds = {}
    for kind, st in smap.stats.items():
        frac = st.silent_fraction(q)
        samples_b64, samples_max = encode_u8(st.sample_mean_abs)
        kinds[kind] = {
            "layers": frac.shape[0],
            "channels": frac.shape[1],
            "samples": st.sample_mean_abs.shape[1],
            "silent_u8": base64.b64encode(
                (frac * 255).round().clamp(0, 255).to(torch.uint8).numpy().tobytes()
            ).decode(),
            "samples_u8": samples_b64,
            "samples_max": samples_max,
            "silence_ratio": summary[kind]["silence_ratio"],
            "thresholds": summary[kind]["thresholds"],
            "mean_abs": [round(float(v), 7) for v in st.mean_abs.flatten()],
            "max_abs": [round(float(v), 5) for v in st.max_abs.flatten()],
        }
    title = (
        f"{smap.meta.get('model', 'model')}: {smap.meta.get('samples', '?')} samples x "
        f"{smap.meta.get('seq_len', '?')} tokens of {smap.meta.get('corpus', {}).get('name', '?')}"
    )
    return {"title": title, "quantile": q, "silent_share": silent_share, "kinds": kinds}


def draw_html(
    smap: SilenceMap, path: Path, quantile: float | None = None, silent_share: float = 0.5
) -> Path:
    """The interactive page, data inline."""
    data = json.dumps(page_data(smap, quantile, silent_share), separators=(",", ":"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_PAGE.read_text().replace("__DATA__", data.replace("</", "<\\/")))
    return path
