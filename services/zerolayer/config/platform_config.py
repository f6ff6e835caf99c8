"""PlatformConfig: everything the platform needs, in one object passed to every part."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from zerolayer.config.base import Strict
from zerolayer.config.models import ModelConfig
from zerolayer.config.plans import PlanConfig
from zerolayer.config.services import (
    BatchesConfig,
    BillingConfig,
    ChunkerConfig,
    ConversationsConfig,
    FilesConfig,
    GatewayConfig,
    HardwareConfig,
    IdempotencyConfig,
    KernelConfig,
    MonitoringConfig,
    RayConfig,
    RedisConfig,
    TokenfixConfig,
    TrafficSamplingConfig,
)

__all__ = ["PlatformConfig"]


class PlatformConfig(Strict):
    """Everything the platform needs, in one object passed to every part."""

    host: str = Field(default="127.0.0.1", description="Address the HTTP proxy binds")
    port: int = Field(default=8000, description="Port of the HTTP proxy")
    cache_dir: str = Field(description="Imported models and artifacts live here")
    artifacts_dir: str | None = Field(
        default=None, description="Collapse artifacts; default <cache>/artifacts"
    )
    build_missing_artifacts: bool = Field(
        default=True,
        description="Build missing tier artifacts in the background while the platform serves "
        "the tiers it has (else fail at start)",
    )
    artifact_watch_s: float = Field(
        default=2.0,
        gt=0,
        description="How often the launcher looks for another artifact in a served tier's "
        "folder (promoted or rolled back) and has its replicas swap to it",
    )
    build_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How much lower than serving the CPU priority of background builds is (nice)",
    )
    dev_plan: str = Field(default="pro", description="Plan of the key `zerolayer up` prints")
    dev_key_file: str | None = Field(
        default=None, description="Where `zerolayer up` keeps its key; default <cache>/dev-key"
    )
    default_model: str = Field(description="Model a request without a known id cannot fall to")
    models: dict[str, ModelConfig] = Field(description="Served models")
    plans: dict[str, PlanConfig] = Field(description="Customer plans")
    redis: RedisConfig = Field(default_factory=RedisConfig, description="Redis connection")
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray start-up")
    gateway: GatewayConfig = Field(default_factory=GatewayConfig, description="Gateway settings")
    tokenfix: TokenfixConfig = Field(
        default_factory=TokenfixConfig, description="Tokenfix deployment settings"
    )
    chunker: ChunkerConfig = Field(
        default_factory=ChunkerConfig, description="Chunker deployment settings"
    )
    kernels: KernelConfig = Field(
        default_factory=KernelConfig, description="The torch engine's compiled CPU kernels"
    )
    monitoring: MonitoringConfig = Field(
        default_factory=MonitoringConfig, description="Production signals of collapsed tiers"
    )
    traffic_sampling: TrafficSamplingConfig = Field(
        default_factory=TrafficSamplingConfig,
        description="Prompts of opted-in keys kept for recalibration",
    )
    conversations: ConversationsConfig = Field(
        default_factory=ConversationsConfig,
        description="Stored responses and conversations: how long they live",
    )
    billing: BillingConfig = Field(
        default_factory=BillingConfig,
        description="Usage events, their aggregates and the monthly invoices",
    )
    idempotency: IdempotencyConfig = Field(
        default_factory=IdempotencyConfig,
        description="Idempotency-Key on POST requests",
    )
    files: FilesConfig = Field(
        default_factory=FilesConfig, description="Uploaded files: where they live, how large"
    )
    batches: BatchesConfig = Field(
        default_factory=BatchesConfig, description="The Batch API's workers"
    )
    hardware: HardwareConfig = Field(
        default_factory=HardwareConfig,
        description="Hardware classes and their replica-hour prices (measured costs)",
    )
    admin_key_file: str | None = Field(
        default=None, description="Where `zerolayer up` keeps the admin key; <cache>/admin-key"
    )
    admin_key: str | None = Field(
        default=None,
        exclude=True,  # never dumped into deployment configs; they get its hash
        description="The admin key (ZEROLAYER_ADMIN_KEY); else read or made in admin_key_file",
    )

    @model_validator(mode="after")
    def _cross_check(self) -> PlatformConfig:
        if self.default_model not in self.models:
            raise ValueError(f"default_model {self.default_model!r} is not in models")
        if self.dev_plan not in self.plans:
            raise ValueError(f"dev_plan {self.dev_plan!r} is not in plans")
        served = {t for model in self.models.values() for t in model.tiers}
        for pname, plan in self.plans.items():
            unknown = [t for t in plan.tiers if t not in served]
            if unknown:
                raise ValueError(
                    f"plan {pname!r}: tier(s) {', '.join(unknown)} are served by no model "
                    f"(served tiers: {', '.join(sorted(served))})"
                )
            for mname, model in self.models.items():
                if plan.default_tier not in model.tiers:
                    raise ValueError(
                        f"plan {pname!r}: default tier {plan.default_tier!r} is not served "
                        f"for model {mname!r} (tiers: {sorted(model.tiers)})"
                    )
        return self

    def model_dir(self, model: str) -> Path:
        """Directory of the imported Hugging Face copy of a model."""
        source = self.models[model].source
        if source.kind == "hf-dir":
            return Path(source.path or "").expanduser()
        return Path(self.cache_dir) / "models" / model

    def artifact_root(self, model: str) -> Path:
        """Folder of a model's collapse artifacts: <artifacts_dir>/<model>."""
        return Path(self.artifacts_dir or Path(self.cache_dir) / "artifacts") / model

    def artifact_dir(self, model: str, tier: str) -> Path | None:
        """Folder a tier loads its artifact from (None for the dense model)."""
        tc = self.models[model].tiers[tier]
        kind = tc.build_tier()
        if kind is None:
            return None
        return (
            Path(tc.artifact_dir).expanduser()
            if tc.artifact_dir
            else self.artifact_root(model) / kind
        )

    def served_artifact_dir(self, model: str, tier: str) -> Path | None:
        """The artifact folder a tier's replicas load (None for the dense model and for an
        engine that loads none, the fake one)."""
        if self.models[model].tiers[tier].engine == "fake":  # loads nothing
            return None
        return self.artifact_dir(model, tier)

    def redis_data_dir(self) -> Path:
        """Data directory of the embedded Redis."""
        return Path(self.redis.data_dir or Path(self.cache_dir) / "redis")
