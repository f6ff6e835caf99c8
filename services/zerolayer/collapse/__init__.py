"""The collapse compiler: measure which channels go (near) zero on real text (the silence map),
validate cuts by ablation, and draw what was measured."""

from zerolayer.collapse.ablate import Evaluation, Evaluator, activation_threshold, channel_mask
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import Corpus, files_corpus, pydoc_corpus, token_windows
from zerolayer.collapse.draw import draw_html, draw_png
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
