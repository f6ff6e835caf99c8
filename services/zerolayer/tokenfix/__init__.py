"""Tokenizer fix-up: repair model artifacts at import, build exact prompts at request time."""

from zerolayer.tokenfix.artifacts import (
    CHATML_TEMPLATE,
    ROUND_TRIP_SAMPLES,
    FixupReport,
    fix_model_dir,
    round_trip_failures,
)
from zerolayer.tokenfix.prompt import PromptBuilder

__all__ = [
    "CHATML_TEMPLATE",
    "ROUND_TRIP_SAMPLES",
    "FixupReport",
    "fix_model_dir",
    "round_trip_failures",
    "PromptBuilder",
]
