"""Progress of the compiler's long steps: a progress bar on stderr (tqdm) that also tells a
listener, when one is set, which step runs and how far it is. `zerolayer up` builds tier
artifacts in a worker process whose listener reports to the launcher (collapse.worker)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tqdm.auto import tqdm

__all__ = ["Listener", "bar", "listen"]

Listener = Callable[[str, int, "int | None"], None]  # step, done, total
_listener: list[Listener] = []


def listen(listener: Listener | None) -> None:
    """Send every bar's step and count to `listener` (None: to nobody)."""
    _listener[:] = [listener] if listener is not None else []


def _note(step: str, done: int, total: int | None) -> None:
    for listener in _listener:
        listener(step, done, total)


class bar(tqdm):  # noqa: N801 (used as tqdm is: a call that makes a bar)
    """tqdm, telling the listener the step (the bar's desc) and its count as it advances; a
    bar made with disable=True (an inner loop of a step) tells nobody either."""

    def __init__(self, iterable: Any = None, desc: str = "", **kwargs: Any):
        total = kwargs.get("total")
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self._step, self._total = desc, total
        self._told = not kwargs.get("disable", False)
        super().__init__(iterable, desc=desc, **kwargs)
        self._tell(0)

    def _tell(self, done: int) -> None:
        if self._told:
            _note(self._step, done, self._total)

    def __iter__(self) -> Iterator[Any]:
        done = 0
        for item in super().__iter__():
            yield item
            done += 1
            self._tell(done)

    def update(self, n: float | None = 1) -> bool | None:
        shown = super().update(n)
        self._tell(int(self.n))
        return shown
