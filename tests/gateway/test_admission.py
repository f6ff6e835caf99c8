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
    adm = Admission(800, 10, [0, 10, 20], clock, min_samples=1)
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


def test_a_wait_counts_only_from_the_minimum_number_of_samples() -> None:
    clock = Clock()
    adm = Admission(800, 10, [0, 1], clock, min_samples=5)
    adm.record("t", 30.0)  # one very slow request alone sheds nobody
    for _ in range(3):
        adm.record("t", 2.0)
    adm.check("t", 0)
    assert adm.wait_s("t") == 0.0
    adm.record("t", 2.0)  # the fifth sample: the median, 2 s, counts now
    assert adm.wait_s("t") == pytest.approx(2.0)
    with pytest.raises(Overloaded):
        adm.check("t", 0)


def test_stalled_streams_count_before_they_finish() -> None:
    clock = Clock()
    adm = Admission(800, 10, [0, 1], clock, min_samples=2)
    first = adm.waiting("t")
    clock.t += 1.0
    assert adm.wait_s("t") == 0.0  # one stream waiting is not a stalled tier
    second = adm.waiting("t")
    clock.t += 1.0
    assert adm.wait_s("t") == pytest.approx(1.0)  # two have waited at least 1 s
    with pytest.raises(Overloaded):
        adm.check("t", 0)
    adm.forget("t", first)  # its first token came
    assert adm.wait_s("t") == 0.0
    adm.forget("t", second)


def test_low_priority_is_shed_with_503_and_counted(make_gateway: GatewayFactory) -> None:
    queued = FakeEngine(SCRIPT, queue_s=0.3)  # every request reports 0.3 s in the queue
    plans = {"low": plan(priority=0), "high": plan(priority=5)}
    gw = make_gateway(
        plans=plans,
        key_plan="low",
        engine=queued,
        gateway={"queue_wait_threshold_ms": 250, "queue_wait_min_samples": 3},
    )
    body = {**CHAT, "max_tokens": 1}
    for _ in range(3):
        ok = gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)
        assert ok.status_code == 200  # fewer than 3 samples so far: nothing is shed
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)
    err = assert_openai_error(r, 503, "server_error")
    assert err["code"] == "tier_overloaded" and "queue wait" in err["message"]
    assert int(r.headers["retry-after"]) >= 1
    metrics = gw.client.get("/metrics").text
    assert 'zerolayer_admission_shed_total{tier="smollm2-135m:baseline",plan="low"}' in metrics
    assert 'zerolayer_queue_wait_seconds{tier="smollm2-135m:baseline"}' in metrics
    assert 'zerolayer_requests_total{tier="smollm2-135m:baseline",plan="low"} 3' in metrics
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


@pytest.mark.parametrize("stream", [False, True])
def test_one_slow_request_does_not_shed_the_next(
    make_gateway: GatewayFactory, stream: bool
) -> None:
    # a request that is slow by itself (long prefill, slow tokens) waited in no queue: the
    # tier is not overloaded (measured as time to first token, it shed the next for 10 s)
    slow = FakeEngine(SCRIPT, delay_s=0.4, queue_s=0.0)
    gw = make_gateway(
        plans={"low": plan(priority=0), "high": plan(priority=5)},
        key_plan="low",
        engine=slow,
        gateway={"queue_wait_threshold_ms": 250, "queue_wait_min_samples": 1},
    )
    body = {**CHAT, "max_tokens": 2, "stream": stream}
    first = gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)
    assert first.status_code == 200
    assert "[DONE]" in first.text if stream else first.json()["choices"]
    nxt = gw.client.post("/v1/chat/completions", headers=gw.auth, json=body)
    assert nxt.status_code == 200, nxt.text


def test_the_median_kept_in_order_is_the_statistics_median() -> None:
    import random
    import statistics

    now = [0.0]
    adm = Admission(800, 5, [0, 1], lambda: now[0], min_samples=1)
    rng = random.Random(3)
    kept: list[tuple[float, float]] = []
    for _ in range(3000):
        now[0] += rng.uniform(0, 0.02)
        wait = rng.choice([0.0, 0.5, rng.uniform(0, 2)])  # repeated values too
        adm.record("m:t", wait)
        kept.append((now[0], wait))
        kept = [(w, x) for w, x in kept if w >= now[0] - 5][-512:]
        assert adm.wait_s("m:t") == statistics.median(x for _, x in kept)
