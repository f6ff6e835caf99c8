"""Tier artifacts on disk: their names, formats, readers and writers, versioned.

A leaf package: it imports nothing of zerolayer but its errors, so the engines (which load
artifacts) and the collapse compiler (which writes them) both build on it without touching each
other. Nothing here patches a model; applying an artifact to a transformers model is the
compiler's business (zerolayer.collapse.apply), to the torch engine's weights the engine's.
"""

from zerolayer.artifacts.card import card_stamp, check_version, is_built, read_card, write_card
from zerolayer.artifacts.checkpoint import read_config, read_state
from zerolayer.artifacts.dynamic import Dynamic, read_dynamic, save_dynamic
from zerolayer.artifacts.masked import (
    layer_widths,
    narrow_state,
    read_masks,
    save_masked,
    save_pruned,
)
from zerolayer.artifacts.names import (
    ARCHITECTURE,
    ARTIFACTS,
    ATTN_PROJ,
    BUILD_KINDS,
    CARD_FILE,
    FORMAT_VERSION,
    INPUT_KINDS,
    MLP_PROJ,
    TOKENIZER_FILES,
)
from zerolayer.artifacts.sparse24 import read_sparse24, save_sparse24

__all__ = [
    "ARCHITECTURE",
    "ARTIFACTS",
    "ATTN_PROJ",
    "BUILD_KINDS",
    "CARD_FILE",
    "FORMAT_VERSION",
    "INPUT_KINDS",
    "MLP_PROJ",
    "TOKENIZER_FILES",
    "Dynamic",
    "check_version",
    "is_built",
    "layer_widths",
    "narrow_state",
    "read_card",
    "card_stamp",
    "read_config",
    "read_dynamic",
    "read_masks",
    "read_sparse24",
    "read_state",
    "save_dynamic",
    "save_masked",
    "save_pruned",
    "save_sparse24",
    "write_card",
]
