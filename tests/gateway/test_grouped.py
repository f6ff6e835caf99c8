"""A batch's whole requests go to their tier in groups, one handle call each
(zerolayer.gateway.grouped), through the gateway's HandleBackend; the handles here call a real
TierReplica over the scripted fake engine in this process (what Ray Serve would carry)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import pytest
from zerolayer.engines.fake import FakeEngine
from zerolayer.gateway.deployment import HandleBackend
from zerolayer.protocol import End, Failed, SamplingSpec, Target
from zerolayer.replicas.core import TierReplica

TARGET = Target("m", "baseline")


class _Response:
    """What DeploymentHandle.remote gives: awaitable once, cancellable."""

    def __init__(self, coro: Awaitable[Any]):
        self.task = asyncio.ensure_future(coro)

    def __await__(self) -> Generator[Any, None, Any]:
        return self.task.__await__()

    def cancel(self) -> None:
        self.task.cancel()


class _Stream:
    """What a streaming handle's remote gives: the replica's generator run apart (as in its
    replica), its items read in order; cancel() stops it there."""

    def __init__(self, gen: AsyncIterator[Any]):
        self.items: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._pump(gen))

    async def _pump(self, gen: AsyncIterator[Any]) -> None:
        try:
            async for item in gen:
                await self.items.put((True, item))
            await self.items.put((False, None))
        except Exception as exc:
            await self.items.put((False, exc))

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Any:
        more, item = await self.items.get()
        if more:
            return item
        if isinstance(item, Exception):
            raise item
        raise StopAsyncIteration

    def cancel(self) -> None:
        self.task.cancel()


class _Method:
    def __init__(self, fn: Callable[..., Any], calls: list[tuple[str, int]], name: str):
        self.fn, self.calls, self.name = fn, calls, name

    def remote(self, arg: Any) -> _Response | _Stream:
        self.calls.append((self.name, len(arg) if isinstance(arg, list) else 1))
        if self.name == "complete_many":
            return _Stream(self.fn(arg))
        return _Response(self.fn(arg))


class _Handle:
    def __init__(self, replica: TierReplica, calls: list[tuple[str, int]]):
        self.complete = _Method(replica.complete, calls, "complete")
        self.complete_many = _Method(replica.complete_each, calls, "complete_many")

    def options(self, **_: Any) -> _Handle:
        return self


def _backend(
    engine: FakeEngine, most: int = 16, wait_s: float = 0.005
) -> tuple[HandleBackend, list[tuple[str, int]], list[tuple[str, int, int]]]:
    replica = TierReplica("m:baseline", engine, 50_000, 4096)
    reported: list[tuple[str, int, int]] = []
    replica.on_abandoned = lambda rid, p, c: reported.append((rid, p, c))
    calls: list[tuple[str, int]] = []
    backend = HandleBackend(
        None,  # type: ignore[arg-type]  # not used here
        None,  # type: ignore[arg-type]
        handle_of=lambda _: _Handle(replica, calls),  # type: ignore[arg-type,return-value]
        group_most=most,
        group_wait_s=wait_s,
    )
    return backend, calls, reported


def _spec(i: int, batch: bool = True, max_tokens: int = 3) -> SamplingSpec:
    return SamplingSpec(f"r{i}", [5, 6, 7 + i], max_tokens, priority=1 if batch else 0)


def test_a_batchs_requests_go_together_and_interactive_ones_alone() -> None:
    async def main() -> None:
        engine = FakeEngine()
        backend, calls, _ = _backend(engine)
        got = await asyncio.gather(
            *(backend.complete(TARGET, _spec(i, max_tokens=1 + i % 4)) for i in range(10)),
            backend.complete(TARGET, _spec(10, batch=False)),
            backend.complete(TARGET, _spec(11, batch=False)),
        )
        assert sorted(calls) == [("complete", 1), ("complete", 1), ("complete_many", 10)]
        # each answer is its own request's, in order
        for i, end in enumerate(got[:10]):
            assert isinstance(end, End)
            assert end.completion_tokens == min(1 + i % 4, 4)
            assert end.text == "".join(engine.script[: end.completion_tokens])
            assert end.prompt_tokens == 3
        assert sorted(s.request_id for s in engine.specs) == sorted(f"r{i}" for i in range(12))

    asyncio.run(main())


def test_a_group_holds_at_most_group_most_requests() -> None:
    async def main() -> None:
        backend, calls, _ = _backend(FakeEngine(), most=4, wait_s=0.5)
        got = await asyncio.wait_for(
            asyncio.gather(*(backend.complete(TARGET, _spec(i)) for i in range(10))), 5
        )
        assert all(isinstance(g, End) for g in got)
        # 4 + 4 sent as they filled, the last 2 when the wait ran out
        assert calls == [("complete_many", 4), ("complete_many", 4), ("complete_many", 2)]
        assert backend.grouped.calls == 3

    asyncio.run(main())


def test_callers_that_leave_are_left_out_or_their_group_is_cancelled() -> None:
    async def main() -> None:
        engine = FakeEngine(delay_s=0.05)
        backend, calls, reported = _backend(engine, wait_s=0.05)
        # one leaves before its group is sent: it is not sent at all
        tasks = [asyncio.ensure_future(backend.complete(TARGET, _spec(i))) for i in range(3)]
        await asyncio.sleep(0.01)
        tasks[0].cancel()
        got = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(got[0], asyncio.CancelledError)
        assert all(isinstance(g, End) for g in got[1:])
        assert calls == [("complete_many", 2)]
        assert "r0" not in [s.request_id for s in engine.specs]
        # every caller of a sent group leaves: the call is cancelled, the engine stops each
        # request and the replica reports what ran
        tasks = [asyncio.ensure_future(backend.complete(TARGET, _spec(i))) for i in range(3, 6)]
        await asyncio.sleep(0.12)  # sent, and a token or so in
        assert calls[-1] == ("complete_many", 3)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.05)
        assert sorted(engine.aborted) == ["r3", "r4", "r5"]
        assert sorted(r[0] for r in reported) == ["r3", "r4", "r5"]
        assert all(r[1] == 3 for r in reported)

    asyncio.run(main())


def test_a_group_whose_call_fails_fails_each_caller_and_a_broken_request_alone() -> None:
    async def main() -> None:
        # the engine breaks on one request only: that one is Failed, the others answer
        engine = FakeEngine()
        backend, _, _ = _backend(engine)
        original = engine.generate

        def generate(spec: SamplingSpec) -> Any:
            if spec.request_id == "r1":
                raise RuntimeError("broken")
            return original(spec)

        engine.generate = generate  # type: ignore[method-assign]
        got = await asyncio.gather(*(backend.complete(TARGET, _spec(i)) for i in range(3)))
        assert isinstance(got[0], End) and isinstance(got[2], End)
        assert isinstance(got[1], Failed) and got[1].error.code == "engine_error"

        # the call itself fails (the replica died): every caller sees the error
        backend, _, _ = _backend(FakeEngine())

        async def dead(_: list[SamplingSpec]) -> AsyncIterator[list[tuple[int, End | Failed]]]:
            raise ConnectionError("replica gone")
            yield  # a generator

        handle = backend._handle(TARGET)
        handle.complete_many = _Method(dead, [], "complete_many")  # type: ignore[attr-defined]
        got = await asyncio.gather(
            *(backend.complete(TARGET, _spec(i)) for i in range(3)), return_exceptions=True
        )
        assert all(isinstance(g, ConnectionError) for g in got)

    asyncio.run(main())


@pytest.mark.parametrize("most", [1, 2])
def test_a_group_of_one_is_a_call_of_one(most: int) -> None:
    async def main() -> None:
        backend, calls, _ = _backend(FakeEngine(), most=most)
        got = await asyncio.gather(*(backend.complete(TARGET, _spec(i)) for i in range(2)))
        assert all(isinstance(g, End) for g in got)
        assert calls == [("complete_many", most)] * (2 // most)

    asyncio.run(main())


def test_a_group_has_one_affinity_key_which_the_replica_routing_reads() -> None:
    from ray.serve.request_router import PendingRequest
    from zerolayer.replicas.routing import affinity_of

    async def main() -> None:
        sent: list[list[SamplingSpec]] = []
        backend, _, _ = _backend(FakeEngine())
        handle = backend._handle(TARGET)
        many = handle.complete_many.fn  # type: ignore[attr-defined]

        async def keep(
            specs: list[SamplingSpec],
        ) -> AsyncIterator[list[tuple[int, End | Failed]]]:
            sent.append(specs)
            async for ended in many(specs):
                yield ended

        handle.complete_many = _Method(keep, [], "complete_many")  # type: ignore[attr-defined]
        keys = ["t\0a", "t\0b", "", "t\0a", "t\0b", ""]
        specs = [dataclasses.replace(_spec(i), affinity=k) for i, k in enumerate(keys)]
        got = await asyncio.gather(*(backend.complete(TARGET, s) for s in specs))
        assert all(isinstance(g, End) for g in got)
        groups = sorted(sorted(s.request_id for s in g) for g in sent)
        assert groups == [["r0", "r3"], ["r1", "r4"], ["r2", "r5"]]
        for g in sent:
            pending = PendingRequest(args=[g], kwargs={}, metadata=None)  # type: ignore[arg-type]
            assert affinity_of(pending) == g[0].affinity == g[-1].affinity

    asyncio.run(main())


def test_each_result_of_a_group_comes_back_as_its_request_ends() -> None:
    async def main() -> None:
        backend, calls, _ = _backend(FakeEngine(delay_s=0.05))
        ended: dict[str, float] = {}

        async def one(spec: SamplingSpec) -> None:
            got = await backend.complete(TARGET, spec)
            assert isinstance(got, End) and got.completion_tokens == spec.max_tokens
            ended[spec.request_id] = time.monotonic()

        await asyncio.gather(one(_spec(0, max_tokens=4)), one(_spec(1, max_tokens=1)))
        assert calls == [("complete_many", 2)]
        # one token against four: the short one was back well before the long one ended
        assert ended["r0"] - ended["r1"] > 0.1

    asyncio.run(main())
