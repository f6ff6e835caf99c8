"""Whole requests of batches bound for one tier, sent to it in one call.

A batch's requests need no answer soon, and each call through a Ray Serve handle costs about a
millisecond of CPU on each side (routing, gRPC, the replica's own bookkeeping) whatever it
carries. So the gateway holds a batch's whole request for at most `wait_s`, or until `most` are
bound for the same tier with the same affinity key (the replica routing reads the group's),
and sends them together; the replica runs each on its engine as it would alone (the engine
batches them, interactive requests first) and streams the results back as they end, those that
end within a moment of each other in one message (so a request done early frees its place in
the batch worker then, not when its group's last one ends; each streamed message costs about
what a call does). Interactive requests never wait here.

A request whose caller leaves (its deadline passed) before the group is sent is left out of
it; once sent, the group's call is cancelled when every request in it was left (the replica
stops the engine and reports what ran, as for a single call). One left alone in a group that
goes on runs to its end and its result is dropped: its caller bills what the replica reports,
the prompt alone if nothing is reported."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from zerolayer.protocol import End, Failed, SamplingSpec, Target

__all__ = ["Grouper"]

# a group's call: (index in the group, result) of the requests that ended, as they end
Send = Callable[[Target, list[SamplingSpec]], AsyncIterator[list[tuple[int, End | Failed]]]]


@dataclass
class _Group:
    items: list[tuple[SamplingSpec, asyncio.Future[End | Failed]]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[None] | None = None

    def left(self) -> None:
        """A caller left: once every caller of a sent group has, its call is cancelled."""
        if self.task is not None and all(f.done() for _, f in self.items):
            self.task.cancel()


class Grouper:
    """Collects whole requests per tier and sends them together (module doc)."""

    def __init__(self, send: Send, most: int = 16, wait_s: float = 0.005):
        self._send = send
        self.most = most
        self.wait_s = wait_s
        self._open: dict[tuple[Target, str], _Group] = {}
        self.calls = 0  # groups sent (tests, stats)

    async def complete(self, target: Target, spec: SamplingSpec) -> End | Failed:
        """The request's result, from the call of the group it joined."""
        loop = asyncio.get_running_loop()
        key = (target, spec.affinity)
        group = self._open.get(key)
        if group is None:
            group = self._open[key] = _Group()
            group.timer = loop.call_later(self.wait_s, self._flush, key, group)
        fut: asyncio.Future[End | Failed] = loop.create_future()
        group.items.append((spec, fut))
        if len(group.items) >= self.most:
            self._flush(key, group)
        try:
            return await fut
        except asyncio.CancelledError:
            group.left()
            raise

    def _flush(self, key: tuple[Target, str], group: _Group) -> None:
        if self._open.get(key) is group:
            del self._open[key]
        if group.timer is not None:
            group.timer.cancel()
        if group.task is not None:
            return
        group.items = [(s, f) for s, f in group.items if not f.done()]  # those left stay out
        if group.items:
            self.calls += 1
            group.task = asyncio.ensure_future(self._run(key[0], group))

    async def _run(self, target: Target, group: _Group) -> None:
        futures = [f for _, f in group.items]
        try:
            async for ended in self._send(target, [s for s, _ in group.items]):
                for j, result in ended:
                    if not futures[j].done():
                        futures[j].set_result(result)
        except asyncio.CancelledError:
            for f in futures:
                f.cancel()
            raise
        except Exception as exc:
            for f in futures:
                if not f.done():
                    f.set_exception(exc)
            return
        missing = [f for f in futures if not f.done()]
        if missing:
            err = RuntimeError(f"a tier answered {len(futures) - len(missing)} of {len(futures)}")
            for f in missing:
                f.set_exception(err)
