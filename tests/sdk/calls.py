"""Every SDK method once, with assertions on what each returns: run against the gateway over
in-process replicas (tests/sdk) and against the started platform (tests/integration).
`openai_compatible` uses only what the official openai package has too, with the same
arguments, so the same function checks both clients."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import zerolayer_sdk as zl

__all__ = ["openai_compatible", "zerolayer_only", "async_calls", "run_example", "PARIS"]

EXAMPLES = Path(__file__).resolve().parents[2] / "sdk" / "examples"

PARIS = [{"role": "user", "content": "What is the capital of France?"}]


def _status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except Exception as exc:  # zl.APIStatusError or openai.APIStatusError
        return int(exc.status_code)  # type: ignore[attr-defined]
    return 200


def openai_compatible(client: Any, model: str) -> dict[str, Any]:
    """Calls both zerolayer_sdk.Client and openai.OpenAI have; what they gave."""
    chat = client.chat.completions.create(model=model, messages=PARIS, max_tokens=8, temperature=0)
    assert chat.choices[0].message.content and chat.usage.total_tokens > chat.usage.prompt_tokens
    assert chat.model.startswith("smollm2-135m:")  # the tier that answered
    pieces = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=model, messages=PARIS, max_tokens=8, temperature=0, stream=True
        )
        if c.choices
    ]
    assert "".join(pieces) == chat.choices[0].message.content  # temperature 0: the same
    text = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4)
    assert text.choices[0].text and text.usage.completion_tokens <= 4

    first = client.responses.create(
        model=model, input="What is the capital of France?", max_output_tokens=8
    )
    assert first.status in ("completed", "incomplete") and first.output_text
    again = client.responses.retrieve(first.id)
    assert (again.id, again.output_text) == (first.id, first.output_text)
    given = client.responses.input_items.list(first.id)
    assert [i.content[0].text for i in given.data] == ["What is the capital of France?"]
    follow = client.responses.create(
        model=model, input="And of Italy?", previous_response_id=first.id, max_output_tokens=8
    )
    assert follow.previous_response_id == first.id
    assert follow.usage.input_tokens > first.usage.input_tokens  # the history was read
    events = list(
        client.responses.create(model=model, input="Hi!", max_output_tokens=4, stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in (
        "response.completed",
        "response.incomplete",
    )
    assert "response.output_text.delta" in kinds

    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Hi!"}], metadata={"topic": "a"}
    )
    assert client.conversations.retrieve(conv.id).metadata == {"topic": "a"}
    assert client.conversations.update(conv.id, metadata={"topic": "b"}).metadata == {"topic": "b"}
    added = client.conversations.items.create(
        conv.id, items=[{"type": "message", "role": "user", "content": "Say hello."}]
    )
    item = client.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    assert item.id == added.data[0].id and item.content[0].text == "Say hello."
    answer = client.responses.create(
        model=model, input="Thanks.", conversation=conv.id, max_output_tokens=4
    )
    listed = [i.id for i in client.conversations.items.list(conv.id, order="asc")]
    assert len(listed) == 4 and listed[1] == item.id and listed[-1] == answer.output[0].id
    client.conversations.items.delete(item.id, conversation_id=conv.id)
    assert item.id not in [i.id for i in client.conversations.items.list(conv.id).data]
    assert client.conversations.delete(conv.id).deleted
    assert _status_of(lambda: client.conversations.retrieve(conv.id)) == 404

    client.responses.delete(first.id)  # the openai package returns None, the SDK the deletion
    assert _status_of(lambda: client.responses.retrieve(first.id)) == 404
    ids = [m.id for m in client.models.list().data]
    assert "smollm2-135m" in ids and "smollm2-135m:sparse24" in ids
    return {"chat": chat, "response": follow}


def zerolayer_only(
    client: zl.Client, model: str, tmp: Path, billed: Callable[[zl.Client], None]
) -> dict[str, Any]:
    """The SDK's methods the openai package does not have (client needs an admin key too);
    billed(customer) returns once the customer's one request is counted into its usage."""
    raw = client.with_raw_response.chat.completions.create(
        model=model, messages=PARIS, max_tokens=4
    )
    assert raw.status_code == 200 and raw.request_id and raw.request_id.startswith("chatcmpl-")
    limits = raw.ratelimit
    assert limits.limit_requests and limits.remaining_requests is not None
    assert limits.remaining_requests < limits.limit_requests and limits.reset_requests_s
    assert raw.parse().id == raw.request_id

    with client.chat.completions.create(
        model=model, messages=PARIS, max_tokens=6, stream=True
    ) as stream:
        text = "".join(stream.text_stream)
    final = stream.get_final_response()
    assert final.text == text and final.usage is not None and final.usage.completion_tokens > 0
    with client.responses.create(model=model, input="Hi!", max_output_tokens=4, stream=True) as rs:
        said = "".join(rs.text_stream)
    assert rs.get_final_response().output_text == said
    listed = {m.id: m for m in client.models.list().data}[model]
    assert isinstance(listed.pricing, zl.types.Pricing) and listed.pricing.completion_per_1k
    assert listed.pricing.completion_per_1m and listed.pricing.basis in (
        "hand",
        "auto",
        "unmeasured",
    )
    assert listed.context_length and listed.max_output_tokens == listed.context_length - 1
    assert "temperature" in (listed.supported_parameters or [])

    doc = "Ray Serve routes requests to replicas. " * 60
    whole = client.chunks.create(model=model, input=doc, chunk_tokens=64)
    assert "".join(c.text for c in whole.data) == doc and all(c.tokens <= 64 for c in whole.data)
    path = tmp / "doc.txt"
    path.write_text(doc)
    from_file = client.chunks.create(model=model, file=path, chunk_tokens=64)
    pieces = (doc[i : i + 100] for i in range(0, len(doc), 100))
    from_text = client.chunks.create(model=model, text=pieces, chunk_tokens=64)
    assert [c.text for c in from_file.data] == [c.text for c in from_text.data]
    assert "".join(c.text for c in from_file.data) == doc and from_file.usage is not None

    key = client.admin.keys.create(plan="free", name="sdk test")
    assert key.key.startswith("zl-") and key.plan == "free" and key.tenant
    assert key.key_id in [k.key_id for k in client.admin.keys.list()]
    assert client.admin.keys.set_plan(key.key_id, "pro").plan == "pro"
    assert client.admin.keys.update(key.key_id, sample_traffic=True).sample_traffic is True
    assert client.admin.keys.update(key.key_id, sample_traffic=None).sample_traffic is None
    assert client.admin.keys.retrieve(key.key_id).plan == "pro"
    customer = client.with_options(api_key=key.key)
    conv = customer.conversations.create(items=[{"role": "user", "content": "Hi"}])
    customer.chat.completions.create(model=model, messages=PARIS, max_tokens=4)
    tenant = client.admin.tenants.retrieve(key.tenant)
    assert [o.id for o in tenant.objects.data] == [conv.id] and tenant.keys[0].key_id == key.key_id

    billed(customer)
    month = time.strftime("%Y-%m", time.gmtime())
    mine = customer.usage.retrieve(group_by=["tier"])
    assert mine.totals.requests == 1 and mine.data[0].tier and mine.totals.cost_usd > 0
    assert client.admin.tenants.usage(key.tenant).totals == mine.totals
    assert [i.month for i in customer.invoices.list()] == [month]
    invoice = customer.invoices.retrieve(month)
    assert invoice.status == "open" and invoice.lines[0].requests == 1
    assert invoice.subtotal_usd == mine.totals.cost_usd
    assert client.admin.tenants.invoice(key.tenant, month).id == invoice.id
    assert [i.month for i in client.admin.tenants.invoices(key.tenant)] == [month]
    events = customer.invoices.export(month, format="csv").splitlines()
    assert len(events) == 2 and events[0].startswith("id,")
    assert client.admin.tenants.export(key.tenant, month).count("\n") == 1
    account = customer.account.retrieve()
    assert account.key.key_id == key.key_id and account.plan.name == "pro" == account.key.plan
    assert set(account.plan.prices) == set(account.plan.tiers) and account.month == month
    assert account.plan.margin and account.plan.margin > 1  # what auto prices add to cost
    assert account.spent_usd > 0
    logged = list(customer.requests.list())
    assert [e.key_id for e in logged] == [key.key_id] and logged[0].cost_usd == mine.totals.cost_usd
    csv_lines = customer.requests.export(days=1).splitlines()
    assert csv_lines[0].startswith("id,time,") and csv_lines[1].startswith(logged[0].id + ",")
    own = list(customer.keys.list())
    assert [(k.key_id, k.current) for k in own] == [(key.key_id, True)]
    assert customer.keys.update(key.key_id, name="renamed").name == "renamed"
    assert client.admin.keys.update(key.key_id, name="by the operator").name == "by the operator"
    summary = {t.tenant: t for t in client.admin.tenants.list()}[key.tenant]
    assert summary.keys == summary.active_keys == 1 and summary.plans == ["pro"]
    assert summary.month_total_usd == invoice.total_usd
    ops = client.admin.operations.retrieve()
    assert sum(t.requests for t in ops.tiers) >= 1 and all(t.state for t in ops.tiers)
    assert client.admin.tenants.delete_objects(key.tenant).deleted["conversation"] == 1
    assert client.admin.keys.revoke(key.key_id).revoked
    try:
        customer.models.list()
        raise AssertionError("a revoked key was let in")
    except zl.AuthenticationError as exc:
        assert exc.status_code == 401 and exc.code == "invalid_api_key"
    return {"usage": mine, "invoice": invoice}


async def _texts(doc: str) -> AsyncIterator[str]:
    for i in range(0, len(doc), 50):
        yield doc[i : i + 50]


async def async_calls(client: zl.AsyncClient, model: str) -> None:
    """The async client's methods (the same as the sync one's), a call of each kind."""
    chat = await client.chat.completions.create(model=model, messages=PARIS, max_tokens=6)
    assert chat.text
    stream = await client.chat.completions.create(
        model=model, messages=PARIS, max_tokens=6, stream=True
    )
    async with stream:
        pieces = [t async for t in stream.text_stream]
    assert "".join(pieces) == (await stream.get_final_response()).text
    first = await client.responses.create(model=model, input="Hi!", max_output_tokens=4)
    rs = await client.responses.create(
        model=model, input="Again", previous_response_id=first.id, max_output_tokens=4, stream=True
    )
    assert (await rs.get_final_response()).previous_response_id == first.id
    conv = await client.conversations.create(
        items=[{"role": "user", "content": f"{i}"} for i in range(5)]
    )
    page = await client.conversations.items.list(conv.id, limit=2, order="asc")
    assert len(page.data) == 2 and page.has_next_page()
    assert [
        i.text async for i in client.conversations.items.list(conv.id, limit=2, order="asc")
    ] == [str(i) for i in range(5)]
    doc = "Async chunks. " * 40
    cut = await client.chunks.create(model=model, text=_texts(doc), chunk_tokens=32)
    assert "".join(c.text for c in cut.data) == doc
    assert [m.id async for m in client.models.list()]
    assert (await client.usage.retrieve()).object == "usage"
    assert (await client.account.retrieve()).key.key_id == [k async for k in client.keys.list()][
        0
    ].key_id
    assert await client.conversations.delete(conv.id)


def run_example(
    name: str, url: str, key: str, *args: str, stdin: str = "", cache: Path | None = None
) -> str:
    """The example's output. With `cache`: the key is not given, the example finds it where
    `./zl up` keeps it (<cache>/dev-key), as on a developer's machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZEROLAYER_")}
    env["ZEROLAYER_BASE_URL"] = url  # the gateway's own port, not ./zl up's 8000
    if cache is None:
        env["ZEROLAYER_API_KEY"] = key
    else:
        (cache / "dev-key").write_text(key + "\n")
        env["ZEROLAYER_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
