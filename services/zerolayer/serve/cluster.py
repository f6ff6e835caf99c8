"""The platform on a Kubernetes cluster: the RayService's serveConfigV2, generated from the same
platform config as the local run (platform/serve/cluster.yaml on top of local.yaml, models.yaml,
plans.yaml), and the application builders its import paths name.

Each application carries the whole config in its args, so a change of plans or tiers is a
change of serveConfigV2, which KubeRay hands to Ray Serve; the pod's environment adds what
belongs to the cluster and stays out of the chart (REDIS_URL, the Redis password file, the
admin key, read by config_from_data when the application is built).

Placement: every tier's replicas ask for one unit of a Ray resource of their own
(zerolayer_tier_<tier>) that only the tier's worker group offers, and the platform's
deployments for a sliver of zerolayer_platform, offered by the CPU group; Ray's autoscaler
adds a group's pods when its replicas wait for them."""

from __future__ import annotations

from typing import Any, Literal

import yaml

from zerolayer.config import PlatformConfig, config_from_data
from zerolayer.errors import ConfigError
from zerolayer.serve.app import APP_NAME, build_app, tier_app_names, tier_apps
from zerolayer.store.keys import hash_key

__all__ = [
    "ACCELERATORS",
    "PLATFORM_RESOURCE",
    "tier_resource",
    "for_cluster",
    "serve_config",
    "dump_serve_config",
    "platform_config_of",
    "platform_app",
    "tier_app",
]

Accelerator = Literal["gpu", "cpu"]
ACCELERATORS: tuple[Accelerator, ...] = ("gpu", "cpu")
PLATFORM_RESOURCE = "zerolayer_platform"
# what each platform deployment asks of PLATFORM_RESOURCE: any share places it on the CPU group
_PLATFORM_SHARE = 0.001
_BUILDER = "zerolayer.serve.cluster"
# as on one machine (serve.launcher.SERVE_LOGGING)
_LOGGING = {"enable_access_log": False, "log_level": "WARNING"}


def tier_resource(tier: str) -> str:
    """The Ray resource that only the tier's worker group offers."""
    return f"zerolayer_tier_{tier}"


def for_cluster(cfg: PlatformConfig, accelerator: Accelerator = "gpu") -> PlatformConfig:
    """The config with each tier's cluster scaling and resources in place of its local ones
    (no GPUs on a CPU-only cluster, whose hardware class is the CPU class)."""
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"accelerator must be one of {ACCELERATORS}, not {accelerator!r}")
    models = {}
    for name, mc in cfg.models.items():
        tiers = {}
        for tier, tc in mc.tiers.items():
            opts = tc.cluster.ray_actor_options
            if accelerator == "cpu":
                opts = opts.model_copy(update={"num_gpus": 0.0})
            scaling = {
                "autoscaling_config": tc.cluster.autoscaling_config,
                "ray_actor_options": opts,
            }
            update: dict[str, Any] = dict(scaling)
            if tc.short_requests is not None:
                update["short_requests"] = tc.short_requests.model_copy(update=scaling)
            tiers[tier] = tc.model_copy(update=update)
        models[name] = mc.model_copy(update={"tiers": tiers})
    changes: dict[str, Any] = {"models": models}
    if accelerator == "cpu":  # measured costs are in the CPU machines' replica-hour price
        hw = cfg.hardware
        changes["hardware"] = hw.model_copy(update={"hardware_class": hw.cpu_class})
    return cfg.model_copy(update=changes)


def _platform_deployments(cfg: PlatformConfig) -> list[dict[str, Any]]:
    placed = {PLATFORM_RESOURCE: _PLATFORM_SHARE}
    parts = [
        ("gateway", cfg.gateway.replicas, cfg.gateway.num_cpus),
        ("chunker", 1, cfg.chunker.num_cpus),
        ("billing", cfg.billing.replicas, cfg.billing.num_cpus),
    ]
    if not cfg.tokenfix.in_gateway:
        parts.append(("tokenfix", cfg.tokenfix.replicas, cfg.tokenfix.num_cpus))
    out = []
    for name, replicas, cpus in parts:
        entry: dict[str, Any] = {
            "name": name,
            "num_replicas": replicas,
            "ray_actor_options": {"num_cpus": cpus, "resources": dict(placed)},
        }
        if name == "gateway":
            entry["max_ongoing_requests"] = cfg.gateway.max_ongoing_requests
        out.append(entry)
    return out


def _tier_deployment(cfg: PlatformConfig, model: str, tier: str, name: str) -> dict[str, Any]:
    tc = cfg.models[model].tiers[tier]
    short = name != tier_app_name(cfg, model, tier)
    group = tc.short_requests if short and tc.short_requests is not None else tc
    opts = group.ray_actor_options
    return {
        "name": name,
        "max_ongoing_requests": group.max_ongoing_requests,
        "autoscaling_config": group.autoscaling_config.model_dump(exclude_none=True),
        "ray_actor_options": {
            "num_cpus": opts.num_cpus,
            "num_gpus": opts.num_gpus,
            "resources": {tier_resource(tier): 1},
        },
    }


def tier_app_name(cfg: PlatformConfig, model: str, tier: str) -> str:
    """The name of the tier's own application (not its short-request group's)."""
    return tier_app_names(cfg, model, tier)[0]


def serve_config(cfg: PlatformConfig, accelerator: Accelerator = "gpu") -> dict[str, Any]:
    """The RayService's serveConfigV2 (a Ray Serve multi-application config) for this platform
    config: the platform's application on / and one application per tier replica group."""
    ccfg = for_cluster(cfg, accelerator)
    data = ccfg.model_dump(mode="json", exclude_defaults=True)
    apps: list[dict[str, Any]] = [
        {
            "name": APP_NAME,
            "route_prefix": "/",
            "import_path": f"{_BUILDER}:platform_app",
            "args": {"config": data},
            "deployments": _platform_deployments(ccfg),
        }
    ]
    for model, mc in ccfg.models.items():
        for tier in mc.tiers:
            for name in tier_app_names(ccfg, model, tier):
                apps.append(
                    {
                        "name": name,
                        "route_prefix": None,
                        "import_path": f"{_BUILDER}:tier_app",
                        # vLLM's start-up chatter: warnings are enough in the logs
                        "runtime_env": {"env_vars": {"VLLM_LOGGING_LEVEL": "WARNING"}},
                        "args": {"config": data, "model": model, "tier": tier, "app": name},
                        "deployments": [_tier_deployment(ccfg, model, tier, name)],
                    }
                )
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": cfg.host, "port": cfg.port},
        "logging_config": dict(_LOGGING),
        "applications": apps,
    }


class _PlainDumper(yaml.SafeDumper):
    """YAML without anchors and aliases (every application repeats the config in full)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_serve_config(serve: dict[str, Any]) -> str:
    """serveConfigV2 as the chart carries it: YAML, keys in the generator's order."""
    return yaml.dump(serve, Dumper=_PlainDumper, sort_keys=False, width=100)


def platform_config_of(serve: dict[str, Any]) -> dict[str, Any]:
    """The platform config data that a serveConfigV2 carries (its first application's)."""
    for app in serve.get("applications") or []:
        config = (app.get("args") or {}).get("config")
        if isinstance(config, dict):
            return config
    raise ConfigError("the serve config carries no zerolayer platform config")


def _runtime_config(args: dict[str, Any]) -> PlatformConfig:
    """The config an application is built with: its args, the pod's environment on top, and
    the admin key turned into its hash (the key itself stays out of Ray's state)."""
    if not isinstance(args, dict) or not isinstance(args.get("config"), dict):
        raise ConfigError(
            "a zerolayer application needs args.config (`zerolayer cluster serve-config`)"
        )
    cfg = config_from_data(args["config"])
    if cfg.redis.url is None:
        raise ConfigError(
            "REDIS_URL is not set on this pod: a cluster has no embedded Redis (the chart sets "
            "it from its own Redis or from redis.external)"
        )
    if cfg.admin_key:
        gateway = cfg.gateway.model_copy(update={"admin_key_sha256": hash_key(cfg.admin_key)})
        cfg = cfg.model_copy(update={"gateway": gateway})
    return cfg


def platform_app(args: dict[str, Any]) -> Any:
    """Application builder of the platform (gateway, chunker, billing), named by serveConfigV2."""
    return build_app(_runtime_config(args))


def tier_app(args: dict[str, Any]) -> Any:
    """Application builder of one tier replica group, named by serveConfigV2."""
    cfg = _runtime_config(args)
    model, tier = args.get("model"), args.get("tier")
    if model not in cfg.models or tier not in cfg.models[model].tiers:
        raise ConfigError(f"no tier {model}:{tier} in the platform config")
    apps = tier_apps(cfg, model, tier)
    name = args.get("app") or tier_app_name(cfg, model, tier)
    if name not in apps:
        raise ConfigError(f"tier {model}:{tier} has no application {name!r} ({sorted(apps)})")
    return apps[name]
