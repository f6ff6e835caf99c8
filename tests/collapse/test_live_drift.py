"""`collapse drift --live`'s parts: replicas' per-channel counts through the real recorder into a
real Redis, added up across replicas and hours (another artifact's left out), and compared
channel by channel with a stored silence map (a small synthetic one: no model needed)."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import redis
import redis.asyncio as aioredis
import torch
from zerolayer.collapse.drift import write_report
from zerolayer.collapse.live_drift import compare_live, live_counts
from zerolayer.collapse.silence_map import BIN_EDGES, KindStats, SilenceMap
from zerolayer.config import PlatformConfig
from zerolayer.replicas.live import LiveRecorder

LAYERS, WIDTH = 3, 8


def synthetic_map() -> SilenceMap:
    """Channels 0-3 of every layer always near zero (bin 10), 4-7 always large (bin 60)."""
    hist = torch.zeros(LAYERS, WIDTH, len(BIN_EDGES) - 1)
    hist[:, :4, 10] = 100
    hist[:, 4:, 60] = 100
    ones = torch.ones(LAYERS, WIDTH)

    def stats() -> KindStats:
        return KindStats(ones, ones, ones, ones, hist.clone(), torch.ones(LAYERS, 2, WIDTH))

    return SilenceMap({"mlp": stats(), "attn": stats()}, {"quantile": 0.1, "model": "synthetic"})


class Scripted:
    """An engine whose signals() hands out what the test queued."""

    def __init__(self, queued: list[dict[str, Any]]) -> None:
        self.queued = queued

    async def signals(self) -> dict[str, Any]:
        return self.queued.pop(0) if self.queued else {}


def probe_counts(under: list[list[int] | None], rows: int) -> dict[str, Any]:
    """A drained probe's counts (Probe.drain): per layer `rows` tokens, and per channel how
    many of them were under the threshold (None: the layer not counted)."""
    return {
        "tokens": rows,
        "passes": rows,
        "under": [0 if u is None else sum(u) for u in under],
        "total": [0 if u is None else rows * len(u) for u in under],
        "skipped": 0,
        "seen": 0,
        "rows": [0 if u is None else rows for u in under],
        "channels": [None if u is None else torch.tensor(u) for u in under],
    }


def test_replicas_counts_add_up_across_replicas_and_hours_without_other_artifacts(
    base_config: PlatformConfig, redis_url: str
) -> None:
    tier = f"unit:{secrets.token_hex(4)}"
    mon = base_config.monitoring.model_copy(update={"channels_flush_s": 3600.0})
    silent = [10] * 4 + [0] * 4  # of 10 tokens: channels 0-3 under the threshold, 4-7 not

    async def scenario() -> None:
        client = aioredis.from_url(redis_url)
        now = [7_200_000.0]
        one = Scripted([{"decode": probe_counts([silent, silent, None], 10)}])
        two = Scripted(
            [
                {"prefill": probe_counts([silent, silent, None], 10)},
                {"decode": probe_counts([[0] * 8, silent, None], 10)},  # an hour later
            ]
        )
        old = Scripted([{"decode": probe_counts([silent, silent, silent], 10)}])
        recs = [
            LiveRecorder(client, tier, e, {}, mon, clock=lambda: now[0], stamp=s)  # type: ignore[arg-type]
            for e, s in ((one, "new"), (two, "new"), (old, "old"))
        ]
        for rec in recs:
            await rec.flush()  # the first flush writes at once; later ones wait channels_flush_s
        now[0] += 3600  # the next hour: the last one's counts stay, these go to a new hash
        await recs[1].flush()
        await recs[1].close()  # writes what it counted since its last write
        await client.aclose()

    asyncio.run(scenario())
    client = redis.Redis.from_url(redis_url)
    got = live_counts(client, tier, "new")
    assert got["replicas"] == 2 and got["other_artifacts"] == 1
    assert len(got["hours"]) == 2
    assert got["rows"] == [30, 30, 0] and got["under"][2] is None
    assert got["under"][0].tolist() == [20] * 4 + [0] * 4
    assert got["under"][1].tolist() == [30] * 4 + [0] * 4
    every = live_counts(client, tier, None)  # no artifact named: every count
    assert every["rows"] == [40, 40, 10] and every["replicas"] == 3
    ttl = [client.ttl(k) for k in client.scan_iter(match=f"zl:live:ch:{tier}:*")]
    assert ttl and all(0 < t <= mon.retention_s for t in ttl)
    client.close()


def test_live_counts_against_the_map_report_the_channels_that_changed(tmp_path: Path) -> None:
    smap = synthetic_map()
    thresholds = [float(t) for t in smap.stats["mlp"].thresholds(0.1)]
    as_stored = np.array([20] * 4 + [0] * 4)
    woke = as_stored.copy()
    woke[0] = 0  # channel 0 of layer 1 is no longer silent on live text
    counts = {
        "rows": [20, 20, 0],
        "under": [as_stored, woke, None],
        "replicas": 1,
        "hours": [2000],
        "other_artifacts": 0,
    }
    ref = {"thresholds": thresholds, "sparsity": [0.5, 0.5, 0.5]}
    report = compare_live(smap, counts, ref)
    assert report["thresholds_match"] is True
    assert report["new"]["layers_measured"] == 2
    assert report["layers_not_measured"] == {"2": "no sampled tokens"}
    mlp = report["mlp"]
    assert mlp["channels_changed"] == 1 and mlp["became_active"] == 1
    assert mlp["top_changes"][0] == {"layer": 1, "channel": 0, "stored": 1.0, "new": 0.0}
    assert mlp["silence_ratio_change"] == [0.0, -0.125, 0.0]
    assert report["sparsity_live"][:2] == [0.5, 0.375]
    assert report["sparsity_drift_points"][:2] == [0.0, -12.5]
    # counted against other thresholds: said, not hidden
    other = compare_live(smap, counts, {"thresholds": [t * 2 for t in thresholds]})
    assert other["thresholds_match"] is False
    # a narrower served layer (a pruned tier) is not compared channel by channel
    narrow = compare_live(smap, {**counts, "under": [as_stored[:6], woke, None]}, ref)
    assert narrow["layers_not_measured"]["0"] == "6 channels served, the map has 8"
    js, png = write_report(report, tmp_path / "live")
    assert json.loads(js.read_text())["mlp"]["channels_changed"] == 1
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_no_counts_measure_no_layer() -> None:
    empty = {"rows": [], "under": [], "replicas": 0, "hours": [], "other_artifacts": 0}
    report = compare_live(synthetic_map(), empty)
    assert report["new"]["layers_measured"] == 0
    assert len(report["layers_not_measured"]) == LAYERS
    assert report["mlp"]["channels_changed"] == 0
