from pathlib import Path

import pytest
from zerolayer.config import TierPrice, default_platform_dir, load_config
from zerolayer.errors import ConfigError


def test_repo_config_loads_with_defaults(tmp_path: Path) -> None:
    cfg = load_config(env={"HOME": str(tmp_path)})
    assert cfg.port == 8000 and cfg.host == "127.0.0.1"
    assert cfg.default_model == "smollm2-135m"
    assert "baseline" in cfg.models["smollm2-135m"].tiers
    assert cfg.cache_dir == str(tmp_path / ".cache" / "zerolayer")
    assert cfg.redis.url is None


def test_env_then_overrides_win(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "ZEROLAYER_PORT": "9001", "REDIS_URL": "redis://x:1/0"}
    cfg = load_config(env=env, overrides={"host": "0.0.0.0"})
    assert cfg.port == 9001 and cfg.host == "0.0.0.0"
    assert cfg.redis.url == "redis://x:1/0"
    assert cfg.model_dir("smollm2-135m") == tmp_path / "zerolayer" / "models" / "smollm2-135m"


def test_no_importable_platform_package() -> None:
    assert not (default_platform_dir() / "__init__.py").exists()
    import platform

    assert hasattr(platform, "python_version")  # the standard library's, not ours


def _copy_platform(tmp_path: Path) -> Path:
    src = default_platform_dir()
    dst = tmp_path / "platform"
    (dst / "serve").mkdir(parents=True)
    for rel in ("models.yaml", "plans.yaml", "serve/local.yaml"):
        (dst / rel).write_text((src / rel).read_text())
    return dst


PRICE = "{prompt_per_1k: 0.1, completion_per_1k: 0.2}"


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (
            f"tiers: [turbo]\n    default_tier: turbo\n    prices: {{turbo: {PRICE}}}",
            "served by no model",
        ),
        ("tiers: [baseline]\n    default_tier: baseline", "no price for tier\\(s\\) baseline"),
        (
            f"tiers: [baseline]\n    default_tier: masked\n    prices: {{baseline: {PRICE}}}",
            "default_tier 'masked' is not in tiers",
        ),
        (
            f"tiers: [baseline]\n    default_tier: baseline\n"
            f"    prices: {{baseline: {PRICE}, masked: {PRICE}}}",
            "prices name tier\\(s\\) masked",
        ),
        (
            f"tiers: [baseline]\n    default_tier: baseline\n    prices: {{baseline: {PRICE}}}\n"
            "    limits: {requests_per_minute: 0}",
            "plans.trial.limits.requests_per_minute",
        ),
        (
            "tiers: [baseline]\n    default_tier: baseline\n"
            "    prices: {baseline: {prompt_per_1k: -1, completion_per_1k: 0}}",
            "plans.trial.prices.baseline.prompt_per_1k",
        ),
        (
            "tiers: [baseline]\n    default_tier: baseline\n    prices: {baseline: autoo}",
            "plans.trial.prices.baseline: a price \\(\\{prompt_per_1k, completion_per_1k\\}\\) "
            "or `auto`",
        ),
        (
            "tiers: [baseline]\n    default_tier: baseline\n    prices: {baseline: auto}\n"
            "    margin: 0",
            "plans.trial.margin",
        ),
    ],
)
def test_bad_plans_are_clear_errors(tmp_path: Path, plan: str, message: str) -> None:
    pdir = _copy_platform(tmp_path)
    with (pdir / "plans.yaml").open("a") as f:
        f.write(f"  trial:\n    {plan}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(platform_dir=pdir, env={})


def test_plans_carry_prices_limits_and_priorities(tmp_path: Path) -> None:
    cfg = load_config(env={"HOME": str(tmp_path)})
    assert set(cfg.plans) == {"free", "pro", "enterprise"}
    pro = cfg.plans["pro"]
    baseline = pro.prices["baseline"]
    assert isinstance(baseline, TierPrice)
    assert baseline.nanos(10**6, 10**6) == 1_500_000_000  # $0.30 + $1.20 per 1M
    # the collapsed tiers follow their measured cost (config.pricing)
    assert [pro.prices[t] for t in ("masked", "dynamic", "sparse24")] == ["auto"] * 3
    assert pro.margin > cfg.plans["enterprise"].margin > 1
    assert pro.limits.tokens_per_minute and pro.limits.monthly_budget_usd
    assert cfg.plans["enterprise"].priority > pro.priority > cfg.plans["free"].priority
    assert cfg.plans["enterprise"].limits.requests_per_minute is None  # no limit


def test_unknown_field_is_rejected_with_its_location(tmp_path: Path) -> None:
    pdir = _copy_platform(tmp_path)
    (pdir / "serve" / "local.yaml").write_text("port: 8000\nprot: 1\n")
    with pytest.raises(ConfigError, match="prot"):
        load_config(platform_dir=pdir, env={})


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing config file"):
        load_config(platform_dir=tmp_path, env={})


def test_collapse_settings_reach_the_builder(tmp_path: Path) -> None:
    from zerolayer.collapse.commands import build_settings

    cfg = load_config(env={"HOME": str(tmp_path)})
    s = build_settings(cfg, "smollm2-135m", samples=7)
    assert s.samples == 7 and s.distill_epochs == 3 and s.budget("masked") == 0.03
    pdir = _copy_platform(tmp_path)
    text = (pdir / "models.yaml").read_text()
    (pdir / "models.yaml").write_text(text.replace("distill_epochs: 3", "distill_epochs: -1"))
    with pytest.raises(ConfigError, match="distill_epochs"):
        load_config(platform_dir=pdir, env={})


def test_embedded_default_declares_every_tier_with_scaling(tmp_path: Path) -> None:
    cfg = load_config(env={"HOME": str(tmp_path)})
    tiers = cfg.models["smollm2-135m"].tiers
    assert list(tiers) == ["baseline", "masked", "dynamic", "sparse24"]
    assert [t.engine for t in tiers.values()] == ["vllm", "vllm", "torch", "torch"]
    assert tiers["dynamic"].build_tier() == "dynamic"
    # the dynamic tier is priced from its cost wherever baseline is sold too, and free on free
    for plan in cfg.plans.values():
        if "dynamic" in plan.tiers and "baseline" in plan.tiers:
            assert plan.prices["dynamic"] == "auto"
    assert "dynamic" in cfg.plans["free"].tiers
    assert tiers["masked"].build_tier() == "pruned"  # vLLM serves the masks' pruned checkpoint
    assert cfg.artifact_dir("smollm2-135m", "sparse24") == (
        tmp_path / ".cache" / "zerolayer" / "artifacts" / "smollm2-135m" / "sparse24"
    )
    assert cfg.artifact_dir("smollm2-135m", "baseline") is None
    for t in tiers.values():
        assert t.autoscaling_config.max_replicas >= t.autoscaling_config.min_replicas
        assert t.ray_actor_options.num_cpus > 0


@pytest.mark.parametrize(
    ("name", "tier", "message"),
    [
        ("baseline", {"artifact": "sparse24"}, "engine vllm cannot serve artifact"),
        # the torch tier's own settings (threads) are no vLLM tier's
        ("sparse24", {"engine": "vllm"}, "vllm.threads: Extra inputs are not permitted"),
        ("baseline", {"engine": "onnx"}, "does not match any of the expected tags"),
        (
            "sparse24",
            {"autoscaling_config": {"min_replicas": 3, "max_replicas": 2}},
            "min_replicas 3 is above max_replicas 2",
        ),
        (
            "sparse24",
            {"autoscaling_config": {"min_replicas": 1, "max_replicas": 2, "initial_replicas": 5}},
            "initial_replicas 5 is outside",
        ),
        ("sparse24", {"ray_actor_options": {"num_cpus": -1}}, "num_cpus"),
    ],
)
def test_bad_tier_declarations_are_clear_errors(
    tmp_path: Path, name: str, tier: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(
            env={"HOME": str(tmp_path)},
            overrides={"models": {"smollm2-135m": {"tiers": {name: tier}}}},
        )
