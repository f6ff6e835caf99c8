"""The conversation store on a real Redis server: tenants, order, cursors, locks, expiry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from zerolayer.conversations import Busy, ConversationStore, NotFound, input_items, new_id


@pytest.fixture
def run(redis_url: str) -> Iterator[Any]:
    """run(fn) runs fn(store, client) on a fresh loop with its own client."""

    def call(fn: Any, **kwargs: Any) -> Any:
        async def main() -> Any:
            client = aioredis.from_url(redis_url)
            try:
                return await fn(ConversationStore(client, **kwargs), client)
            finally:
                await client.aclose()

        return asyncio.run(main())

    yield call


def _resp(tenant_created: int = 1_700_000_000) -> dict[str, Any]:
    return {"id": new_id("resp"), "created_at": tenant_created, "store": True}


def test_another_tenant_sees_nothing_exactly_as_if_missing(run: Any) -> None:
    async def body(store: ConversationStore, _: Any) -> None:
        cid = new_id("conv")
        await store.create_conversation("t-a", cid, {"k": "v"}, input_items("hi"))
        obj = _resp()
        await store.save_response("t-a", obj, [])
        for call in (
            store.conversation("t-b", cid),
            store.items("t-b", cid),
            store.add_items("t-b", cid, input_items("x")),
            store.delete_conversation("t-b", cid),
            store.response("t-b", obj["id"]),
            store.delete_response("t-b", obj["id"]),
            store.conversation("t-a", new_id("conv")),
        ):
            with pytest.raises(NotFound):
                await call
        assert (await store.conversation("t-a", cid))["metadata"] == {"k": "v"}
        assert len(await store.items("t-a", cid)) == 1  # t-b's add changed nothing

    run(body)


def test_items_keep_their_order_and_page_by_cursor(run: Any) -> None:
    async def body(store: ConversationStore, _: Any) -> None:
        cid = new_id("conv")
        items = input_items([{"role": "user", "content": str(n)} for n in range(7)])
        await store.create_conversation("t", cid, {}, items[:3])
        await store.add_items("t", cid, items[3:])
        ids = [i["id"] for i in items]
        assert [i["id"] for i in await store.items("t", cid)] == ids
        got, after = [], None
        while True:
            p = await store.item_page("t", cid, 3, "asc", after)
            got += [i["id"] for i in p.data]
            if not p.has_more:
                break
            after = p.data[-1]["id"]
        assert got == ids
        p = await store.item_page("t", cid, 2, "desc", ids[4])
        assert [i["id"] for i in p.data] == [ids[3], ids[2]] and p.has_more
        await store.delete_item("t", cid, ids[3])
        assert [i["id"] for i in await store.items("t", cid)] == ids[:3] + ids[4:]
        with pytest.raises(NotFound):
            await store.item("t", cid, ids[3])

    run(body)


def test_a_response_adds_items_only_while_it_holds_the_conversation(run: Any) -> None:
    async def body(store: ConversationStore, client: Any) -> None:
        cid = new_id("conv")
        await store.create_conversation("t", cid, {}, [])
        await store.lock("t", cid, "resp_a", 60_000)
        with pytest.raises(Busy):
            await store.lock("t", cid, "resp_b", 60_000)
        with pytest.raises(Busy):  # b does not hold it: nothing of b is added
            await store.add_items("t", cid, input_items("from b"), lock="resp_b")
        await store.add_items("t", cid, input_items("from a"), lock="resp_a")
        assert await client.exists(f"zl:conv:{{{cid}}}:lock") == 0  # released by the same write
        assert await store.renew(cid, "resp_a", 60_000) is False
        await store.lock("t", cid, "resp_b", 60_000)  # free again
        await store.unlock(cid, "resp_a")  # not a's: stays b's
        assert await store.renew(cid, "resp_b", 60_000) is True
        assert [i["content"][0]["text"] for i in await store.items("t", cid)] == ["from a"]

    run(body)


def test_responses_expire_and_conversations_do_not_unless_configured(run: Any) -> None:
    async def body(store: ConversationStore, client: Any) -> None:
        obj = _resp()
        await store.save_response("t", obj, [])
        ttl = await client.pttl(f"zl:resp:{{{obj['id']}}}")
        assert 3500 * 1000 < ttl <= 3600 * 1000
        cid = new_id("conv")
        await store.create_conversation("t", cid, {}, input_items("hi"))
        assert await client.ttl(f"zl:conv:{{{cid}}}") == -1

    run(body, response_ttl_s=3600)

    async def timed(store: ConversationStore, client: Any) -> None:
        cid = new_id("conv")
        await store.create_conversation("t", cid, {}, input_items("hi"))
        for suffix in ("", ":order", ":items"):
            assert 0 < await client.ttl(f"zl:conv:{{{cid}}}{suffix}") <= 120
        # replacing its metadata is a change: every part lives its whole time again
        for suffix in ("", ":order", ":items"):
            await client.expire(f"zl:conv:{{{cid}}}{suffix}", 5)
        await store.update_conversation("t", cid, {"topic": "x"})
        for suffix in ("", ":order", ":items"):
            assert 60 < await client.ttl(f"zl:conv:{{{cid}}}{suffix}") <= 120

    run(timed, conversation_ttl_s=120)


def test_a_tenant_lists_and_purges_what_it_stored(run: Any) -> None:
    async def body(store: ConversationStore, client: Any) -> None:
        tenant = new_id("tenant")
        cid = new_id("conv")
        await store.create_conversation(tenant, cid, {}, input_items("hi"))
        kept, gone = _resp(), _resp()
        await store.save_response(tenant, kept, [])
        await store.save_response(tenant, gone, [])
        await client.delete(f"zl:resp:{{{gone['id']}}}")  # as if it expired
        objects = await store.tenant_objects(tenant)
        assert {(o["object"], o["id"]) for o in objects} == {
            ("conversation", cid),
            ("response", kept["id"]),
        }
        assert await store.purge_tenant(tenant) == {"response": 1, "conversation": 1}
        assert await store.tenant_objects(tenant) == []
        assert [k async for k in client.scan_iter(f"zl:conv:{{{cid}}}*")] == []

    run(body)


def test_a_response_stored_with_its_whole_context_is_still_continued(run: Any) -> None:
    async def body(store: ConversationStore, client: Any) -> None:
        obj = _resp()
        old = [{"id": "msg_1", "role": "user", "content": [{"type": "input_text", "text": "a"}]}]
        # the layout before lineages: the history is in the response's own 'context'
        await client.hset(
            f"zl:resp:{{{obj['id']}}}",
            mapping={
                "tenant": "t",
                "obj": json.dumps(obj),
                "input": "[]",
                "context": json.dumps(old),
            },
        )
        history, lineage = await store.context("t", obj["id"])
        assert history == old and lineage.chain == (obj["id"],)

    run(body)
