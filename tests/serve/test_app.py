"""The Serve application as configured: which deployments it binds, with which options."""

from __future__ import annotations

from typing import Any

from zerolayer.config import AutoscalingConfig, PlatformConfig, ShortRequests
from zerolayer.protocol import Target
from zerolayer.serve.app import build_app


def _gateway_args(cfg: PlatformConfig) -> Any:
    return build_app(cfg)._bound_deployment.init_args  # (config, handles, tokenfix, chunker)


def with_baseline(cfg: PlatformConfig, **update: Any) -> PlatformConfig:
    data = cfg.model_copy(deep=True)
    model = data.models[data.default_model]
    model.tiers["baseline"] = model.tiers["baseline"].model_copy(update=update)
    return data


def test_default_app_runs_tokenfix_in_the_gateway_and_binds_the_chunker(
    base_config: PlatformConfig,
) -> None:
    _, handles, tokenfix, chunker = _gateway_args(base_config)
    served = [f"smollm2-135m:{t}" for t in ("baseline", "masked", "sparse24")]
    assert sorted(map(str, handles)) == served
    assert tokenfix is None and base_config.tokenfix.in_gateway
    assert chunker._bound_deployment.name == "chunker"
    cfg = base_config.model_copy(
        update={"tokenfix": base_config.tokenfix.model_copy(update={"in_gateway": False})}
    )
    assert _gateway_args(cfg)[2]._bound_deployment.name == "tokenfix"


def test_a_short_request_group_is_its_own_deployment(base_config: PlatformConfig) -> None:
    short = ShortRequests(
        max_prompt_tokens=256,
        max_ongoing_requests=8,
        autoscaling_config=AutoscalingConfig(min_replicas=1, max_replicas=3),
    )
    _, handles, _, _ = _gateway_args(with_baseline(base_config, short_requests=short))
    group = handles[Target("smollm2-135m", "baseline", short=True)]._bound_deployment
    main = handles[Target("smollm2-135m", "baseline")]._bound_deployment
    assert group.name == "smollm2-135m--baseline--short" and group.max_ongoing_requests == 8
    assert group._deployment_config.autoscaling_config.max_replicas == 3
    assert (
        main.max_ongoing_requests
        == base_config.models["smollm2-135m"].tiers["baseline"].max_ongoing_requests
    )
