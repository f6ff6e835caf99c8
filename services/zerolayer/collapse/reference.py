"""The calibrated side of a tier's live signals: its artifact loaded into the serving engine's
own model, run over the build's validation windows (every domain) under the same probe a
replica samples real traffic with (zerolayer.engines.torch_engine.probe), so that live and
calibrated figures count the same things the same way.

Per layer: the share of down_proj's inputs at or under the silence map's threshold of that
layer; for a tier that thresholds its inputs, the share its thresholds skip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["live_reference"]


def live_reference(
    model_dir: Path,
    kind: str,
    folder: Path | None,
    thresholds: list[float],
    windows: list[list[int]],
) -> dict[str, Any]:
    """The calibrated figures of artifact `kind` in `folder` (None: the dense model)."""
    from zerolayer.engines.torch_engine.cache import SlotCache
    from zerolayer.engines.torch_engine.kernels import Compiler
    from zerolayer.engines.torch_engine.model import load_llama
    from zerolayer.engines.torch_engine.probe import Probe

    longest = max(len(w) for w in windows)
    # torch ops only: a multi-token pass does not use the compiled kernels anyway
    model = load_llama(model_dir, kind, folder, max_len=longest, compiler=Compiler(enabled=False))
    probe = Probe(thresholds, model.shape.layers)
    cache = SlotCache(model.shape, torch.float32, torch.device("cpu"), longest)
    cache.ensure(1, longest)
    for w in windows:
        model.prefill(w, 0, cache, probe)
    rates = Probe.rates(probe.drain())
    return {
        "thresholds": [float(t) for t in thresholds],
        "sparsity": [None if v is None else round(v, 5) for v in rates["sparsity"]],
        "skip_rate": None if rates["skip_rate"] is None else round(rates["skip_rate"], 5),
        "tokens": rates["tokens"],
        "measured_on": f"{len(windows)} validation windows of every domain",
    }
