"""Tokenizer fix-up: repair model artifacts at import; at request time clean the text and build
exact prompts (in the gateway, or as its own deployment)."""

from zerolayer.tokenfix.artifacts import (
    CHATML_TEMPLATE,
    ROUND_TRIP_SAMPLES,
    FixupReport,
    fix_model_dir,
    round_trip_failures,
)
from zerolayer.tokenfix.prompt import PromptBuilder
from zerolayer.tokenfix.service import Tokenfix, clean_text

__all__ = [
    "CHATML_TEMPLATE",
    "ROUND_TRIP_SAMPLES",
    "FixupReport",
    "fix_model_dir",
    "round_trip_failures",
    "PromptBuilder",
    "Tokenfix",
    "clean_text",
]
