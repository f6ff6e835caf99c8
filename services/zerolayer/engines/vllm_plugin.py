"""vLLM plugin (entry point group `vllm.general_plugins`): registers the model architectures of
zerolayer's tier artifacts with vLLM. vLLM calls `register()` in every process it starts, the
engine core (started with spawn) included, so a checkpoint whose config names one of these
architectures loads there too. Registration is by import path: vLLM imports the model class only
when such a checkpoint is loaded."""

from __future__ import annotations

from zerolayer.artifacts.names import ARCHITECTURE

__all__ = ["ARCHITECTURE", "register"]


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(
            ARCHITECTURE, "zerolayer.engines.vllm_models:ZerolayerLlamaForCausalLM"
        )
