"""The Serve application as configured: which deployments it binds, with which options."""

from __future__ import annotations

from typing import Any

from zerolayer.config import AutoscalingConfig, PlatformConfig, ShortRequests
from zerolayer.serve.app import build_app, tier_apps


def _gateway_args(cfg: PlatformConfig) -> Any:
    return build_app(cfg)._bound_deployment.init_args  # (config, tokenfix, chunker, billing)


def with_baseline(cfg: PlatformConfig, **update: Any) -> PlatformConfig:
    data = cfg.model_copy(deep=True)
    model = data.models[data.default_model]
    model.tiers["baseline"] = model.tiers["baseline"].model_copy(update=update)
    return data


def test_default_app_runs_tokenfix_in_the_gateway_and_binds_the_chunker_and_billing(
    base_config: PlatformConfig,
) -> None:
    _, tokenfix, chunker, billing = _gateway_args(base_config)
    assert tokenfix is None and base_config.tokenfix.in_gateway
    assert chunker._bound_deployment.name == "chunker"
    assert billing._bound_deployment.name == "billing"
    assert billing._bound_deployment.num_replicas == base_config.billing.replicas
    cfg = base_config.model_copy(
        update={"tokenfix": base_config.tokenfix.model_copy(update={"in_gateway": False})}
    )
    assert _gateway_args(cfg)[1]._bound_deployment.name == "tokenfix"


def test_every_tier_is_an_application_of_its_own(base_config: PlatformConfig) -> None:
    for tier in ("baseline", "masked", "dynamic", "sparse24"):
        apps = tier_apps(base_config, "smollm2-135m", tier)
        assert list(apps) == [f"smollm2-135m--{tier}"]
        assert apps[f"smollm2-135m--{tier}"]._bound_deployment.init_args[1:] == (
            "smollm2-135m",
            tier,
        )


def test_a_short_request_group_is_its_own_deployment(base_config: PlatformConfig) -> None:
    short = ShortRequests(
        max_prompt_tokens=256,
        max_ongoing_requests=8,
        autoscaling_config=AutoscalingConfig(min_replicas=1, max_replicas=3),
    )
    apps = tier_apps(with_baseline(base_config, short_requests=short), "smollm2-135m", "baseline")
    group = apps["smollm2-135m--baseline--short"]._bound_deployment
    main = apps["smollm2-135m--baseline"]._bound_deployment
    assert group.name == "smollm2-135m--baseline--short" and group.max_ongoing_requests == 8
    assert group._deployment_config.autoscaling_config.max_replicas == 3
    assert (
        main.max_ongoing_requests
        == base_config.models["smollm2-135m"].tiers["baseline"].max_ongoing_requests
    )
