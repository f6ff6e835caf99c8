"""Measured cost (collapse.price, artifacts.cost): the arithmetic, the objective, the cost file
as a tier card serves it, the hardware classes, and one real measurement of a torch tier."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from zerolayer.artifacts.cost import cost_file, read_cost, served_cost, write_cost
from zerolayer.collapse.price import at_objective, cost_per_1m
from zerolayer.config import HardwareConfig, PlatformConfig
from zerolayer.gateway.catalog import cost_per_1m as listed_cost


def test_cost_per_million_tokens_follows_throughput() -> None:
    # $0.09 an hour at 100 tokens/s: 360,000 tokens an hour, $0.25 per million
    assert cost_per_1m(Decimal("0.09"), 100.0) == "0.250000"
    assert cost_per_1m(Decimal("0.09"), 200.0) == "0.125000"  # twice as fast, half the cost
    assert cost_per_1m(Decimal("2.99"), 3000.0) == "0.276852"
    with pytest.raises(ValueError, match="zero tokens"):
        cost_per_1m(Decimal("0.09"), 0.0)


def test_the_objective_is_the_most_streams_within_it() -> None:
    rows = {
        1: {"p99_itl_ms": 40.0},
        8: {"p99_itl_ms": 120.0},
        16: {"p99_itl_ms": 240.0},
        32: {"p99_itl_ms": 400.0},
    }
    assert at_objective(rows, 250.0) == (16, True)
    assert at_objective(rows, 1000.0) == (32, True)
    assert at_objective(rows, 10.0) == (1, False)  # none meets it: one stream, said so


def test_a_served_cost_says_when_its_artifact_is_not_the_served_one(tmp_path: Path) -> None:
    assert read_cost(tmp_path, "masked") is None and served_cost(tmp_path, "masked", "a") is None
    figures = {
        "cost_per_1m_tokens": {"prompt": "0.01", "completion": "0.2"},
        "hardware_class": "cpu-2",
        "replica_hour_usd": "0.09",
        "measured": "2026-12-07T00:00:00Z",
        "artifact_stamp": "abc",
        "tokens_per_s": {"1": 30.0, "32": 150.0, "objective": 120.0},
        "streams": {"1": {}},
    }
    assert write_cost(tmp_path, "masked", figures) == cost_file(tmp_path, "masked")
    served = served_cost(tmp_path, "masked", "abc")
    assert served is not None and served["stale"] is False and "streams" not in served
    assert served["cost_per_1m_tokens"]["completion"] == "0.2"
    assert served_cost(tmp_path, "masked", "other")["stale"] is True  # type: ignore[index]
    listed = listed_cost({"cost": served})
    assert listed == {
        "currency": "USD",
        "prompt": "0.01",
        "completion": "0.2",
        "hardware_class": "cpu-2",
        "measured": "2026-12-07T00:00:00Z",
        "stale": False,
    }
    assert listed_cost({"method": "dense"}) is None and listed_cost(None) is None
    cost_file(tmp_path, "masked").write_text("{not json")
    assert read_cost(tmp_path, "masked") is None  # unreadable: as if never measured


def test_hardware_classes_are_checked_and_a_cpu_cluster_uses_the_cpu_class(
    base_config: PlatformConfig,
) -> None:
    from zerolayer.serve.cluster import for_cluster

    with pytest.raises(ValueError, match="'tpu' is not in classes"):
        HardwareConfig(hardware_class="tpu")
    hw = base_config.hardware
    assert hw.hardware_class == "cpu-2" and hw.classes["cpu-2"].replica_hour_usd > 0
    assert hw.classes["nvidia-h100"].gpu and not hw.classes["cpu-2"].gpu
    gpu = base_config.model_copy(
        update={"hardware": hw.model_copy(update={"hardware_class": "nvidia-h100"})}
    )
    assert for_cluster(gpu, "gpu").hardware.hardware_class == "nvidia-h100"
    assert for_cluster(gpu, "cpu").hardware.hardware_class == hw.cpu_class


@pytest.mark.integration
def test_a_torch_tier_is_measured_and_priced(
    base_config: PlatformConfig, model_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    """The real engine in its own process: throughput at each stream count, the objective, the
    cost file, and the tier card that serves it."""
    from zerolayer.collapse.price import price_tiers
    from zerolayer.config import TorchTier
    from zerolayer.replicas.artifacts import tier_card

    model = base_config.default_model
    mc = base_config.models[model]
    tiers = {"dense": TorchTier(engine="torch", artifact="dense", threads=2, kv_cache_gib=0.25)}
    cfg = base_config.model_copy(
        update={
            "artifacts_dir": str(tmp_path),
            "models": {model: mc.model_copy(update={"tiers": tiers})},
        }
    )
    out = price_tiers(cfg, model, ["dense"], streams=[1, 2], tokens=8)["dense"]
    on_disk = json.loads(cost_file(cfg.artifact_root(model), "dense").read_text())
    assert on_disk == out
    rows = out["streams"]
    assert set(rows) == {"1", "2"}
    assert all(r["tokens_per_s"] > 0 and r["p99_itl_ms"] > 0 for r in rows.values())
    assert out["prefill_tokens_per_s"] > 0 and out["hardware_class"] == "cpu-2"
    # what the replica computed in, and on which processor (a class spans several)
    assert out["weight_dtype"] == "float32" and out["processor"]
    objective = out["objective"]
    assert objective["p99_itl_ms"] == 250.0 and objective["streams"] in (1, 2)
    tps = out["tokens_per_s"]["objective"]
    assert tps == rows[str(objective["streams"])]["tokens_per_s"]
    hour = cfg.hardware.classes["cpu-2"].replica_hour_usd
    assert out["cost_per_1m_tokens"]["completion"] == cost_per_1m(hour, tps)
    assert "per 1M prompt / completion tokens on cpu-2" in capsys.readouterr().out
    card = tier_card(cfg, model, "dense")
    assert card["cost"]["cost_per_1m_tokens"] == out["cost_per_1m_tokens"]
    assert card["cost"]["stale"] is False and card["quality"]["ppl_delta"] == 0.0
    # a GPU class measured where there is no GPU: refused, the file left as it was
    import torch

    if not torch.cuda.is_available():
        hw = cfg.hardware.model_copy(update={"hardware_class": "nvidia-h100"})
        on_gpu = cfg.model_copy(update={"hardware": hw})
        with pytest.raises(RuntimeError, match="has no GPU"):
            price_tiers(on_gpu, model, ["dense"], streams=[1], tokens=4)
        assert json.loads(cost_file(cfg.artifact_root(model), "dense").read_text()) == out


def test_models_list_each_tiers_measured_cost(base_config: PlatformConfig) -> None:
    from zerolayer.gateway.catalog import Catalog
    from zerolayer.protocol import Target

    model = base_config.default_model
    cost = {
        "cost_per_1m_tokens": {"prompt": "0.02", "completion": "0.31"},
        "hardware_class": "cpu-2",
        "measured": "2026-12-07T00:00:00Z",
        "stale": True,
    }
    cards = {Target(model, "masked"): {"method": "masked", "cost": cost}}
    listed = {m["id"]: m for m in Catalog(base_config).cards(0, cards, plan="pro")}
    got = listed[f"{model}:masked"]["cost_per_1m_tokens"]
    assert got["completion"] == "0.31" and got["stale"] is True and got["currency"] == "USD"
    assert listed[f"{model}:baseline"]["cost_per_1m_tokens"] is None  # not measured
