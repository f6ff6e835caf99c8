"""Engines behind one async protocol: vLLM for real models, a scripted fake for unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zerolayer.engines.base import Engine, SamplingSpec, TokenDelta
from zerolayer.engines.fake import FakeEngine

if TYPE_CHECKING:
    from zerolayer.config import TierConfig

__all__ = ["Engine", "SamplingSpec", "TokenDelta", "FakeEngine", "build_engine"]


def build_engine(model_dir: str, tier: TierConfig, max_model_len: int) -> Engine:
    """The engine a tier's config names."""
    if tier.engine == "fake":
        return FakeEngine(tier.fake_script)
    from zerolayer.engines.vllm_engine import VLLMEngine

    return VLLMEngine(
        model_dir,
        dtype=tier.dtype,
        max_model_len=max_model_len,
        kv_cache_gib=tier.kv_cache_gib,
        gpu_memory_utilization=tier.gpu_memory_utilization,
        max_num_seqs=tier.max_ongoing_requests,
    )
