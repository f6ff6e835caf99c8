"""Allocation across layers: the convex cost fit, the greedy split, and the validated search."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import pytest
from zerolayer.collapse.ablate import Evaluation
from zerolayer.collapse.allocate import Sensitivity, _power_fit, choose, greedy_shares

pytestmark = pytest.mark.integration  # runs the collapse compiler


def test_power_fit_recovers_the_curve_and_stays_convex() -> None:
    levels = [0.15, 0.3, 0.5]
    c, p = _power_fit(levels, [0.2 * x**3 for x in levels])
    assert c == pytest.approx(0.2, rel=1e-6) and p == pytest.approx(3.0, rel=1e-6)
    # concave measurements are read as linear (p = 1): a further step never gets cheaper
    c, p = _power_fit(levels, [0.01, 0.012, 0.013])
    assert p == 1.0 and c > 0
    # one level: a quadratic through it
    c, p = _power_fit([0.5], [0.01])
    assert p == 2.0 and c == pytest.approx(0.04)


def test_greedy_gives_cheap_layers_more_and_balances_marginal_costs() -> None:
    levels = [0.25, 0.5]
    sens = Sensitivity(
        levels,
        {0: [0.1 * x * x for x in levels], 1: [0.4 * x * x for x in levels]},
    )
    shares = greedy_shares(sens, 0.01, step=1 / 64)
    assert shares[0] > shares[1] > 0
    # at the optimum of convex costs the marginal costs are about equal: 0.2 s0 = 0.8 s1
    assert 0.2 * shares[0] == pytest.approx(0.8 * shares[1], rel=0.25)
    total = sens.predict(0, shares[0]) + sens.predict(1, shares[1])
    assert total <= 0.01
    assert greedy_shares(sens, 0.0) == {0: 0.0, 1: 0.0}
    assert max(greedy_shares(sens, 10.0, max_share=0.5).values()) == pytest.approx(0.5)


class _Validator:
    """Measures a cut as its predicted cost plus an interaction term (layers do not add up)."""

    def __init__(self, sens: Sensitivity):
        self.sens, self.shares, self.calls = sens, {}, 0

    def cut(self, shares: dict[int, float]) -> AbstractContextManager[None]:
        self.shares = shares
        return nullcontext()

    def evaluate(self, _cut: object) -> Evaluation:
        self.calls += 1
        kl = sum(self.sens.predict(i, s) for i, s in self.shares.items())
        return Evaluation(ppl=10.0 * (1 + 0.6 * kl * 1.3), dense_ppl=10.0, kl=kl)


def test_choose_keeps_the_largest_allocation_that_measures_within_budget() -> None:
    levels = [0.25, 0.5]
    sens = Sensitivity(levels, {i: [(0.01 + 0.02 * i) * x for x in levels] for i in range(4)})
    val = _Validator(sens)

    def removed(shares: dict[int, float]) -> float:
        return sum(shares.values()) / 4

    choice = choose(sens, val, 0.03, val.cut, removed, tries=8)  # type: ignore[arg-type]
    assert val.calls == 8
    assert 0 < choice.val_delta <= 0.03 and choice.removed > 0
    assert choice.shares[0] >= choice.shares[3]
    # a little more than the chosen allocation would break the budget
    bigger = greedy_shares(sens, 1.1 * 0.03 / (0.6 * 1.3) + 0.005)
    assert removed(bigger) >= choice.removed
