"""The pictures: a PNG, and an HTML page that is self-contained and holds the map's data."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from zerolayer.collapse.draw import draw_html, draw_png
from zerolayer.collapse.silence_map import SilenceMap

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_png_is_written(small_map: SilenceMap, tmp_path: Path) -> None:
    path = draw_png(small_map, tmp_path / "map.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_html_is_self_contained_and_holds_the_data(small_map: SilenceMap, tmp_path: Path) -> None:
    html = draw_html(small_map, tmp_path / "map.html").read_text()
    assert not re.search(r"https?://", html), "no network references"
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)
    data = json.loads(
        re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S).group(1)
    )
    summary = small_map.summary(small_map.meta["quantile"], silent_share=0.5, top=0)
    for kind, st in small_map.stats.items():
        d = data["kinds"][kind]
        layers, channels = st.mean_abs.shape
        assert (d["layers"], d["channels"], d["samples"]) == (layers, channels, 4)
        assert len(base64.b64decode(d["silent_u8"])) == layers * channels
        assert len(base64.b64decode(d["samples_u8"])) == layers * 4 * channels
        assert d["silence_ratio"] == summary[kind]["silence_ratio"]
        # the page keeps 5 decimals
        assert d["max_abs"][5] == pytest.approx(float(st.max_abs.flatten()[5]), abs=5.1e-6)
        # the per-sample values decode back to the measured ones (log scale, 8 bits)
        raw = base64.b64decode(d["samples_u8"])
        layer, channel = 3, 7
        for s in range(4):
            b = raw[(layer * 4 + s) * channels + channel]
            want = float(st.sample_mean_abs[layer, s, channel])
            got = d["samples_max"] * 10 ** ((b / 255 - 1) * 4) if b else 0.0
            assert got == pytest.approx(want, rel=0.05, abs=d["samples_max"] * 1e-4)
