"""Calibration on the real model with few samples: shapes, thresholds, determinism, round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import (
    CALIBRATION_MODULES,
    EVALUATION_MODULES,
    files_corpus,
    token_windows,
)
from zerolayer.collapse.silence_map import SilenceMap

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_shapes_follow_the_model(small_map: SilenceMap, dense: Any) -> None:
    cfg = dense.config
    mlp, attn = small_map.stats["mlp"], small_map.stats["attn"]
    assert mlp.mean_abs.shape == (cfg.num_hidden_layers, cfg.intermediate_size)
    assert attn.mean_abs.shape == (cfg.num_hidden_layers, cfg.num_attention_heads * cfg.head_dim)
    assert mlp.sample_mean_abs.shape == (cfg.num_hidden_layers, 4, cfg.intermediate_size)
    # every token of every window was counted once per channel
    assert int(mlp.hist[0, 0].sum()) == 4 * 128
    assert bool((mlp.max_abs >= mlp.mean_abs).all()) and bool((mlp.std >= 0).all())


def test_thresholds_and_silent_shares_grow_with_the_quantile(small_map: SilenceMap) -> None:
    st = small_map.stats["mlp"]
    prev_t, prev_f = None, None
    for q in (0.01, 0.05, 0.1, 0.25, 0.5, 0.75):
        t, f = st.thresholds(q), st.silent_fraction(q)
        if prev_t is not None:
            assert bool((t >= prev_t).all()) and bool((f >= prev_f - 1e-6).all())
        # a layer's quantile threshold puts about that share of its activations under it
        share = f.mean(1)
        assert bool((share >= q - 0.02).all()), (q, share.min())
        prev_t, prev_f = t, f
    assert bool((st.thresholds(0.5) > st.thresholds(0.01)).all())


def test_calibration_is_deterministic(
    dense: Any, calib_windows: list[list[int]], small_map: SilenceMap
) -> None:
    again = calibrate(dense, calib_windows, quantile=0.1, progress=False)
    for kind in ("mlp", "attn"):
        assert torch.equal(again.stats[kind].hist, small_map.stats[kind].hist)
        assert torch.allclose(again.stats[kind].mean_abs, small_map.stats[kind].mean_abs)


def test_save_and_load_round_trip(small_map: SilenceMap, tmp_path: Path) -> None:
    small_map.save(tmp_path)
    back = SilenceMap.load(tmp_path)
    assert back.meta == small_map.meta
    for kind in ("mlp", "attn"):
        assert torch.equal(back.stats[kind].max_abs, small_map.stats[kind].max_abs)
        assert torch.equal(back.stats[kind].sample_mean_abs, small_map.stats[kind].sample_mean_abs)
    summary = (tmp_path / "silence_map.json").read_text()
    assert '"silence_ratio"' in summary and '"top_silent"' in summary


def test_corpora_are_disjoint_and_user_files_work(tokenizer: Any, tmp_path: Path) -> None:
    assert not set(CALIBRATION_MODULES) & set(EVALUATION_MODULES)
    f = tmp_path / "prod.txt"
    f.write_text("customer asked about the invoice total and the refund policy. " * 80)
    corpus = files_corpus([f])
    windows = token_windows(tokenizer, corpus, 5, 64, seed=3)
    assert len(windows) == 5 and all(len(w) == 64 for w in windows)
    assert windows == token_windows(tokenizer, corpus, 5, 64, seed=3)


def test_default_corpus_text_is_the_same_every_time() -> None:
    from zerolayer.collapse.corpus import _pydoc_text

    # logging's docs print handler objects with their addresses; those must not leak in
    assert _pydoc_text("logging") == _pydoc_text("logging")
    assert " at 0x" not in _pydoc_text("logging")
