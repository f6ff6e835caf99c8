"""Drift of a served tier's live activations from the stored silence map, channel by channel.

The tier's replicas count, on the decode steps and prompts their probe samples, how many tokens had
each channel of down_proj's input at or under the silence map's threshold of its layer
(zerolayer.replicas.live, encoded as zerolayer.store.live says). Against the same thresholds, the
stored map gives each channel's share on the calibration text; the report is the same as `collapse
drift` on a new text (per layer silence ratios, the channels that changed state, a picture), plus
each layer's live sparsity against the tier's calibrated value on its card."""

from __future__ import annotations

from typing import Any

import numpy as np
import redis
import torch

from zerolayer.collapse.drift import kind_report
from zerolayer.collapse.silence_map import SilenceMap
from zerolayer.store import keyspace
from zerolayer.store.live import ChannelCounts

__all__ = ["compare_live", "live_counts"]


def live_counts(client: redis.Redis, tier: str, stamp: str | None) -> dict[str, Any]:
    """Every replica's per-channel counts of `tier` ("model:tier") still in Redis, added up;
    with `stamp`, only those of that artifact (the others are counted in `other_artifacts`)."""
    total = ChannelCounts()
    replicas, hours, other = set(), set(), 0
    for key in client.scan_iter(match=keyspace.live_channels_pattern(tier), count=500):
        fields = client.hgetall(key)
        if not fields:
            continue  # expired since the scan saw it
        seen, r, u = ChannelCounts.parse(fields)
        if stamp is not None and seen != stamp:
            other += 1
            continue
        total.merge(r, u)
        *_, hour, replica = key.decode().rsplit(":", 2)
        replicas.add(replica)
        hours.add(int(hour))
    return {
        "rows": total.rows,
        "under": total.under,
        "replicas": len(replicas),
        "hours": sorted(hours),
        "other_artifacts": other,
    }


def compare_live(
    stored: SilenceMap,
    counts: dict[str, Any],
    reference: dict[str, Any] | None = None,
    silent_share: float = 0.5,
    top: int = 50,
) -> dict[str, Any]:
    """The drift report of live counts (live_counts) against the stored map; `reference`: the
    tier card's live_reference (thresholds the replicas counted against, calibrated sparsity)."""
    q = stored.meta.get("quantile", 0.1)
    st = stored.stats["mlp"]
    layers, width = st.mean_abs.shape
    f_old = st.silent_fraction_under(st.threshold_bins(q))
    f_new = f_old.clone()
    rows = counts["rows"] or [0] * layers
    under = counts["under"] or [None] * layers
    not_measured: dict[str, str] = {}
    live: list[float | None] = [None] * layers
    for i in range(layers):
        u, n = (under[i], rows[i]) if i < len(rows) else (None, 0)
        if u is None or not n:
            not_measured[str(i)] = "no sampled tokens"
            continue
        live[i] = round(float(u.sum()) / (n * len(u)), 5)
        if len(u) != width:  # a narrower served layer: its channels are not the map's
            not_measured[str(i)] = f"{len(u)} channels served, the map has {width}"
            continue
        f_new[i] = torch.from_numpy(u.astype(np.float64) / n).float()
    reference = reference or {}
    calibrated = reference.get("sparsity") or [None] * layers
    ours = [float(t) for t in st.thresholds(q)]
    theirs = reference.get("thresholds")
    same = theirs is not None and np.allclose(ours, theirs, rtol=1e-5, atol=1e-9)
    return {
        "quantile": q,
        "silent_share": silent_share,
        "stored": stored.meta,
        "new": {
            "source": "live activations sampled by the tier's replicas (prompts and decode steps)",
            "tokens_per_layer": rows,
            "replicas": counts["replicas"],
            "hours": counts["hours"],
            "other_artifacts_left_out": counts["other_artifacts"],
            "layers_measured": layers - len(not_measured),
        },
        "thresholds_match": bool(same),
        "layers_not_measured": not_measured,
        "sparsity_live": live,
        "sparsity_calibrated": calibrated,
        "sparsity_drift_points": [
            None if a is None or b is None else round(100 * (a - b), 2)
            for a, b in zip(live, calibrated, strict=False)
        ],
        "mlp": kind_report(f_old, f_new, silent_share, top),
    }
