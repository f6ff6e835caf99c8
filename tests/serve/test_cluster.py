"""A cluster's Serve config and its application builders: the cluster settings come from the
files alone, the builders add the pod's environment and refuse to run without Redis, the
admin key reaches Ray only as its hash; the images match the chart's Ray version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import ray
import yaml
from zerolayer.config import load_config
from zerolayer.errors import ConfigError
from zerolayer.serve import cluster
from zerolayer.store.keys import hash_key

from tests.conftest import clean_env

ROOT = Path(__file__).resolve().parents[2]


def _cfg():
    return load_config(env=clean_env(), serve_file="cluster.yaml", environment=False)


def test_cluster_yaml_extends_the_local_settings() -> None:
    local = load_config(env=clean_env(), environment=False)
    cfg = _cfg()
    assert (cfg.host, cfg.cache_dir, cfg.build_missing_artifacts) == (
        "0.0.0.0",
        "/var/cache/zerolayer",
        False,
    )
    assert cfg.ray.haproxy is False and cfg.gateway.replicas == 2
    # what cluster.yaml does not set is local.yaml's
    assert cfg.monitoring == local.monitoring and cfg.chunker == local.chunker


def test_the_environment_stays_out_of_a_generated_serve_config() -> None:
    env = clean_env(REDIS_URL="redis://:hunter2@db:6379/0", ZEROLAYER_ADMIN_KEY="zla-secret")
    cfg = load_config(env=env, serve_file="cluster.yaml", environment=False)
    text = cluster.dump_serve_config(cluster.serve_config(cfg))
    assert "hunter2" not in text and "zla-secret" not in text


def test_a_serve_file_loop_is_a_clear_error(tmp_path: Path) -> None:
    pdir = tmp_path / "platform"
    (pdir / "serve").mkdir(parents=True)
    for name in ("models.yaml", "plans.yaml"):
        (pdir / name).write_text((ROOT / "platform" / name).read_text())
    (pdir / "serve" / "a.yaml").write_text("extends: b.yaml\n")
    (pdir / "serve" / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="loop: a.yaml -> b.yaml -> a.yaml"):
        load_config(platform_dir=pdir, env=clean_env(), serve_file="a.yaml")


def test_tiers_take_their_cluster_scaling_and_no_gpu_on_a_cpu_cluster() -> None:
    cfg = _cfg()
    for acc, gpus in (("gpu", 1.0), ("cpu", 0.0)):
        out = cluster.for_cluster(cfg, acc)  # type: ignore[arg-type]
        for tier, tc in out.models["smollm2-135m"].tiers.items():
            want = cfg.models["smollm2-135m"].tiers[tier].cluster
            assert tc.autoscaling_config == want.autoscaling_config
            assert tc.ray_actor_options.num_gpus == gpus
    with pytest.raises(ConfigError, match="accelerator"):
        cluster.for_cluster(cfg, "tpu")  # type: ignore[arg-type]


def test_builders_add_the_pods_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    data = cluster.platform_config_of(cluster.serve_config(_cfg()))
    for var in ("REDIS_URL", "ZEROLAYER_ADMIN_KEY", "REDIS_PASSWORD_FILE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="REDIS_URL is not set"):
        cluster.platform_app({"config": data})
    with pytest.raises(ConfigError, match="args.config"):
        cluster.tier_app({})
    monkeypatch.setenv("REDIS_URL", "redis://zl-redis:6379/0")
    monkeypatch.setenv("ZEROLAYER_ADMIN_KEY", "zla-test-admin")
    cfg = cluster._runtime_config({"config": data})
    assert cfg.redis.url == "redis://zl-redis:6379/0"
    assert cfg.gateway.admin_key_sha256 == hash_key("zla-test-admin")
    assert "zla-test-admin" not in str(cfg.model_dump())
    with pytest.raises(ConfigError, match="no tier smollm2-135m:turbo"):
        cluster.tier_app({"config": data, "model": "smollm2-135m", "tier": "turbo"})


def test_images_use_the_charts_ray_version_and_copy_what_exists() -> None:
    chart_values = yaml.safe_load((ROOT / "helm" / "zerolayer" / "values.yaml").read_text())
    for name in ("Dockerfile.gpu", "Dockerfile.cpu"):
        text = (ROOT / "platform" / "docker" / name).read_text()
        (version,) = re.findall(r"^ARG RAY_VERSION=(\S+)$", text, re.M)
        assert version == chart_values["rayVersion"] == ray.__version__, name
        for src in re.findall(r"^COPY --chown=\S+ (.+) \S+$", text, re.M):
            for part in src.split():
                assert (ROOT / part).exists(), (name, part)
        assert "ZEROLAYER_PLATFORM_DIR=/opt/zerolayer/platform" in text
