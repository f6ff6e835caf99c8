"""The collapse compiler: measure which channels go (near) zero on real text (the silence map),
validate cuts by ablation, draw what was measured, and build tier artifacts with their cards.

Serving reaches it only from the launcher: `missing_kinds` says what a start lacks, and a
worker process (collapse.worker) builds it while the platform serves. The compiler builds on
zerolayer.artifacts (formats) and may use the engines (its chat corpus is the model's own
answers), never the other way round."""

from zerolayer.collapse.ablate import Evaluation, Evaluator, activation_threshold, channel_mask
from zerolayer.collapse.calibrate import calibrate
from zerolayer.collapse.corpus import Corpus, files_corpus, pydoc_corpus, token_windows
from zerolayer.collapse.draw import draw_html, draw_png
from zerolayer.collapse.missing import clear_cards, missing_kinds, tiers_of_kind
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
    "clear_cards",
    "missing_kinds",
    "tiers_of_kind",
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
