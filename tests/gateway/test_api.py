"""Gateway behaviour over the fake engine: routes, formats, streaming, errors."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Any

import pytest
from zerolayer.config import PlatformConfig

from tests.gateway.conftest import SCRIPT, Gateway, GatewayFactory

CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Capital of France?"}]}


def sse_events(text: str) -> list[Any]:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def assert_openai_error(resp: Any, status: int, etype: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert err["message"] and isinstance(err["message"], str)
    assert {"type", "param", "code"} <= set(err)
    if etype:
        assert err["type"] == etype
    return err


def test_models_lists_bare_and_tier_ids(gateway: Gateway) -> None:
    r = gateway.client.get("/v1/models", headers=gateway.auth)
    assert r.status_code == 200
    ids = [m["id"] for m in r.json()["data"]]
    assert "smollm2-135m" in ids and "smollm2-135m:baseline" in ids
    assert r.json()["object"] == "list"
    tier = next(m for m in r.json()["data"] if m["id"] == "smollm2-135m:baseline")
    assert tier["tier_card"]["tier"] == "baseline" and tier["artifact"] == "dense"


def test_models_carry_what_aggregators_ask_for_at_the_callers_prices(
    make_gateway: GatewayFactory, base_config: PlatformConfig
) -> None:
    from zerolayer.gateway.catalog import SUPPORTED_PARAMETERS
    from zerolayer.gateway.schemas import NOT_SERVED, ChatCompletionRequest, CompletionRequest

    gateway = make_gateway(key_plan="free")
    r = gateway.client.get("/v1/models", headers=gateway.auth)
    models = {m["id"]: m for m in r.json()["data"]}
    plan = base_config.plans["free"]
    assert set(plan.tiers) != set(base_config.models["smollm2-135m"].tiers)  # some outside it
    for tier in base_config.models["smollm2-135m"].tiers:
        m = models[f"smollm2-135m:{tier}"]
        assert m["context_length"] == base_config.models["smollm2-135m"].max_model_len
        assert m["max_output_tokens"] == m["context_length"] - 1
        assert m["in_plan"] == (tier in plan.tiers)
        if tier not in plan.tiers:
            assert m["pricing"] is None
            continue
        price = plan.prices[tier]
        assert Decimal(m["pricing"]["prompt"]) * 1000 == price.prompt_per_1k
        assert Decimal(m["pricing"]["completion"]) * 1000 == price.completion_per_1k
        assert Decimal(m["pricing"]["prompt_per_1k"]) == price.prompt_per_1k
        assert m["pricing"]["currency"] == "USD"
    bare = models["smollm2-135m"]
    assert bare["pricing"] == models[f"smollm2-135m:{plan.default_tier}"]["pricing"]
    # every listed parameter is one the request bodies take, and none they take is missing
    fields = set(ChatCompletionRequest.model_fields) | set(CompletionRequest.model_fields)
    unserved = set(NOT_SERVED) - {"stream_options"}  # (chat has its own stream_options)
    every_request = {"model", "messages", "prompt", "long_prompt", "n", *unserved}
    # structured_outputs: the aggregators' name of what response_format json_schema gives
    assert set(SUPPORTED_PARAMETERS) - {"structured_outputs"} == fields - every_request
    assert bare["supported_parameters"] == SUPPORTED_PARAMETERS


def test_chat_completion_returns_the_engine_text_and_exact_usage(gateway: Gateway) -> None:
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=CHAT)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    message = {"role": "assistant", "content": "".join(SCRIPT), "refusal": None}
    assert body["choices"][0]["message"] == message
    assert body["choices"][0]["finish_reason"] == "stop"
    prompt_tokens = len(gateway.prompts.chat(CHAT["messages"]))
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(SCRIPT),
        "total_tokens": prompt_tokens + len(SCRIPT),
        "prompt_tokens_details": {"cached_tokens": 0},  # the scripted engine caches nothing
    }
    assert r.headers["x-request-id"] == body["id"]


def test_max_tokens_cuts_with_finish_reason_length(gateway: Gateway) -> None:
    r = gateway.client.post(
        "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "max_tokens": 3}
    )
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "".join(SCRIPT[:3])
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3


def test_stream_matches_non_stream_and_ends_with_done(gateway: Gateway) -> None:
    full = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=CHAT).json()
    r = gateway.client.post(
        "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "stream": True}
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == full["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks), "no usage unless include_usage"


def test_include_usage_sends_a_last_usage_chunk(gateway: Gateway) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    events = sse_events(
        gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body).text
    )
    assert events[-1] == "[DONE]"
    last = events[-2]
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == len(SCRIPT)
    assert last["usage"]["prompt_tokens"] == len(gateway.prompts.chat(CHAT["messages"]))
    assert all(e["usage"] is None for e in events[:-2])


def test_completions_route_stream_and_non_stream(gateway: Gateway) -> None:
    body = {"model": "smollm2-135m:baseline", "prompt": "The capital of France is", "max_tokens": 5}
    r = gateway.client.post("/v1/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    full = r.json()
    assert full["object"] == "text_completion"
    assert full["choices"][0]["text"] == "".join(SCRIPT[:5])
    assert full["usage"]["prompt_tokens"] == len(gateway.prompts.completion(body["prompt"]))
    events = sse_events(
        gateway.client.post(
            "/v1/completions", headers=gateway.auth, json={**body, "stream": True}
        ).text
    )
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == full["choices"][0]["text"]
    assert events[-2]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer "},
        {"Authorization": "Basic abc"},
        {"Authorization": "Bearer zl-nope"},
    ],
)
def test_missing_or_unknown_key_is_401(gateway: Gateway, headers: dict[str, str]) -> None:
    r = gateway.client.post("/v1/chat/completions", headers=headers, json=CHAT)
    assert_openai_error(r, 401, "authentication_error")
    assert_openai_error(gateway.client.get("/v1/models", headers=headers), 401)


def test_unknown_model_and_tier_are_404(gateway: Gateway) -> None:
    for model in ("gpt-4", "smollm2-135m:turbo", ""):
        r = gateway.client.post(
            "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "model": model}
        )
        expected = 400 if model == "" else 404
        assert_openai_error(r, expected)


@pytest.mark.parametrize(
    "body",
    [
        {**CHAT, "messages": []},
        {**CHAT, "messages": "hi"},
        {**CHAT, "messages": [{"role": "wizard", "content": "hi"}]},
        {**CHAT, "max_tokens": -1},
        {**CHAT, "max_tokens": 0},
        {**CHAT, "max_tokens": 10**12},
        {**CHAT, "max_tokens": 1_000_000},  # in range, over the context
        {**CHAT, "messages": [{"role": "user", "content": 42}]},
        {**CHAT, "stream": "yes"},
        {**CHAT, "max_tokens": "ten"},
        {**CHAT, "temperature": 5},
        {**CHAT, "n": 9},
        {**CHAT, "stop": ["a", "b", "c", "d", "e"]},
        {"messages": CHAT["messages"]},
        [1, 2, 3],
    ],
)
def test_invalid_bodies_are_400_in_openai_format(gateway: Gateway, body: Any) -> None:
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    assert_openai_error(r, 400, "invalid_request_error")


@pytest.mark.parametrize("raw", [b"{bad json", b"\xff\xfe\x00garbage", b""])
def test_malformed_json_is_400(gateway: Gateway, raw: bytes) -> None:
    r = gateway.client.post(
        "/v1/chat/completions",
        headers={**gateway.auth, "content-type": "application/json"},
        content=raw,
    )
    assert_openai_error(r, 400, "invalid_request_error")


def test_huge_body_is_413(gateway: Gateway) -> None:
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=big)
    assert_openai_error(r, 413)
    ten_mb = b'{"model": "smollm2-135m", "prompt": "' + b"y" * (10 << 20) + b'"}'
    for route in ("/v1/completions", "/v1/chunks"):
        r = gateway.client.post(
            route, headers={**gateway.auth, "content-type": "application/json"}, content=ten_mb
        )
        assert_openai_error(r, 413)


def test_prompt_over_context_is_400_naming_both_numbers(gateway: Gateway) -> None:
    long = {**CHAT, "messages": [{"role": "user", "content": "word " * 3000}]}
    err = assert_openai_error(
        gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=long), 400
    )
    assert err["code"] == "context_length_exceeded" and "2048" in err["message"]
    err = assert_openai_error(
        gateway.client.post(
            "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "max_tokens": 5000}
        ),
        400,
    )
    assert "2048" in err["message"] and "5000" in err["message"]


def test_unknown_route_and_method_are_openai_errors(gateway: Gateway) -> None:
    assert_openai_error(gateway.client.get("/v1/nothing", headers=gateway.auth), 404)
    assert_openai_error(gateway.client.get("/v1/chat/completions", headers=gateway.auth), 405)


def test_unknown_fields_are_400s_as_openai_answers(gateway: Gateway) -> None:
    r = gateway.client.post(
        "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "logit_bias": {}, "whatever": 1}
    )
    err = assert_openai_error(r, 400)
    assert err["param"] == "whatever"
    assert err["message"] == "Unrecognized request argument supplied: whatever"
    # an assistant message sent back as the openai package dumps it: its extra fields are fine
    turn = {"role": "assistant", "content": "Hi", "refusal": None, "annotations": [], "audio": None}
    body = {**CHAT, "messages": [*CHAT["messages"], turn, {"role": "user", "content": "Hi"}]}
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text


def test_engine_failure_mid_stream_ends_with_error_frame_then_done(gateway: Gateway) -> None:
    gateway.engine.fail_after = 2
    events = sse_events(
        gateway.client.post(
            "/v1/chat/completions", headers=gateway.auth, json={**CHAT, "stream": True}
        ).text
    )
    assert events[-1] == "[DONE]"
    assert "error" in events[-2] and events[-2]["error"]["type"] == "server_error"
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-2])
    assert text == "".join(SCRIPT[:2])


def test_engine_failure_without_stream_is_503_not_500(gateway: Gateway) -> None:
    gateway.engine.fail_after = 0
    r = gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=CHAT)
    assert_openai_error(r, 503, "server_error")


def test_healthz(gateway: Gateway) -> None:
    r = gateway.client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_models_show_each_tiers_measured_speed(
    make_gateway: GatewayFactory, base_config: PlatformConfig
) -> None:
    from zerolayer.config import PlanConfig
    from zerolayer.engines.fake import FakeEngine

    # a tier of its own: the session's Redis holds other tests' counts of the usual tiers
    tier = f"speed{uuid.uuid4().hex[:8]}"
    tc = base_config.models["smollm2-135m"].tiers["baseline"]
    price = base_config.plans["pro"].prices["baseline"]
    plans = {"speed": PlanConfig(tiers=[tier], default_tier=tier, prices={tier: price})}
    gw = make_gateway(
        engines={tier: FakeEngine(SCRIPT, delay_s=0.01)},  # at most 100 tokens a second
        tiers={tier: tc},
        plans=plans,
        key_plan="speed",
    )
    tid = f"smollm2-135m:{tier}"

    def speed() -> dict[str, Any]:
        listed = gw.client.get("/v1/models", headers=gw.auth).json()["data"]
        return next(m for m in listed if m["id"] == tid)["speed"]

    assert speed() == {"tokens_per_s": None, "ttft_s": None, "requests": 0}
    for _ in range(2):
        r = gw.client.post("/v1/chat/completions", headers=gw.auth, json={**CHAT, "model": tid})
        assert r.status_code == 200, r.text
    gw.settled()
    got = speed()
    assert got["requests"] == 2 and 0 < got["tokens_per_s"] <= 100 * 1.01
    assert got["ttft_s"] is not None and got["ttft_s"] >= 0


@pytest.mark.parametrize(
    ("card", "share", "of"),
    [
        ({"method": "dense"}, 0.0, "dense"),
        ({"mlp_flops_removed": 0.31, "mlp_params_removed": 0.3}, 0.31, "MLP FLOPs"),
        ({"weights_24": 0.6, "mlp_weights_24": 0.8}, 0.3, "2:4"),
        ({"activation_sparsity": 0.42}, 0.42, "per token"),
    ],
)
def test_compute_removed_reads_each_artifacts_card(card: Any, share: float, of: str) -> None:
    from zerolayer.gateway.catalog import compute_removed

    got = compute_removed(card)
    assert got is not None and got["share"] == share and of in got["of"]
    assert compute_removed(None) is None
