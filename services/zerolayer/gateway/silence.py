"""A model's silence map over HTTP, for the console (any API key, or the admin key):

  GET /v1/models/{model}/silence_map[?quantile=&silent_share=]
      every layer x channel's silent share (bytes, base64: share * 255), per layer the
      silence ratio and the |a| threshold at the quantile
  GET /v1/models/{model}/silence_map/{kind}/{layer}/{channel}[?quantile=]
      one channel: its statistics and its mean |a| on each calibration sample

The map is the one the collapse compiler measured (<artifacts>/<model>/silence_map); it is read
once per change of its file."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import torch
from fastapi import Request

from zerolayer.artifacts.silence_map import SilenceMap
from zerolayer.errors import APIError, InvalidRequest, ModelNotFound
from zerolayer.gateway.http import query_value
from zerolayer.gateway.parts import GatewayParts

__all__ = ["SilenceMaps", "share_param"]

_FILE = "silence_map.safetensors"


class SilenceMapNotFound(APIError):
    """The model is served but no silence map was measured for it (yet)."""

    status_code = 404
    error_type = "invalid_request_error"
    code = "silence_map_not_found"


def share_param(request: Request, name: str, default: float) -> float:
    return query_value(
        request, name, default, float, lambda v: 0 < v < 1, "a number between 0 and 1"
    )


class SilenceMaps:
    """The models' silence maps, loaded when first asked and again when their file changes."""

    def __init__(self, parts: GatewayParts):
        self.config = parts.config
        self._maps: dict[str, tuple[float, SilenceMap]] = {}

    def folder(self, model: str) -> Path:
        if model not in self.config.models:
            raise ModelNotFound(
                f"the model {model!r} does not exist; models: {', '.join(self.config.models)}",
                param="model",
            )
        return self.config.artifact_root(model) / "silence_map"

    def load(self, model: str) -> SilenceMap:
        path = self.folder(model) / _FILE
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            raise SilenceMapNotFound(
                f"no silence map of {model!r} yet: the collapse compiler measures it when it "
                "builds the model's first tier"
            ) from None
        known = self._maps.get(model)
        if known is None or known[0] != mtime:
            known = (mtime, SilenceMap.load(path.parent))
            self._maps[model] = known
        return known[1]

    def overview(self, model: str, quantile: float | None, silent_share: float) -> dict[str, Any]:
        smap = self.load(model)
        q = smap.meta.get("quantile", 0.1) if quantile is None else quantile
        summary = smap.summary(q, silent_share=silent_share, top=0)
        kinds = {}
        for kind, st in smap.stats.items():
            frac = st.silent_fraction(q)
            u8 = (frac * 255).round().clamp(0, 255).to(torch.uint8).numpy().tobytes()
            kinds[kind] = {
                "layers": frac.shape[0],
                "channels": frac.shape[1],
                "samples": st.sample_mean_abs.shape[1],
                "silent_u8": base64.b64encode(u8).decode(),
                "silence_ratio": summary[kind]["silence_ratio"],
                "thresholds": summary[kind]["thresholds"],
            }
        meta = smap.meta
        return {
            "object": "silence_map",
            "model": model,
            "quantile": q,
            "silent_share": silent_share,
            "samples": meta.get("samples"),
            "seq_len": meta.get("seq_len"),
            "corpus": (meta.get("corpus") or {}).get("name"),
            "kinds": kinds,
        }

    def channel(
        self, model: str, kind: str, layer: int, channel: int, quantile: float | None
    ) -> dict[str, Any]:
        smap = self.load(model)
        st = smap.stats.get(kind)
        if st is None:
            raise InvalidRequest(f"kind takes {', '.join(smap.stats)} (got {kind!r})", param="kind")
        layers, channels = st.mean_abs.shape[:2]
        if not 0 <= layer < layers:
            raise InvalidRequest(f"layer takes 0 to {layers - 1} (got {layer})", param="layer")
        if not 0 <= channel < channels:
            raise InvalidRequest(
                f"channel takes 0 to {channels - 1} (got {channel})", param="channel"
            )
        q = smap.meta.get("quantile", 0.1) if quantile is None else quantile
        return {
            "object": "silence_map.channel",
            "model": model,
            "kind": kind,
            "layer": layer,
            "channel": channel,
            "quantile": q,
            "threshold": round(float(st.thresholds(q)[layer]), 8),
            "silent_fraction": round(float(st.silent_fraction(q)[layer, channel]), 5),
            "mean_abs": round(float(st.mean_abs[layer, channel]), 7),
            "max_abs": round(float(st.max_abs[layer, channel]), 6),
            "std": round(float(st.std[layer, channel]), 7),
            # mean |a| of the channel on each calibration sample, in the map's sample order
            "samples": [round(float(v), 7) for v in st.sample_mean_abs[layer, :, channel]],
        }
