"""The platform as data: one pydantic config, loaded once from platform/ files, then environment
variables, then CLI flags, and passed down. No other module reads os.environ.

  models.py           served models, their tiers and the collapse compiler's settings
  plans.py            customer plans: tiers, prices, limits, priority
  services.py         Redis, Ray, gateway, tokenfix, chunker, the torch engine's kernels,
                      monitoring (the live signals of collapsed tiers), traffic
                      sampling (prompts kept for recalibration)
  platform_config.py  PlatformConfig, the whole
  loader.py           load_config: files, then environment, then flags
"""

from zerolayer.config.loader import (
    config_from_data,
    default_cache_dir,
    default_platform_dir,
    load_config,
)
from zerolayer.config.models import (
    ENGINE_ARTIFACTS,
    ActorOptions,
    AutoscalingConfig,
    ClusterTier,
    CollapseConfig,
    FakeTier,
    ModelConfig,
    ModelSource,
    ShortRequests,
    TierConfig,
    TorchTier,
    VllmTier,
)
from zerolayer.config.plans import (
    NANOS_PER_USD,
    PlanConfig,
    PlanLimits,
    TierPrice,
    nanos_usd,
    usd_nanos,
    usd_text,
)
from zerolayer.config.platform_config import PlatformConfig
from zerolayer.config.services import (
    BillingConfig,
    ChunkerConfig,
    ConversationsConfig,
    FilesConfig,
    GatewayConfig,
    HardwareClass,
    HardwareConfig,
    IdempotencyConfig,
    KernelConfig,
    MonitoringConfig,
    RayConfig,
    RedisConfig,
    TokenfixConfig,
    TrafficSamplingConfig,
)

__all__ = [
    "BillingConfig",
    "IdempotencyConfig",
    "FilesConfig",
    "BatchesConfig",
    "NANOS_PER_USD",
    "nanos_usd",
    "usd_nanos",
    "usd_text",
    "ENGINE_ARTIFACTS",
    "ModelSource",
    "AutoscalingConfig",
    "ActorOptions",
    "ClusterTier",
    "ShortRequests",
    "TierConfig",
    "VllmTier",
    "TorchTier",
    "FakeTier",
    "CollapseConfig",
    "ModelConfig",
    "TierPrice",
    "PlanLimits",
    "PlanConfig",
    "RedisConfig",
    "RayConfig",
    "GatewayConfig",
    "HardwareClass",
    "HardwareConfig",
    "ChunkerConfig",
    "ConversationsConfig",
    "TokenfixConfig",
    "KernelConfig",
    "MonitoringConfig",
    "TrafficSamplingConfig",
    "PlatformConfig",
    "default_platform_dir",
    "default_cache_dir",
    "load_config",
    "config_from_data",
]
