"""The Batch API through the official openai package, with the scripted engine behind the
gateway: a batch of chat, text and Responses requests runs to `completed` with its output file
in OpenAI's line format, each request billed once at half price; a cancelled batch ends with
what ran; a worker that stops mid-batch leaves it to another, which finishes it without running
or billing a request twice; and bad input is a clear 4xx with nothing queued."""

from __future__ import annotations

import io
import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from zerolayer.engines.fake import FakeEngine
from zerolayer.gateway.batches import BatchWorker
from zerolayer.store.embedded import EmbeddedRedis
from zerolayer.store.keys import AsyncKeyStore

from tests.gateway.conftest import SCRIPT, GatewayFactory, plan
from tests.gateway.test_api import assert_openai_error
from tests.gateway.test_files import jsonl, line, upload

MODEL = "smollm2-135m"


def fast(gw: Any) -> OpenAI:
    """The gateway's batch worker polling every 20 ms; an openai client for it."""
    gw.app.state.parts.config.batches.poll_s = 0.02
    return OpenAI(base_url=gw.http(), api_key=gw.key, max_retries=0)


def until(oc: OpenAI, bid: str, statuses: set[str], within: float = 30) -> Any:
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = oc.batches.retrieve(bid)
        if got.status in statuses:
            return got
        time.sleep(0.05)
    raise AssertionError(f"batch {bid} still {got.status}")


def another_worker(gw: Any) -> BatchWorker:
    """A second batch worker on the gateway's own parts (as another replica's would be)."""
    parts = gw.app.state.parts
    return BatchWorker(
        parts.config,
        gw.app.state.pipeline,
        gw.app.state.responder,
        parts.batches,
        parts.files,
        AsyncKeyStore(parts.limiter.client),
    )


def progressed(oc: OpenAI, bid: str, completed: int, within: float = 30) -> None:
    """Wait until at least `completed` requests of a batch have run."""
    end = time.monotonic() + within
    while (got := oc.batches.retrieve(bid)).request_counts.completed < completed:
        assert time.monotonic() < end, got
        time.sleep(0.02)


def events(gw: Any) -> list[dict[str, Any]]:
    gw.billed()
    tenant = gw.record().owner
    month = time.strftime("%Y-%m", time.gmtime())
    texts = gw.redis.lrange(f"zl:bill:{{{tenant}}}:events:{month}", 0, -1)
    return [json.loads(t)["data"] | {"id": json.loads(t)["id"]} for t in texts]


def test_a_batch_runs_to_completed_with_its_output_billed_once_at_half_price(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    oc = fast(gw)
    requests = [line(f"chat-{i}") for i in range(5)]
    data = jsonl(requests)
    made = oc.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = oc.batches.create(
        input_file_id=made.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "nightly"},
    )
    assert batch.object == "batch" and batch.status in ("validating", "in_progress")
    assert batch.request_counts.total == 5 and batch.metadata == {"job": "nightly"}
    assert batch.expires_at == batch.created_at + 86400
    done = until(oc, batch.id, {"completed", "failed"})
    assert done.status == "completed", done
    assert done.request_counts.completed == 5 and done.request_counts.failed == 0
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    assert done.error_file_id is None
    out = [json.loads(x) for x in oc.files.content(done.output_file_id).read().splitlines()]
    assert [o["custom_id"] for o in out] == [f"chat-{i}" for i in range(5)]  # input order
    for o in out:
        assert o["error"] is None and o["response"]["status_code"] == 200
        reply = o["response"]["body"]
        assert reply["object"] == "chat.completion"
        assert reply["choices"][0]["message"]["content"] == "".join(SCRIPT)
    assert oc.files.retrieve(done.output_file_id).purpose == "batch_output"
    # billed once each, at the plan's batch price (half), on lines of their own
    billed = [e for e in events(gw) if e["endpoint"] == "batch.chat.completions"]
    assert sorted(e["id"] for e in billed) == sorted(o["response"]["request_id"] for o in out)
    plan = gw.app.state.parts.config.plans[billed[0]["plan"]]
    full = plan.prices[billed[0]["tier"]]
    for e in billed:
        half = full.batched(Decimal("0.5"))
        assert e["cost_nanos"] == half.nanos(e["prompt_tokens"], e["completion_tokens"])
        assert 0 < e["cost_nanos"] < full.nanos(e["prompt_tokens"], e["completion_tokens"])
    assert [b.id for b in oc.batches.list()] == [batch.id]


def test_text_completions_and_responses_are_batched_too(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    oc = fast(gw)
    for endpoint, body, check in (
        ("/v1/completions", {"model": MODEL, "prompt": "Paris is"}, "text_completion"),
        ("/v1/responses", {"model": MODEL, "input": "Paris?"}, "response"),
    ):
        req = [{"custom_id": "a", "method": "POST", "url": endpoint, "body": body}]
        made = oc.files.create(file=("in.jsonl", io.BytesIO(jsonl(req))), purpose="batch")
        batch = oc.batches.create(
            input_file_id=made.id,
            endpoint=endpoint,
            completion_window="24h",  # type: ignore[arg-type]  # the literal
        )
        done = until(oc, batch.id, {"completed"})
        (out,) = [json.loads(x) for x in oc.files.content(done.output_file_id).read().splitlines()]
        assert out["response"]["body"]["object"] == check, out


def test_a_request_that_fails_goes_to_the_error_file(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    oc = fast(gw)
    bad = line("bad")
    bad["body"]["max_tokens"] = -3
    unknown = line("unknown")
    unknown["body"]["model"] = "no-such-model"
    made = oc.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([line("ok"), bad, unknown]))), purpose="batch"
    )
    batch = oc.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = until(oc, batch.id, {"completed"})
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 2)
    errs = [json.loads(x) for x in oc.files.content(done.error_file_id).read().splitlines()]
    assert [e["custom_id"] for e in errs] == ["bad", "unknown"]
    assert errs[0]["response"]["status_code"] == 400
    assert errs[0]["response"]["body"]["error"]["param"]
    assert errs[1]["response"]["status_code"] == 404


def test_a_cancelled_batch_ends_with_what_ran(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.05))
    oc = fast(gw)
    gw.app.state.parts.config.batches.concurrency = 1
    made = oc.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([line(f"r{i}") for i in range(40)]))), purpose="batch"
    )
    batch = oc.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    until(oc, batch.id, {"in_progress"})
    progressed(oc, batch.id, 2)
    cancelling = oc.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    done = until(oc, batch.id, {"cancelled"})
    counts = done.request_counts
    assert counts.completed >= 2 and counts.completed + counts.failed == 40
    assert counts.completed < 40
    errs = [json.loads(x) for x in oc.files.content(done.error_file_id).read().splitlines()]
    assert len(errs) == counts.failed and all(e["error"]["code"] == "batch_cancelled" for e in errs)
    ran = [json.loads(x) for x in oc.files.content(done.output_file_id).read().splitlines()]
    assert len(ran) == counts.completed
    billed = [e for e in events(gw) if e["endpoint"] == "batch.chat.completions"]
    assert len(billed) == counts.completed  # what did not run costs nothing
    # a cancelled batch cancelled again: 409, nothing changes
    with pytest.raises(openai.ConflictError) as again:
        oc.batches.cancel(batch.id)
    assert again.value.code == "batch_not_cancellable"


def test_a_replica_that_stops_mid_batch_leaves_it_to_another_without_doubles(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.02))
    oc = fast(gw)
    cfg = gw.app.state.parts.config.batches
    cfg.lease_s = 1.0
    cfg.concurrency = 2
    first: BatchWorker = gw.app.state.batch_worker
    made = oc.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([line(f"r{i}") for i in range(30)]))), purpose="batch"
    )
    batch = oc.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    progressed(oc, batch.id, 5)
    # the replica shuts down: its worker starts nothing more, lets its running requests end
    gw.client.portal.call(first.close)
    stalled = oc.batches.retrieve(batch.id)
    assert stalled.status == "in_progress" and stalled.request_counts.completed < 30
    time.sleep(0.3)
    assert oc.batches.retrieve(batch.id).request_counts == stalled.request_counts
    second = another_worker(gw)
    gw.client.portal.call(second.start)
    done = until(oc, batch.id, {"completed"})
    gw.client.portal.call(second.close)
    assert done.request_counts.completed == 30 and done.request_counts.failed == 0
    out = [json.loads(x) for x in oc.files.content(done.output_file_id).read().splitlines()]
    assert sorted(o["custom_id"] for o in out) == sorted(f"r{i}" for i in range(30))
    billed = [e for e in events(gw) if e["endpoint"] == "batch.chat.completions"]
    ids = [e["id"] for e in billed]
    assert len(ids) == len(set(ids)) == 30  # each request billed exactly once...
    assert all(e["status"] == "ok" for e in billed)  # ...and in full
    assert second.ran == 30 - stalled.request_counts.completed
    # the month's spend (what the budget counts) agrees with the invoice's events
    month = time.strftime("%Y-%m", time.gmtime())
    spent = int(gw.redis.get(f"zl:rl:{{{gw.key_id}}}:cost:{month}") or 0)
    assert spent == sum(int(e["cost_nanos"]) for e in events(gw))


def test_a_batch_past_the_months_budget_is_a_429(make_gateway: GatewayFactory) -> None:
    gw = make_gateway(plans={"capped": plan(monthly_budget_usd="0.01")}, key_plan="capped")
    good = upload(gw, jsonl([line("a")])).json()
    month = time.strftime("%Y-%m", time.gmtime())
    gw.redis.set(f"zl:rl:{{{gw.key_id}}}:cost:{month}", 10_000_000)  # $0.01 spent
    r = httpx.post(
        gw.http() + "/batches",
        headers=gw.auth,
        json={
            "input_file_id": good["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
        timeout=10,
    )
    err = assert_openai_error(r, 429)
    assert err["code"] == "monthly_budget"
    assert gw.redis.zcard("zl:batches:queue") == 0


def test_bad_batches_are_clear_4xx_and_nothing_is_queued(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    other = make_gateway(key=None)
    oc = fast(gw)
    good = upload(gw, jsonl([line("a")])).json()
    notes = upload(gw, b"some notes", purpose="user_data", name="n.txt").json()
    mixed = upload(gw, jsonl([line("a"), line("b", url="/v1/responses")])).json()
    theirs = upload(other, jsonl([line("a")])).json()

    def create(**body: Any) -> httpx.Response:
        full = {"endpoint": "/v1/chat/completions", "completion_window": "24h", **body}
        return httpx.post(gw.http() + "/batches", headers=gw.auth, json=full, timeout=10)

    err = assert_openai_error(create(input_file_id=notes["id"]), 400)
    assert err["param"] == "input_file_id" and "purpose" in err["message"]
    err = assert_openai_error(create(input_file_id=mixed["id"]), 400)
    assert "line 2 " in err["message"] and err["code"] == "invalid_batch_line"
    assert "is for /v1/responses" in err["message"] and err["param"] == "input_file_id"
    assert_openai_error(create(input_file_id="file-nope"), 404)
    assert_openai_error(create(input_file_id=theirs["id"]), 404)
    err = assert_openai_error(create(input_file_id=good["id"], completion_window="1h"), 400)
    assert "completion_window" in (err["param"] or err["message"])
    err = assert_openai_error(create(input_file_id=good["id"], endpoint="/v1/embeddings"), 400)
    assert_openai_error(
        create(input_file_id=good["id"], metadata={str(i): "x" for i in range(17)}), 400
    )
    assert oc.batches.list().data == []
    assert gw.redis.zcard("zl:batches:queue") == 0
    # another tenant's batch is a 404 everywhere
    made = oc.batches.create(
        input_file_id=good["id"], endpoint="/v1/chat/completions", completion_window="24h"
    )
    for method, path in (("GET", f"/batches/{made.id}"), ("POST", f"/batches/{made.id}/cancel")):
        r = httpx.request(method, other.http() + path, headers=other.auth, timeout=10)
        assert_openai_error(r, 404)


def test_a_batch_past_its_window_ends_expired_with_nothing_run(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    oc = fast(gw)
    gw.client.portal.call(gw.app.state.batch_worker.close)  # no worker yet
    made = oc.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([line("a"), line("b")]))), purpose="batch"
    )
    batch = oc.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    key = f"zl:batch:{{{batch.id}}}"
    fixed = json.loads(gw.redis.hget(key, "fixed"))
    gw.redis.hset(key, "fixed", json.dumps({**fixed, "expires_at": int(time.time()) - 1}))
    worker = another_worker(gw)
    gw.client.portal.call(worker.start)
    done = until(oc, batch.id, {"expired"})
    gw.client.portal.call(worker.close)
    assert done.expired_at and done.request_counts.failed == 2 and worker.ran == 0
    errs = [json.loads(x) for x in oc.files.content(done.error_file_id).read().splitlines()]
    assert [e["error"]["code"] for e in errs] == ["batch_expired"] * 2
    assert [e for e in events(gw) if e["endpoint"].startswith("batch.")] == []


def test_a_batch_that_cannot_run_holds_up_no_other(make_gateway: GatewayFactory) -> None:
    """A batch whose input file's bytes are gone from the store ends `failed` (missing_file),
    and its content is a 404; a batch whose run raises (its store failing) is left alone for a
    while; the batch queued behind both still runs to completed."""
    gw = make_gateway()
    oc = fast(gw)
    gw.client.portal.call(gw.app.state.batch_worker.close)  # no worker yet
    files = gw.app.state.parts.files
    made = [
        oc.files.create(file=(f"{n}.jsonl", io.BytesIO(jsonl([line(n)]))), purpose="batch")
        for n in ("gone", "raises", "fine")
    ]
    gone, raises, fine = (
        oc.batches.create(
            input_file_id=m.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        for m in made
    )
    files.fs.rm_file(files._path(made[0].id))
    r = httpx.get(f"{gw.http()}/files/{made[0].id}/content", headers=gw.auth, timeout=10)
    assert_openai_error(r, 404)
    worker = another_worker(gw)
    run = worker.run

    async def failing(bid: str, lost: Any = None) -> None:
        if bid == raises:
            raise ConnectionError("the store is failing")
        await run(bid, lost)

    worker.run = failing  # type: ignore[method-assign]  # one batch's store fails
    gw.client.portal.call(worker.start)
    try:
        done = until(oc, fine, {"completed"})
        failed = until(oc, gone, {"failed"})
    finally:
        gw.client.portal.call(worker.close)
    assert done.request_counts.completed == 1
    assert failed.errors is not None and failed.errors.data[0].code == "missing_file"
    assert oc.batches.retrieve(raises).status == "validating"
    tries, _ = worker._resting[raises]
    assert tries >= 1 and worker.ran == 1


def test_a_request_refused_for_a_while_is_sent_again_not_failed(
    make_gateway: GatewayFactory,
) -> None:
    """Two requests at once on this key's plan: the batch's others wait their turn (429
    concurrent_requests, Retry-After) and run later; none fails, each is billed once."""
    gw = make_gateway(
        engine=FakeEngine(SCRIPT, delay_s=0.02),
        plans={"two": plan(concurrent_requests=2)},
        key_plan="two",
    )
    oc = fast(gw)
    made = oc.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([line(f"r{i}") for i in range(12)]))), purpose="batch"
    )
    batch = oc.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = until(oc, batch.id, {"completed"}, within=60)
    assert done.request_counts.completed == 12 and done.request_counts.failed == 0
    evs = events(gw)
    refused = [e for e in evs if e["status"] == "rate_limited"]
    billed = [e for e in evs if e["endpoint"] == "batch.chat.completions" and e["status"] == "ok"]
    assert refused  # the limit was met...
    assert len(billed) == 12 and all(int(e["cost_nanos"]) == 0 for e in refused)  # ...and waited
    out = [json.loads(x) for x in oc.files.content(done.output_file_id).read().splitlines()]
    assert sorted(o["response"]["request_id"] for o in out) == sorted(e["id"] for e in billed)


@pytest.mark.slow
def test_a_batch_survives_redis_killed_mid_run_without_doubles_or_losses(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    """kill -9 of Redis (appendfsync always) while a batch runs, a restart on the same data:
    the batch completes with every line once in its output and every request billed once."""
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    server.start()
    restarted = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    try:
        gw = make_gateway(engine=FakeEngine(SCRIPT, delay_s=0.02), store=server.secret_url())
        oc = fast(gw)
        cfg = gw.app.state.parts.config.batches
        cfg.lease_s, cfg.concurrency = 2.0, 4
        lines = 60
        made = oc.files.create(
            file=("in.jsonl", io.BytesIO(jsonl([line(f"r{i}") for i in range(lines)]))),
            purpose="batch",
        )
        batch = oc.batches.create(
            input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        progressed(oc, batch.id, 8)
        assert server._proc is not None
        server._proc.kill()  # kill -9, requests of the batch in flight
        server._proc.wait()
        time.sleep(1.0)  # the worker meets a Redis that is down
        restarted.start()  # same data and secret: the gateway's clients reconnect
        done = until(oc, batch.id, {"completed", "failed"}, within=120)
        assert done.status == "completed", done
        assert done.request_counts.completed == lines and done.request_counts.failed == 0
        out = [json.loads(x) for x in oc.files.content(done.output_file_id).read().splitlines()]
        ids = [o["custom_id"] for o in out]
        billed = [e for e in events(gw) if e["endpoint"] == "batch.chat.completions"]
        print(
            f"batch of {lines} with Redis killed after 8+ lines: output lines {len(ids)} "
            f"({len(set(ids))} distinct), usage events {len(billed)} "
            f"({len({e['id'] for e in billed})} distinct)"
        )
        assert ids == [f"r{i}" for i in range(lines)]  # each line once, none lost
        assert all(o["error"] is None for o in out)
        assert len(billed) == len({e["id"] for e in billed}) == lines  # each billed once
        assert {e["id"] for e in billed} == {o["response"]["request_id"] for o in out}
        month = time.strftime("%Y-%m", time.gmtime())
        spent = int(gw.redis.get(f"zl:rl:{{{gw.key_id}}}:cost:{month}") or 0)
        assert spent == sum(int(e["cost_nanos"]) for e in events(gw))
    finally:
        restarted.stop()
        server.stop()


def test_files_and_a_batch_live_in_an_s3_bucket_when_configured(
    make_gateway: GatewayFactory,
) -> None:
    """files.url naming a bucket of an S3-compatible server (moto's, on 127.0.0.1) through s3fs:
    the upload, the batch's output and the deletes happen in the bucket."""
    import boto3
    from moto.server import ThreadedMotoServer
    from zerolayer.config.services import FilesConfig

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {"endpoint_url": f"http://{host}:{port}", "key": "k", "secret": "s"}
        files = FilesConfig(url="s3://zl-files/tenants", storage_options=options)
        gw = make_gateway(settings={"files": files})
        oc = fast(gw)
        made = oc.files.create(
            file=("in.jsonl", io.BytesIO(jsonl([line(f"r{i}") for i in range(4)]))),
            purpose="batch",
        )
        s3 = boto3.client(
            "s3",
            endpoint_url=options["endpoint_url"],
            aws_access_key_id="k",
            aws_secret_access_key="s",
            region_name="us-east-1",
        )

        def keys() -> set[str]:
            listed = s3.list_objects_v2(Bucket="zl-files", Prefix="tenants/")
            return {o["Key"] for o in listed.get("Contents", [])}

        assert keys() == {f"tenants/{made.id}"}
        batch = oc.batches.create(
            input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        done = until(oc, batch.id, {"completed", "failed"})
        assert done.status == "completed" and done.request_counts.completed == 4, done
        assert keys() == {f"tenants/{made.id}", f"tenants/{done.output_file_id}"}
        stored = s3.get_object(Bucket="zl-files", Key=f"tenants/{done.output_file_id}")
        read = oc.files.content(done.output_file_id).read()
        assert stored["Body"].read() == read and len(read.splitlines()) == 4
        assert oc.files.delete(made.id).deleted
        assert keys() == {f"tenants/{done.output_file_id}"}
    finally:
        server.stop()
