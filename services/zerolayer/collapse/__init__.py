"""The collapse compiler: measure which channels go (near) zero on real text (the silence map),
validate cuts by ablation, draw what was measured, and build tier artifacts with their cards.

Serving reaches it through one entry, `build_missing` (the launcher, before the platform
starts); the compiler builds on zerolayer.artifacts (formats) and may use the engines (its chat
corpus is the model's own answers), never the other way round."""

from zerolayer.collapse.ablate import Evaluation, Evaluator, activation_threshold, channel_mask
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import Corpus, files_corpus, pydoc_corpus, token_windows
from zerolayer.collapse.draw import draw_html, draw_png
from zerolayer.collapse.missing import BuildProgress, build_missing, build_tiers, missing_kinds
from zerolayer.collapse.reconstruct import (
    gram_matrices,
    obs_keep,
    repaired,
    repaired_weight,
    swapped,
)
from zerolayer.collapse.recover import distill
from zerolayer.collapse.select import channel_scores, dynamic_thresholds, keep_masks, protected
from zerolayer.collapse.silence_map import SilenceMap

__all__ = [
    "BuildProgress",
    "build_missing",
    "build_tiers",
    "missing_kinds",
    "Evaluation",
    "Evaluator",
    "activation_threshold",
    "channel_mask",
    "calibrate",
    "Corpus",
    "files_corpus",
    "pydoc_corpus",
    "token_windows",
    "draw_html",
    "draw_png",
    "channel_scores",
    "dynamic_thresholds",
    "keep_masks",
    "protected",
    "SilenceMap",
    "gram_matrices",
    "obs_keep",
    "repaired",
    "repaired_weight",
    "swapped",
    "distill",
]
