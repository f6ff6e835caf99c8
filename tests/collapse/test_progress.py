"""The compiler's progress bars tell a listener each step and its count (the build worker
reports them to `zerolayer up`); bars of inner loops (disabled) tell nobody."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from zerolayer.collapse.progress import bar, listen


@pytest.fixture
def heard() -> Iterator[list[tuple[str, int, int | None]]]:
    got: list[tuple[str, int, int | None]] = []
    listen(lambda step, done, total: got.append((step, done, total)))
    yield got
    listen(None)


def test_iterating_and_updating_bars_report_their_step_and_count(heard: list) -> None:
    assert list(bar(["a", "b", "c"], desc="calibrating")) == ["a", "b", "c"]
    assert heard == [("calibrating", i, 3) for i in range(4)]
    heard.clear()
    meter = bar(total=2, desc="distillation")
    meter.update(1)
    meter.update(1)
    meter.close()
    assert heard == [("distillation", 0, 2), ("distillation", 1, 2), ("distillation", 2, 2)]


def test_disabled_bars_and_no_listener_are_silent(heard: list) -> None:
    assert sum(bar(range(5), desc="ablation", disable=True)) == 10
    assert heard == []
    listen(None)
    assert list(bar(range(2), desc="x")) == [0, 1]
    assert heard == []
