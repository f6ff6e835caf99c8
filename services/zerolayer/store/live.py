"""The encoding of the tiers' live counts in Redis: written by each tier replica's recorder
(zerolayer.replicas.live), read by the gateway for /metrics (zerolayer.gateway.live) and by
`zerolayer collapse drift --live` (zerolayer.collapse.live_drift). Key names are in
zerolayer.store.keyspace.

Per tier, one hash per time bucket (keyspace.live_bucket) to which every replica of the tier
adds: per layer, the sampled decode steps' down_proj inputs at or under the reference threshold
(`u<i>`) out of all counted (`t<i>`); the inputs the tier's thresholds skipped (`skipped`) out of
all thresholded ones (`seen`), decode and prefill together; sampled tokens (`tokens`,
`prompt_tokens`); and the prefix cache's queried and hit tokens (`pc_queries`, `pc_hits`).

Per channel, each replica keeps a hash of its own per hour (keyspace.live_channels): `stamp`
(the artifact counted), `widths` and `rows` (per layer: channels, tokens; JSON) and `under` (the
counts, int64 little-endian, layer after layer)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from redis.typing import EncodableT, FieldT

__all__ = ["ChannelCounts", "fields_of"]


class ChannelCounts:
    """Per layer: tokens counted and, per channel, how many were at or under the threshold."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.under: list[np.ndarray | None] = []

    def add(self, signals: dict[str, Any]) -> bool:
        """Add both phases' per-channel counts of an engine's signals(); whether any came."""
        added = False
        for phase in ("decode", "prefill"):
            counts = signals.get(phase) or {}
            if counts.get("channels") and counts.get("rows"):
                added |= self.merge(counts["rows"], counts["channels"])
        return added

    def merge(self, rows: list[int], under: list[Any]) -> bool:
        """Add per-layer counts (tokens; per-channel counts, None where the layer was not
        counted); whether any were added. A layer of another width than the one held (another
        artifact's layout) is left out."""
        if not self.rows:
            self.rows, self.under = [0] * len(rows), [None] * len(rows)
        added = False
        for i, (n, c) in enumerate(zip(rows, under, strict=True)):
            if c is None or not n:
                continue
            c = np.asarray(c, dtype=np.int64)
            held = self.under[i]
            if held is not None and len(held) != len(c):
                continue
            self.under[i] = c if held is None else held + c
            self.rows[i] += int(n)
            added = True
        return added

    def fields(self, stamp: str | None) -> dict[FieldT, EncodableT]:
        """The hash fields of these counts (layers not counted: width 0)."""
        widths = [0 if u is None else len(u) for u in self.under]
        blob = b"".join(u.astype("<i8").tobytes() for u in self.under if u is not None)
        return {
            "stamp": stamp or "",
            "widths": json.dumps(widths),
            "rows": json.dumps(self.rows),
            "under": blob,
        }

    @staticmethod
    def parse(fields: Mapping[Any, Any]) -> tuple[str, list[int], list[np.ndarray | None]]:
        """(stamp, rows, per-layer counts) from a hash written by fields(), as read back
        (bytes names and values)."""
        widths = json.loads(fields[b"widths"])
        rows = json.loads(fields[b"rows"])
        flat = np.frombuffer(fields[b"under"], dtype="<i8")
        under: list[np.ndarray | None] = []
        at = 0
        for w in widths:
            under.append(flat[at : at + w].copy() if w else None)
            at += w
        return fields[b"stamp"].decode(), rows, under


def fields_of(signals: dict[str, Any]) -> Counter[str]:
    """An engine's signals() as the hash fields they add to."""
    out: Counter[str] = Counter()
    decode, prefill = signals.get("decode"), signals.get("prefill")
    if decode:
        for i, (u, t) in enumerate(zip(decode["under"], decode["total"], strict=True)):
            if t:
                out[f"u{i}"] += u
                out[f"t{i}"] += t
        out["tokens"] += decode["tokens"]
    if prefill:
        out["prompt_tokens"] += prefill["tokens"]
    for phase in (decode, prefill):
        if phase:
            out["skipped"] += phase["skipped"]
            out["seen"] += phase["seen"]
    cache = signals.get("prefix_cache")
    if cache:
        out["pc_queries"] += cache["queries"]
        out["pc_hits"] += cache["hits"]
    return +out  # zero counts dropped
