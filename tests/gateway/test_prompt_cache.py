"""What the gateway tells a tier so the prefix cache pays: every request's cache salt is its
tenant, and a conversation, a previous_response_id chain or a prompt_cache_key gives each of its
requests the same affinity key (the router sends them to one replica); nothing else does."""

from __future__ import annotations

from typing import Any

from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, GatewayFactory
from tests.gateway.test_api import CHAT

MODEL = CHAT["model"]


def _respond(gw: Any, **body: Any) -> str:
    r = gw.client.post("/v1/responses", headers=gw.auth, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def test_related_requests_share_an_affinity_key_and_the_tenant_salts_the_cache(
    make_gateway: GatewayFactory,
) -> None:
    engine = FakeEngine(SCRIPT)
    gw = make_gateway(engine=engine)
    tenant = gw.record().owner
    # a previous_response_id chain: every turn keyed by its first response
    r1 = _respond(gw, input="one")
    r2 = _respond(gw, input="two", previous_response_id=r1)
    _respond(gw, input="three", previous_response_id=r2)
    # a conversation: keyed by it
    conv = gw.client.post("/v1/conversations", headers=gw.auth, json={}).json()["id"]
    for text in ("four", "five"):
        _respond(gw, input=text, conversation=conv)
    # a prompt_cache_key, on both APIs; and a chat request without one
    _respond(gw, input="six", prompt_cache_key="shared-system-prompt")
    for extra in ({"prompt_cache_key": "shared-system-prompt"}, {}):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, **extra})
        assert r.status_code == 200, r.text
    keys = [s.affinity for s in engine.specs]
    chain = f"{tenant}\0resp:{r1}"
    assert keys[:3] == [chain] * 3
    assert keys[3:5] == [f"{tenant}\0conv:{conv}"] * 2
    assert keys[5:7] == [f"{tenant}\0key:shared-system-prompt"] * 2
    assert keys[7] == ""
    assert {s.cache_salt for s in engine.specs} == {tenant}


def test_another_tenants_requests_never_share_its_salt_or_keys(
    make_gateway: GatewayFactory,
) -> None:
    engine = FakeEngine(SCRIPT)
    first = make_gateway(engine=engine)
    second = make_gateway(engine=engine, key=None)
    assert first.record().owner != second.record().owner
    for gw in (first, second):
        _respond(gw, input="same words", prompt_cache_key="k")
    a, b = engine.specs[-2:]
    assert a.prompt_token_ids == b.prompt_token_ids  # the same prompt...
    assert a.cache_salt != b.cache_salt and a.affinity != b.affinity  # ...kept apart
