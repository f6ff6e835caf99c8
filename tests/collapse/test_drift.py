"""Drift: the same text shows no drift; different text does, and the report is drawn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import files_corpus, token_windows
from zerolayer.collapse.drift import compare, write_report
from zerolayer.collapse.silence_map import SilenceMap

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_same_text_has_no_drift(
    small_map: SilenceMap, dense: Any, calib_windows: list[list[int]]
) -> None:
    again = calibrate(dense, calib_windows, quantile=0.1, progress=False)
    report = compare(small_map, again)
    for kind in ("mlp", "attn"):
        assert report[kind]["channels_changed"] == 0
        assert all(c == 0 for c in report[kind]["silence_ratio_change"])


def test_other_text_drifts_and_is_reported(
    small_map: SilenceMap, dense: Any, tokenizer: Any, tmp_path: Path
) -> None:
    text = tmp_path / "chat.txt"
    text.write_text("哈哈 ok lol!!! 😂😂 see u tmrw, k? " * 200)
    windows = token_windows(tokenizer, files_corpus([text]), 4, 128, seed=0)
    new = calibrate(dense, windows, quantile=0.1, progress=False)
    report = compare(small_map, new)
    assert report["mlp"]["channels_changed"] + report["attn"]["channels_changed"] > 0
    assert report["mlp"]["mean_abs_silent_share_change"] > 0.01
    js, png = write_report(report, tmp_path / "drift")
    data = json.loads(js.read_text())
    assert data["attn"]["channels_changed"] == report["attn"]["channels_changed"]
    assert len(data["mlp"]["silence_ratio_change"]) == dense.config.num_hidden_layers
    assert png.read_bytes()[:4] == b"\x89PNG"
