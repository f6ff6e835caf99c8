"""build_engine: a tier's config picks the engine, and the platform's kernel settings reach the
torch engine's compiler."""

from __future__ import annotations

from zerolayer.config import KernelConfig, TierConfig
from zerolayer.engines import FakeEngine, build_engine
from zerolayer.engines.torch_engine import Compiler, TorchEngine


def test_kernel_settings_reach_the_torch_engine() -> None:
    tier = TierConfig(engine="torch", artifact="dense")
    kernels = KernelConfig(cc="/opt/cc", cflags=["-O2"], enabled=False)
    engine = build_engine("/models/m", tier, 512, None, kernels)
    assert isinstance(engine, TorchEngine)
    assert engine.compiler == Compiler("/opt/cc", ("-O2",), enabled=False)
    assert build_engine("/models/m", tier, 512).compiler is None  # the engine's defaults


def test_a_fake_tier_gets_the_scripted_engine() -> None:
    tier = TierConfig(engine="fake", artifact="masked", fake_script=["a", "b"], fake_delay_s=0.5)
    engine = build_engine("/models/m", tier, 512)
    assert isinstance(engine, FakeEngine) and engine.script == ["a", "b"]
    assert engine.delay_s == 0.5
