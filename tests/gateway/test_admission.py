"""Admission control: measured queue waits per tier, lowest priorities shed first."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from zerolayer.engines.fake import FakeEngine
from zerolayer.errors import Overloaded
from zerolayer.gateway.admission import Admission

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import CHAT, assert_openai_error


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_shedding_goes_up_the_priorities_as_the_wait_grows() -> None:
    clock = Clock()
    adm = Admission(800, 10, [0, 10, 20], clock)
    adm.record("t", 0.5)
    for p in (0, 10, 20):
        adm.check("t", p)  # under the threshold: nobody is shed
    adm.record("t", 0.9)
    adm.record("t", 0.95)  # median 0.9 s: one threshold passed
    with pytest.raises(Overloaded) as exc:
        adm.check("t", 0)
    assert exc.value.status_code == 503 and exc.value.headers()["retry-after"] == "1"
    adm.check("t", 10)
    adm.check("t", 20)
    for _ in range(6):
        adm.record("t", 2.0)  # two thresholds: priority 10 goes too, 20 never
    with pytest.raises(Overloaded):
        adm.check("t", 10)
    adm.check("t", 20)
    adm.check("other", 0)  # waits are per tier
    clock.t += 11
    adm.check("t", 0)  # measurements older than the window are forgotten


def test_a_stalled_stream_counts_before_it_finishes() -> None:
    clock = Clock()
    adm = Admission(800, 10, [0, 1], clock)
    token = adm.waiting("t")
    clock.t += 1.0
    assert adm.wait_s("t") == pytest.approx(1.0)
    with pytest.raises(Overloaded):
        adm.check("t", 0)
    adm.first_token("t", token)
    assert adm.wait_s("t") == pytest.approx(1.0)  # now a measurement


def test_low_priority_is_shed_with_503_and_counted(make_gateway: GatewayFactory) -> None:
    slow = FakeEngine(SCRIPT, delay_s=0.3)  # first token after 0.3 s
    plans = {"low": plan(priority=0), "high": plan(priority=5)}
    gw = make_gateway(
        plans=plans, key_plan="low", engine=slow, gateway={"queue_wait_threshold_ms": 250}
    )
    body = {**CHAT, "max_tokens": 1}
    assert gw.client.post("/v1/chat/completions", headers=gw.auth, json=body).status_code == 200
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)
    err = assert_openai_error(r, 503, "server_error")
    assert err["code"] == "tier_overloaded" and "queue wait" in err["message"]
    assert int(r.headers["retry-after"]) >= 1
    metrics = gw.client.get("/metrics").text
    assert 'zerolayer_admission_shed_total{tier="smollm2-135m:baseline",plan="low"}' in metrics
    assert 'zerolayer_queue_wait_seconds{tier="smollm2-135m:baseline"}' in metrics
    # a higher-priority key on the same gateway still gets through
    key = gw.client.post("/admin/keys", headers=gw.admin, json={"plan": "high"}).json()["key"]
    high = {"Authorization": f"Bearer {key}"}
    with ThreadPoolExecutor(2) as pool:
        codes = list(
            pool.map(
                lambda _: gw.client.post("/v1/chat/completions", headers=high, json=body),
                range(2),
            )
        )
    assert [c.status_code for c in codes] == [200, 200]
