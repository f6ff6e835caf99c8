"""The SDK against the gateway's real routes, over real HTTP (uvicorn), with in-process replicas
of the scripted fake engine and a real Redis: every method once, sync and async; a POST whose
answer is lost is retried and billed once; the same calls through the official openai package;
a stream left half way frees the connection and the platform's lease."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai
import pytest
import zerolayer_sdk as zl
from zerolayer.engines.fake import FakeEngine

from tests.conftest import free_port
from tests.gateway.conftest import ADMIN_KEY, SCRIPT, GatewayFactory
from tests.sdk.calls import PARIS, async_calls, openai_compatible, zerolayer_only
from tests.sdk.proxy import LossyProxy

MODEL = "smollm2-135m"


def test_every_method_against_the_gateway(make_gateway: GatewayFactory, tmp_path: Path) -> None:
    gw = make_gateway()
    client = zl.Client(api_key=gw.key, admin_key=ADMIN_KEY, base_url=gw.http())
    openai_compatible(client, MODEL)
    got = zerolayer_only(client, MODEL, tmp_path, lambda customer: gw.billed())
    assert got["usage"].totals.completion_tokens == 4  # max_tokens=4 of the script's seven


def test_the_openai_package_makes_the_same_calls(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    client = openai.OpenAI(api_key=gw.key, base_url=gw.http(), max_retries=0)
    openai_compatible(client, MODEL)


def test_every_kind_of_call_of_the_async_client(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    url = gw.http()

    async def run() -> None:
        async with zl.AsyncClient(api_key=gw.key, base_url=url) as client:
            await async_calls(client, MODEL)

    asyncio.run(run())


def test_a_retried_post_whose_answer_was_lost_runs_and_is_billed_once(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    with LossyProxy(gw.http().removesuffix("/v1"), drop=1) as proxy:
        client = zl.Client(api_key=gw.key, base_url=proxy.url + "/v1")
        client._sleep = lambda s: None  # type: ignore[assignment]
        raw = client.with_raw_response.chat.completions.create(
            model=MODEL, messages=PARIS, max_tokens=5
        )
    assert raw.retries_taken == 1 and raw.replayed
    first, second = proxy.answers
    assert first[0] == second[0] == 200
    # the retry was answered from the first run: the same completion, not a second one
    assert raw.parse().id == first[1]["x-request-id"] == raw.request_id
    keys = [h["idempotency-key"] for h in proxy.seen]
    assert len(keys) == 2 and keys[0] == keys[1]
    assert [h["x-zerolayer-retry-count"] for h in proxy.seen] == ["0", "1"]
    gw.billed()
    usage = client.usage.retrieve()
    assert usage.totals.requests == 1 and usage.totals.completion_tokens == 5, usage


def test_without_the_key_the_same_loss_is_billed_twice(make_gateway: GatewayFactory) -> None:
    """What the Idempotency-Key prevents: a client that retries without one (as the openai
    package's retries do) runs the request again."""
    gw = make_gateway()
    with LossyProxy(gw.http().removesuffix("/v1"), drop=1) as proxy:
        client = openai.OpenAI(api_key=gw.key, base_url=proxy.url + "/v1", max_retries=1)
        client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=5)  # type: ignore[arg-type]
    assert "idempotency-key" not in proxy.seen[0]
    gw.billed()
    sdk = zl.Client(api_key=gw.key, base_url=gw.http())
    assert sdk.usage.retrieve().totals.requests == 2


def test_errors_of_the_real_routes(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    client = zl.Client(api_key=gw.key, base_url=gw.http(), max_retries=0)
    with pytest.raises(zl.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=PARIS)
    assert missing.value.code == "model_not_found" and missing.value.request_id
    with pytest.raises(zl.BadRequestError) as long:
        client.chat.completions.create(model=MODEL, messages=PARIS, max_tokens=900_000)
    assert long.value.code == "context_length_exceeded" and long.value.param == "max_tokens"
    with pytest.raises(zl.AuthenticationError):
        client.with_options(api_key="zl-wrong").models.list()
    with pytest.raises(zl.NotFoundError) as gone:
        client.responses.retrieve("resp_" + "0" * 48)
    assert gone.value.code == "not_found"


def test_a_stream_left_half_way_frees_the_connection_and_the_lease(
    make_gateway: GatewayFactory,
) -> None:
    slow = FakeEngine(SCRIPT * 20, delay_s=0.05)
    gw = make_gateway(engine=slow)
    client = zl.Client(api_key=gw.key, base_url=gw.http())
    leases = f"zl:rl:{{{gw.key_id}}}:conc"
    stream = client.chat.completions.create(
        model=MODEL, messages=PARIS, max_tokens=140, stream=True
    )
    for event in stream:
        if event.choices and event.choices[0].delta.content:
            break  # the rest is not wanted
    assert stream.response.is_closed
    pool = client._http._transport._pool  # type: ignore[attr-defined]
    assert not [c for c in pool.connections if not (c.is_idle() or c.is_closed())]
    deadline = time.monotonic() + 10
    while gw.redis.zcard(leases) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gw.redis.zcard(leases) == 0  # the gateway saw the client leave and settled
    assert client.models.list().data  # the client goes on working


def test_a_connection_refused_is_retried_then_raised() -> None:
    port = free_port()  # nothing listens there
    client = zl.Client(api_key="zl-x", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1)
    waits: list[float] = []
    client._sleep = waits.append  # type: ignore[assignment]
    with pytest.raises(zl.APIConnectionError):
        client.models.list()
    assert len(waits) == 1


def test_files_and_batches_through_the_sdk(make_gateway: GatewayFactory, tmp_path: Path) -> None:
    import json

    gw = make_gateway()
    gw.app.state.parts.config.batches.poll_s = 0.02
    client = zl.Client(api_key=gw.key, base_url=gw.http())
    lines = [
        {
            "custom_id": f"q{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": PARIS, "max_tokens": 3},
        }
        for i in range(3)
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    made = client.files.create(file=path, purpose="batch")
    assert made.filename == "requests.jsonl" and made.bytes == path.stat().st_size
    assert client.files.content(made.id) == path.read_bytes()
    assert [f.id for f in client.files.list(purpose="batch")] == [made.id]
    batch = client.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", metadata={"k": "v"}
    )
    assert batch.request_counts.total == 3 and batch.metadata == {"k": "v"}
    end = time.monotonic() + 30
    while batch.status not in ("completed", "failed") and time.monotonic() < end:
        time.sleep(0.05)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.request_counts.completed == 3
    assert batch.output_file_id is not None
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).splitlines()]
    assert [o["custom_id"] for o in out] == ["q0", "q1", "q2"]
    assert [b.id for b in client.batches.list()] == [batch.id]
    with pytest.raises(zl.ConflictError):
        client.batches.cancel(batch.id)  # it has ended
    bad = client.files.create(file=("notes.txt", b"free text"), purpose="user_data")
    with pytest.raises(zl.BadRequestError) as refused:
        client.batches.create(input_file_id=bad.id, endpoint="/v1/chat/completions")
    assert refused.value.param == "input_file_id"
    with pytest.raises(zl.BadRequestError) as line:
        client.files.create(file=("b.jsonl", b'{"custom_id": 1}\n'), purpose="batch")
    assert "line 1" in str(line.value)
    assert client.files.delete(made.id).deleted
    with pytest.raises(zl.NotFoundError):
        client.files.retrieve(made.id)
