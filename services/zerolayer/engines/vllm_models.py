"""vLLM model classes for tier artifacts (imported by vLLM only, through vllm_plugin).

ZerolayerLlamaForCausalLM is vLLM's Llama with one change: each decoder layer builds its MLP with
its own intermediate width, read from the checkpoint's config.json (`zerolayer.intermediate_sizes`,
written by zerolayer.artifacts.save_pruned). The pruned checkpoint's weights then load as they are,
and the engine computes only the kept channels.
"""

from __future__ import annotations

import copy
from typing import Any

from vllm.model_executor.models.llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
)
from vllm.model_executor.models.utils import extract_layer_index

__all__ = ["ZerolayerLlamaForCausalLM", "layer_widths"]


def layer_widths(config: Any) -> list[int] | None:
    """Per-layer MLP widths from a checkpoint config (None: every layer has the config's)."""
    extra = getattr(config, "zerolayer", None) or {}
    if isinstance(extra, dict):
        return extra.get("intermediate_sizes")
    return getattr(extra, "intermediate_sizes", None)


class ZerolayerDecoderLayer(LlamaDecoderLayer):
    """A Llama decoder layer whose MLP width is its own."""

    def __init__(
        self,
        vllm_config: Any,
        prefix: str = "",
        config: Any = None,
        attn_layer_type: type = LlamaAttention,
    ) -> None:
        config = config or vllm_config.model_config.hf_config
        widths = layer_widths(config)
        if widths is not None:
            config = copy.copy(config)
            config.intermediate_size = int(widths[extract_layer_index(prefix)])
        super().__init__(vllm_config, prefix, config=config, attn_layer_type=attn_layer_type)


class ZerolayerLlamaForCausalLM(LlamaForCausalLM):
    """Llama with per-layer MLP widths (pruned tier checkpoints)."""

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=ZerolayerDecoderLayer)
