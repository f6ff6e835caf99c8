"""Engines behind one async protocol: vLLM, zerolayer's torch engine (every tier artifact), and a
scripted fake for unit tests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zerolayer.engines.base import Engine, SamplingSpec, TokenDelta
from zerolayer.engines.fake import FakeEngine

if TYPE_CHECKING:
    from zerolayer.config import KernelConfig, MonitoringConfig, TierConfig

__all__ = ["Engine", "SamplingSpec", "TokenDelta", "FakeEngine", "build_engine"]


def build_engine(
    model_dir: str,
    tier: TierConfig,
    max_model_len: int,
    artifact_dir: str | None = None,
    kernels: KernelConfig | None = None,
    monitoring: MonitoringConfig | None = None,
    live_thresholds: list[float] | None = None,
) -> Engine:
    """The engine a tier's config names, loading the tier's artifact from artifact_dir (the
    torch engine builds its CPU kernels as `kernels` says, and samples its steps for the live
    signals as `monitoring` says, against the per-layer `live_thresholds`)."""
    from zerolayer.config import FakeTier, TorchTier

    if isinstance(tier, FakeTier):
        return FakeEngine(tier.fake_script, delay_s=tier.fake_delay_s)
    if isinstance(tier, TorchTier):
        from zerolayer.engines.torch_engine import Compiler, TorchEngine

        compiler = None
        if kernels is not None:
            compiler = Compiler(kernels.cc, tuple(kernels.cflags), kernels.enabled)

        args: dict[str, Any] = {
            "artifact": tier.artifact,
            "artifact_dir": artifact_dir,
            "dtype": tier.dtype,
            "device": tier.device,
            "max_model_len": max_model_len,
            "max_num_seqs": tier.max_ongoing_requests,
            "kv_cache_gib": tier.kv_cache_gib,
            "prefix_cache_gib": tier.prefix_cache_gib,
            "threads": tier.threads,
            "device_budget_gib": tier.device_budget_gib,
            "sparse_min_tokens": tier.sparse_min_tokens,
            "compiler": compiler,
            "live_sample_rate": monitoring.sample_rate if monitoring else 0.0,
            "live_thresholds": live_thresholds,
            "job_defer_s": monitoring.canary_defer_s if monitoring else 30.0,
        }
        return TorchEngine(model_dir, **{**args, **tier.engine_args})
    from zerolayer.engines.vllm_engine import VLLMEngine

    # vLLM serves the dense checkpoint, or a pruned one (its per-layer widths via the plugin):
    # the only artifacts the config lets it take, both folders of a checkpoint
    return VLLMEngine(
        artifact_dir or model_dir,
        dtype=tier.dtype,
        max_model_len=max_model_len,
        kv_cache_gib=tier.kv_cache_gib,
        gpu_memory_utilization=tier.gpu_memory_utilization,
        max_num_seqs=tier.max_ongoing_requests,
        enforce_eager=tier.enforce_eager,
        engine_args=tier.engine_args,
    )
