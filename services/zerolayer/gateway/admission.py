"""Admission control per tier: shed the lowest plan priorities first when a tier's measured queue
wait passes a threshold.

The wait of a request is the time it spent queued before the engine started it: the replica
measures it (the engine reports when it took the request into a batch; engines that cannot say
give the time to their first token) and reports it when the request ends. A request's own
prefill and decode are not part of it, so one long request does not look like a queue. A tier's
current wait is the median of the waits reported in the last `window_s`, counted only once at
least `min_samples` were; and a tier that stalls shows before anything ends: when `min_samples`
streams sent to it have waited for their first token, the shortest of those waits counts.

Shedding: with the plans' distinct priorities ranked from lowest (rank 0) to highest (rank k),
a wait of at least m x threshold sheds ranks below m; the highest rank is never shed.
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Callable, Iterable
from itertools import count

from zerolayer.errors import Overloaded

__all__ = ["Admission"]

_FORGET_S = 300.0


_MAX_SAMPLES = 512


class _Tier:
    def __init__(self) -> None:
        self.samples: deque[tuple[float, float]] = deque()  # (when, wait), oldest first
        self.sorted: list[float] = []  # the same waits in order: the median without a sort
        self.pending: dict[int, float] = {}

    def add(self, when: float, wait: float) -> None:
        if len(self.samples) >= _MAX_SAMPLES:
            self.drop()
        self.samples.append((when, wait))
        bisect.insort(self.sorted, wait)

    def drop(self) -> None:
        _, wait = self.samples.popleft()
        del self.sorted[bisect.bisect_left(self.sorted, wait)]

    def median(self) -> float:
        s, n = self.sorted, len(self.sorted)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


class Admission:
    """Measured queue waits of the tiers, and the shedding decision."""

    def __init__(
        self,
        threshold_ms: float,
        window_s: float,
        priorities: Iterable[int],
        clock: Callable[[], float] = time.monotonic,
        min_samples: int = 5,
    ):
        self.threshold_s = threshold_ms / 1000.0
        self.window_s = window_s
        self.min_samples = max(1, min_samples)
        self.ranks = {p: i for i, p in enumerate(sorted(set(priorities)))}
        self.top = len(self.ranks) - 1
        self.clock = clock
        self._tiers: dict[str, _Tier] = {}
        self._ids = count()

    def _tier(self, target: str) -> _Tier:
        return self._tiers.setdefault(target, _Tier())

    def wait_s(self, target: str) -> float:
        """The tier's current queue wait, in seconds."""
        t = self._tier(target)
        now = self.clock()
        while t.samples and t.samples[0][0] < now - self.window_s:
            t.drop()
        k = self.min_samples
        measured = t.median() if len(t.samples) >= k else 0.0
        for token, since in list(t.pending.items()):
            if since < now - _FORGET_S:  # a stream whose end was never seen
                del t.pending[token]
        ages = sorted((now - since for since in t.pending.values()), reverse=True)
        stalled = ages[k - 1] if len(ages) >= k else 0.0
        return max(measured, stalled)

    def check(self, target: str, priority: int) -> None:
        """Raise Overloaded (503 + Retry-After) if this priority is shed on this tier now."""
        wait = self.wait_s(target)
        if wait < self.threshold_s:
            return
        level = int(wait // self.threshold_s)
        rank = self.ranks.get(priority, 0)
        if rank < self.top and rank < level:
            raise Overloaded(
                f"the tier {target} is overloaded (queue wait {wait * 1000:.0f} ms, threshold "
                f"{self.threshold_s * 1000:.0f} ms); requests of this plan's priority are shed "
                "first, retry later",
                wait,
            )

    def waiting(self, target: str) -> int:
        """Note a stream sent to the tier; returns a token for forget()."""
        token = next(self._ids)
        self._tier(target).pending[token] = self.clock()
        return token

    def forget(self, target: str, token: int) -> None:
        """The stream of `token` got its first token, or ended: it no longer waits."""
        self._tier(target).pending.pop(token, None)

    def record(self, target: str, wait_s: float) -> None:
        """The queue wait a replica reported for a finished request."""
        self._tier(target).add(self.clock(), max(0.0, wait_s))
