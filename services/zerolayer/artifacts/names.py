"""Names every side agrees on: artifact kinds, the files they are made of, the projections they
touch, and the architecture name a pruned checkpoint declares."""

from __future__ import annotations

__all__ = [
    "FORMAT_VERSION",
    "ARTIFACTS",
    "BUILD_KINDS",
    "CARD_FILE",
    "ARCHITECTURE",
    "TOKENIZER_FILES",
    "MLP_PROJ",
    "ATTN_PROJ",
    "INPUT_KINDS",
]

# Bumped when a reader of this version could misread an artifact written by the next one.
# Artifacts written before versions were recorded read as version 1.
# 2: dynamic artifacts may carry distilled q/k/v and gate/up weights; 3: and a threshold on the
# output layer's input
FORMAT_VERSION = 3

# What a tier serves: the dense model, or one of the compiler's artifacts.
ARTIFACTS = ("dense", "masked", "pruned", "dynamic", "sparse24")
# What the compiler builds (pruned needs masked, which is then built too).
BUILD_KINDS = ("masked", "pruned", "dynamic", "sparse24")

# Written last by the compiler: a folder with a card is a finished artifact.
CARD_FILE = "tier_card.json"

# config.json "architectures" of a pruned checkpoint (per-layer MLP widths); vLLM builds it
# through zerolayer's plugin (engines/vllm_plugin.py).
ARCHITECTURE = "ZerolayerLlamaForCausalLM"

# Tokenizer files a checkpoint folder carries beside its weights.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)

MLP_PROJ = ("gate_proj", "up_proj", "down_proj")
ATTN_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")

# The projection inputs a dynamic artifact thresholds: mlp (down_proj's input, the MLP
# intermediate), attn (o_proj's, the attention output), qkv (q/k/v's), gate_up (gate/up's) and
# head (the output layer's: the final normalised hidden state; one threshold, keyed by layer 0).
INPUT_KINDS = ("mlp", "attn", "qkv", "gate_up", "head")
