"""The request path behind the gateway: tokenfix, length-aware routing, /v1/chunks."""

from __future__ import annotations

import json
import pydoc
from collections.abc import Iterator

from zerolayer.chunker.service import Chunker
from zerolayer.config import ShortRequests
from zerolayer.engines.fake import FakeEngine

from tests.gateway.conftest import SCRIPT, Gateway, GatewayFactory, plan
from tests.gateway.test_api import CHAT, assert_openai_error

DOC = pydoc.render_doc("json", renderer=pydoc.plaintext)


def test_invalid_utf8_is_400_naming_utf8(gateway: Gateway) -> None:
    raw = b'{"model": "smollm2-135m", "messages": [{"role": "user", "content": "\xff"}]}'
    r = gateway.client.post(
        "/v1/chat/completions",
        headers={**gateway.auth, "content-type": "application/json"},
        content=raw,
    )
    err = assert_openai_error(r, 400, "invalid_request_error")
    assert "UTF-8" in err["message"]


def test_control_characters_and_lone_surrogates_are_cleaned_not_500(gateway: Gateway) -> None:
    raw = (
        '{"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi\\u0000 \\ud800!"}]}'
    )
    r = gateway.client.post(
        "/v1/chat/completions",
        headers={**gateway.auth, "content-type": "application/json"},
        content=raw.encode(),
    )
    assert r.status_code == 200, r.text
    clean = gateway.prompts.chat([{"role": "user", "content": "Hi !"}])
    assert r.json()["usage"]["prompt_tokens"] == len(clean)


def test_short_prompts_go_to_the_short_group(make_gateway: GatewayFactory) -> None:
    long_engine, short_engine = FakeEngine(SCRIPT), FakeEngine(["short"])
    gw = make_gateway(
        engine=long_engine,
        short_engine=short_engine,
        gateway={"default_max_tokens": 4},
    )
    assert gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT).status_code == 200
    assert short_engine.requests == 0  # no short group configured: everything goes to the tier

    base = gw.app.state.pipeline.config.models["smollm2-135m"].tiers["baseline"]
    tier = base.model_copy(update={"short_requests": ShortRequests(max_prompt_tokens=100)})
    gw = make_gateway(engine=long_engine, short_engine=short_engine, tiers={"baseline": tier})
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=CHAT)
    assert r.json()["choices"][0]["message"]["content"] == "short"
    assert r.json()["model"] == "smollm2-135m:baseline"  # the same tier, another group
    long = {**CHAT, "messages": [{"role": "user", "content": "word " * 200}]}
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=long)
    assert r.json()["choices"][0]["message"]["content"] == "".join(SCRIPT)


def test_chunks_json(gateway: Gateway, chunker: Chunker) -> None:
    body = {"model": "smollm2-135m", "input": [DOC, "short text"], "chunk_tokens": 200}
    r = gateway.client.post("/v1/chunks", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    first = [c for c in out["data"] if c["input_index"] == 0]
    assert "".join(c["text"] for c in first) == DOC
    assert all(c["tokens"] <= 200 for c in out["data"])
    assert [c["index"] for c in out["data"]] == list(range(len(out["data"])))
    assert out["data"][-1]["text"] == "short text" and out["data"][-1]["input_index"] == 1
    tok = chunker.tokenizers["smollm2-135m"]
    assert out["usage"]["prompt_tokens"] == sum(
        len(tok(c["text"], add_special_tokens=False)["input_ids"]) for c in out["data"]
    )


def test_chunks_streamed_text_matches_json(gateway: Gateway) -> None:
    def pieces() -> Iterator[bytes]:
        data = DOC.encode()
        for i in range(0, len(data), 1000):  # cuts through multi-byte characters too
            yield data[i : i + 1000]

    r = gateway.client.post(
        "/v1/chunks?model=smollm2-135m&chunk_tokens=200",
        headers={**gateway.auth, "content-type": "text/plain"},
        content=pieces(),
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert lines[-1]["object"] == "chunks.done" and lines[-1]["chars"] == len(DOC)
    streamed = [(c["start_char"], c["end_char"], c["tokens"]) for c in lines[:-1]]
    body = {"model": "smollm2-135m", "input": DOC, "chunk_tokens": 200}
    whole = gateway.client.post("/v1/chunks", headers=gateway.auth, json=body).json()["data"]
    assert streamed == [(c["start_char"], c["end_char"], c["tokens"]) for c in whole]


def test_chunks_errors(gateway: Gateway) -> None:
    post = gateway.client.post
    bad = {"model": "smollm2-135m", "input": "x", "chunk_tokens": 16, "overlap_tokens": 16}
    err = assert_openai_error(post("/v1/chunks", headers=gateway.auth, json=bad), 400)
    assert "overlap_tokens" in err["message"]
    assert_openai_error(
        post("/v1/chunks", headers=gateway.auth, json={"model": "x", "input": "y"}), 404
    )
    assert_openai_error(post("/v1/chunks", json={"model": "smollm2-135m", "input": "y"}), 401)
    text = {**gateway.auth, "content-type": "text/plain"}
    assert_openai_error(post("/v1/chunks", headers=text, content=b"abc"), 400)  # no ?model=
    assert_openai_error(
        post("/v1/chunks?model=smollm2-135m&chunk_tokens=two", headers=text, content=b"a"), 400
    )


def test_long_prompt_is_summarised_map_reduce_when_asked(make_gateway: GatewayFactory) -> None:
    engine = FakeEngine(SCRIPT)
    gw = make_gateway(
        plans={"calls": plan(requests_per_minute=200)},
        key_plan="calls",
        engine=engine,
        chunker={"max_summary_chunks": 60},
    )
    long = {
        **CHAT,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": DOC * 3 + "\nWhat is this module for?"},
        ],
        "long_prompt": "summarize",
        "max_tokens": 16,
    }
    r = gw.client.post("/v1/chat/completions", headers=gw.auth, json=long)
    assert r.status_code == 200, r.text
    out = r.json()
    job = out["zerolayer_summary"]
    assert job["chunks"] >= 3 and job["calls"] >= job["chunks"] and job["rounds"] >= 1
    assert engine.requests == job["calls"] + 1  # every map call, then the answer
    assert out["choices"][0]["message"]["content"] == "".join(SCRIPT)
    # usage is what was billed: the map calls' tokens plus the answer's
    assert out["usage"]["prompt_tokens"] > job["prompt_tokens"] > 0
    assert out["usage"]["completion_tokens"] == job["completion_tokens"] + len(SCRIPT)
    # every map call counted as a request of the minute, settled to the calls made
    gw.settled()
    minute = int(gw.clock() // 60)
    counted = gw.redis.get(f"zl:rl:{{{gw.key_id}}}:req:{minute}")
    assert int(counted) == 1 + job["calls"]


def test_a_summary_is_refused_when_its_calls_do_not_fit_the_minute(
    make_gateway: GatewayFactory,
) -> None:
    engine = FakeEngine(SCRIPT)
    gw = make_gateway(
        plans={"few": plan(requests_per_minute=20)},
        key_plan="few",
        engine=engine,
        chunker={"max_summary_chunks": 60},
    )
    long = {**CHAT, "messages": [{"role": "user", "content": DOC * 3}], "long_prompt": "summarize"}
    err = assert_openai_error(
        gw.client.post("/v1/chat/completions", headers=gw.auth, json=long), 429
    )
    assert err["code"] == "requests_per_minute"
    assert engine.requests == 0  # no map call ran


def test_a_message_too_long_to_summarise_is_400(gateway: Gateway) -> None:
    long = {**CHAT, "messages": [{"role": "user", "content": DOC * 3}], "long_prompt": "summarize"}
    err = assert_openai_error(
        gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=long), 400
    )
    assert "too long to summarise" in err["message"] and "at most 16" in err["message"]
    assert gateway.engine.requests == 0


def test_long_prompt_without_opt_in_is_400_with_both_numbers(gateway: Gateway) -> None:
    long = {**CHAT, "messages": [{"role": "user", "content": DOC * 3}]}
    err = assert_openai_error(
        gateway.client.post("/v1/chat/completions", headers=gateway.auth, json=long), 400
    )
    assert err["code"] == "context_length_exceeded" and "2048" in err["message"]
    assert gateway.engine.requests == 0
