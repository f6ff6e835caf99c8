"""Calibration: run the dense model over corpus windows with forward hooks on every decoder
layer's down_proj and o_proj inputs, and accumulate per-channel statistics into a SilenceMap."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from zerolayer.collapse.model import decoder_layers, input_modules, projection, removing
from zerolayer.collapse.progress import bar
from zerolayer.collapse.silence_map import BIN_EDGES, KINDS, KindStats, SilenceMap

__all__ = ["calibrate", "capture_inputs"]

_LOG_EDGES = BIN_EDGES.log10().float()


class _Accumulator:
    """Running sums for one layer and kind."""

    def __init__(self, channels: int, samples: int):
        nb = len(BIN_EDGES) - 1
        self.channels = channels
        self.sum_abs = torch.zeros(channels, dtype=torch.float64)
        self.sum = torch.zeros(channels, dtype=torch.float64)
        self.sum_sq = torch.zeros(channels, dtype=torch.float64)
        self.max_abs = torch.zeros(channels)
        self.hist = torch.zeros(channels * nb, dtype=torch.int64)
        self.sample_mean_abs = torch.zeros(samples, channels)
        self.tokens = 0
        self._nb = nb
        self._offsets = torch.arange(channels) * nb

    def add(self, x: torch.Tensor, sample: int) -> None:
        a = x.reshape(-1, self.channels).float()
        absa = a.abs()
        self.sum_abs += absa.sum(0, dtype=torch.float64)
        self.sum += a.sum(0, dtype=torch.float64)
        self.sum_sq += (a * a).sum(0, dtype=torch.float64)
        self.max_abs = torch.maximum(self.max_abs, absa.amax(0))
        bins = torch.bucketize(absa.clamp_min(1e-30).log10(), _LOG_EDGES[1:-1])
        self.hist += torch.bincount((bins + self._offsets).flatten(), minlength=self.hist.numel())
        self.sample_mean_abs[sample] = absa.mean(0)
        self.tokens += a.shape[0]


@contextmanager
def capture_inputs(
    model: Any, fn: Callable[[int, str, torch.Tensor], None], kinds: Iterable[str] = KINDS
) -> Iterator[None]:
    """Call fn(layer, kind, input) for the input of every layer's projections of these kinds
    (collapse.model.input_modules; "head": the output layer's, as layer 0) during forwards.
    Hooks installed after a cut's see its thresholded inputs."""
    handles = []
    for i, kind, modules in input_modules(model, kinds):

        def hook(_m: Any, args: tuple[torch.Tensor, ...], i: int = i, kind: str = kind) -> None:
            fn(i, kind, args[0].detach())

        handles.append(modules[0].register_forward_pre_hook(hook))
    with removing(handles):
        yield


@torch.no_grad()
def calibrate(
    model: Any,
    windows: list[list[int]],
    *,
    quantile: float = 0.1,
    meta: dict[str, Any] | None = None,
    progress: bool = True,
) -> SilenceMap:
    """Measure every layer's MLP intermediate and attention output over the windows."""
    layers = decoder_layers(model)
    accs: dict[tuple[int, str], _Accumulator] = {}
    for i, layer in enumerate(layers):
        for kind in KINDS:
            accs[(i, kind)] = _Accumulator(projection(layer, kind).in_features, len(windows))
    current = {"sample": 0}

    def record(i: int, kind: str, x: torch.Tensor) -> None:
        accs[(i, kind)].add(x, current["sample"])

    with capture_inputs(model, record):
        for s, ids in enumerate(
            bar(windows, desc="calibrating", unit="sample", disable=not progress)
        ):
            current["sample"] = s
            model(torch.tensor([ids]), use_cache=False)

    stats = {}
    for kind in KINDS:
        group = [accs[(i, kind)] for i in range(len(layers))]
        n = torch.tensor([float(a.tokens) for a in group], dtype=torch.float64).view(-1, 1)
        sums = torch.stack([a.sum for a in group])
        stats[kind] = KindStats(
            mean_abs=(torch.stack([a.sum_abs for a in group]) / n).float(),
            mean=(sums / n).float(),
            rms=(torch.stack([a.sum_sq for a in group]) / n).sqrt().float(),
            max_abs=torch.stack([a.max_abs for a in group]),
            hist=torch.stack([a.hist.view(a.channels, -1) for a in group]).int(),
            sample_mean_abs=torch.stack([a.sample_mean_abs for a in group]).half(),
        )
    info = {
        "samples": len(windows),
        "seq_len": len(windows[0]) if windows else 0,
        "quantile": quantile,
        **(meta or {}),
    }
    return SilenceMap(stats, info)
