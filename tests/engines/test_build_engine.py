"""build_engine: a tier's config picks the engine (one config model per engine), the platform's
kernel settings reach the torch engine's compiler, and a tier's engine_args arrive at its
engine."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError
from zerolayer.config import FakeTier, KernelConfig, TierConfig, TorchTier, VllmTier
from zerolayer.engines import FakeEngine, build_engine
from zerolayer.engines.torch_engine import Compiler, TorchEngine
from zerolayer.engines.vllm_engine import VLLMEngine

TIER = TypeAdapter(TierConfig)


def test_kernel_settings_reach_the_torch_engine() -> None:
    tier = TorchTier(engine="torch", artifact="dense")
    kernels = KernelConfig(cc="/opt/cc", cflags=["-O2"], enabled=False)
    engine = build_engine("/models/m", tier, 512, None, kernels)
    assert isinstance(engine, TorchEngine)
    assert engine.compiler == Compiler("/opt/cc", ("-O2",), enabled=False)
    assert build_engine("/models/m", tier, 512).compiler is None  # the engine's defaults


def test_a_fake_tier_gets_the_scripted_engine() -> None:
    tier = FakeTier(engine="fake", artifact="masked", fake_script=["a", "b"], fake_delay_s=0.5)
    engine = build_engine("/models/m", tier, 512)
    assert isinstance(engine, FakeEngine) and engine.script == ["a", "b"]
    assert engine.delay_s == 0.5


def test_each_engine_has_its_own_config() -> None:
    assert isinstance(TIER.validate_python({"artifact": "dense"}), VllmTier)  # the default
    assert isinstance(TIER.validate_python({"engine": "torch", "artifact": "sparse24"}), TorchTier)
    assert isinstance(TIER.validate_python({"engine": "fake", "fake_script": ["x"]}), FakeTier)
    with pytest.raises(ValidationError, match="device"):  # a torch setting on a vLLM tier
        TIER.validate_python({"engine": "vllm", "device": "cpu"})
    with pytest.raises(ValidationError, match="fake_script"):  # test-only fields stay there
        TIER.validate_python({"engine": "torch", "fake_script": ["x"]})
    with pytest.raises(ValidationError, match="sparse24"):
        TIER.validate_python({"engine": "vllm", "artifact": "sparse24"})
    with pytest.raises(ValidationError):
        TIER.validate_python({"engine": "tensorrt"})


def test_torch_engine_args_arrive_at_the_engine() -> None:
    tier = TorchTier(engine="torch", engine_args={"prefill_tokens": 333, "offload_layers": 2})
    engine = build_engine("/models/m", tier, 512)
    assert isinstance(engine, TorchEngine)
    assert (engine.prefill_tokens, engine.offload_layers) == (333, 2)
    assert build_engine("/models/m", TorchTier(engine="torch"), 512).prefill_tokens == 1024


def test_vllm_engine_args_arrive_and_eager_is_the_cpu_default() -> None:
    import torch

    tier = VllmTier(engine_args={"max_num_batched_tokens": 4096, "max_num_seqs": 8})
    engine = build_engine("/models/m", tier, 1024)
    assert isinstance(engine, VLLMEngine)
    args = engine.args()
    assert args["max_num_batched_tokens"] == 4096 and args["max_num_seqs"] == 8  # tier's wins
    assert args["enforce_eager"] is (not torch.cuda.is_available())
    assert build_engine("/m", VllmTier(enforce_eager=False), 1024).args()["enforce_eager"] is False
    assert build_engine("/m", VllmTier(enforce_eager=True), 1024).args()["enforce_eager"] is True


def test_vllm_takes_the_arguments_zerolayer_gives_it() -> None:
    """Every name in args() is one of vLLM's own engine arguments (a typo or a rename in a vLLM
    upgrade fails here, not at a replica's start)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    tier = VllmTier(engine_args={"max_num_batched_tokens": 4096})
    args = build_engine("/models/m", tier, 1024).args()  # type: ignore[attr-defined]
    made = AsyncEngineArgs(**args)
    assert made.max_num_batched_tokens == 4096 and made.enforce_eager == args["enforce_eager"]
