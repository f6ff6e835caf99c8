"""The chart's monitoring: the Prometheus rules and the Grafana dashboard parse (PromQL by a real
parser), cover the signals they promise, and name only metrics the platform exports, taken from
a gateway's real /metrics (fake engine, real Redis) and the live signals' renderer; /metrics says
when Redis is down instead of failing."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from zerolayer.engines.fake import FakeEngine
from zerolayer.gateway.live import render_live
from zerolayer.store.embedded import EmbeddedRedis

from tests.gateway.conftest import SCRIPT, GatewayFactory
from tests.gateway.test_api import CHAT
from tests.helm.conftest import CHART

RULES = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
# every signal of the live report, as a replica's recorder and the canary fill it
FULL_REPORT = {
    "smollm2-135m:dynamic": {
        "activation_sparsity": [0.4, 0.5],
        "calibrated_sparsity": [0.41, 0.52],
        "drift_points": [-1.0, -2.0],
        "drift_max_points": 2.0,
        "drift_flag": False,
        "sampled_tokens": 100,
        "skip_rate": 0.45,
        "skip_rate_calibrated": 0.44,
        "skip_band": [0.4, 0.5],
        "skip_flag": False,
        "prefix_cache_hit_rate": 0.1,
        "canary": {"kl": 0.1, "limit": 0.3, "flag": False, "checked_at": 1.0},
    }
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a ValueError if it does not parse)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if node is None:
            return
        if type(node).__name__ == "VectorSelector":
            names.add(node.name)
            return
        for attr in ("lhs", "rhs", "expr", "vector_selector", "param"):
            walk(getattr(node, attr, None))
        for arg in getattr(node, "args", None) or []:
            walk(arg)

    walk(promql_parser.parse(expr))
    return names


def exported(text: str) -> set[str]:
    """Series names a Prometheus text exposition holds (histograms with their suffixes)."""
    out = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = m.groups()
        out.add(name)
        if kind == "histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return out


def test_metric_names_come_from_a_real_parse() -> None:
    assert metric_names("sum(rate(a_total[5m])) / max by (t) (b) > 1 or absent(c)") == {
        "a_total",
        "b",
        "c",
    }
    try:
        metric_names("sum by (tier (")
    except ValueError:
        pass
    else:
        raise AssertionError("a broken expression parsed")


def test_rules_and_dashboard_name_only_exported_metrics(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT))
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "max_tokens": 4})
    assert r.status_code == 200
    time.sleep(1.2)  # counts reach Redis within a second
    text = gw.client.get("/metrics").text
    assert "zerolayer_redis_up 1" in text
    assert re.search(r'zerolayer_requests_finished_total\{[^}]*status="ok"\} 1', text)
    names = exported(text) | exported(render_live(FULL_REPORT))

    rules = yaml.safe_load(RULES.read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    used: set[str] = set()
    for rule in alerts:
        assert rule["alert"].startswith("Zerolayer") and rule["annotations"]["summary"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical")
        used |= metric_names(rule["expr"])
    assert used <= names, used - names
    # the signals the rules promise
    for metric in (
        "zerolayer_canary_kl",
        "zerolayer_activation_drift_max_points",
        "zerolayer_skip_rate_flag",
        "zerolayer_admission_shed_total",
        "zerolayer_requests_finished_total",
        "zerolayer_redis_up",
    ):
        assert metric in used, metric
    drift = next(r for r in alerts if "zerolayer_activation_drift_max_points" in r["expr"])
    assert drift["expr"].rstrip().endswith("> 3")

    dash = json.loads(DASHBOARD.read_text())
    shown: set[str] = set()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            shown |= metric_names(target["expr"].replace("$__rate_interval", "5m"))
    assert shown <= names, shown - names
    for metric in (
        "zerolayer_requests_total",
        "zerolayer_time_to_first_token_seconds_bucket",
        "zerolayer_queue_wait_seconds",
        "zerolayer_admission_shed_total",
        "zerolayer_prompt_tokens_total",
        "zerolayer_completion_tokens_total",
        "zerolayer_canary_kl",
        "zerolayer_activation_drift_max_points",
        "zerolayer_skip_rate",
    ):
        assert metric in shown, metric
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_metrics_answer_redis_down_instead_of_failing(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    server.start()
    gw = make_gateway(engine=FakeEngine(SCRIPT), store=server.secret_url())
    assert "zerolayer_redis_up 1" in gw.client.get("/metrics").text
    server.stop()
    r = gw.client.get("/metrics")
    assert r.status_code == 200
    assert "zerolayer_redis_up 0" in r.text
