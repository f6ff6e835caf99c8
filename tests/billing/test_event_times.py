"""Usage events state their times as CloudEvents does (UTC, milliseconds) and their billing day
as YYYY-MM-DD, formatted without datetime (a per-request cost in the gateway) but exactly as
datetime.fromtimestamp renders the same float, midnight's rounding included."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest
from zerolayer.billing.events import day_of, rfc3339


def _by_datetime(t: float) -> tuple[str, str]:
    d = datetime.fromtimestamp(t, tz=timezone.utc)
    stamp = d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"
    return stamp, d.strftime("%Y-%m-%d")


@pytest.mark.parametrize(
    "t",
    [0.0, 86400.0, 86399.9999999, 86399.99999995, 1733400000.123, 1733400000.9999996, 4e9 + 0.5],
)
def test_edges_read_as_datetime_reads_them(t: float) -> None:
    assert (rfc3339(t), day_of(t)) == _by_datetime(t)


def test_random_times_read_as_datetime_reads_them() -> None:
    rng = random.Random(7)
    for _ in range(20000):
        t = rng.uniform(0, 4e9)
        assert (rfc3339(t), day_of(t)) == _by_datetime(t), t
