"""End to end: HTTP -> Ray Serve gateway -> baseline replica -> vLLM with SmolLM2, real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest
from zerolayer.serve.launcher import Platform
from zerolayer.tokenfix.prompt import PromptBuilder

from tests.conftest import clean_env, free_port

pytestmark = pytest.mark.integration

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


def post(p: Platform, path: str, body: Any, key: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or p.key}"}
    return httpx.post(p.base_url + path, json=body, headers=headers, timeout=120, **kw)


def sse_text(resp: httpx.Response, chat: bool) -> tuple[str, list[Any]]:
    events = [
        block[len("data: ") :] for block in resp.text.split("\n\n") if block.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    if chat:
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in parsed if c["choices"]
        )
    else:
        text = "".join(c["choices"][0]["text"] for c in parsed if c["choices"])
    return text, parsed


def test_capital_of_france_mentions_paris(platform: Platform) -> None:
    r = post(
        platform,
        "/chat/completions",
        {"model": "smollm2-135m", "messages": FRANCE, "temperature": 0, "max_tokens": 40},
    )
    assert r.status_code == 200, r.text
    assert "Paris" in r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize(
    ("route", "tier"), [("chat", "baseline"), ("completions", "baseline"), ("chat", "dynamic")]
)
def test_stream_and_non_stream_agree_at_temperature_0(
    platform: Platform, route: str, tier: str
) -> None:
    if route == "chat":
        path, body = (
            "/chat/completions",
            {"messages": [{"role": "user", "content": "Name three colours."}]},
        )
    else:
        path, body = "/completions", {"prompt": "Once upon a time, in a small village,"}
    body = {**body, "model": f"smollm2-135m:{tier}", "temperature": 0, "max_tokens": 32}
    full = post(platform, path, body).json()
    streamed, chunks = sse_text(post(platform, path, {**body, "stream": True}), route == "chat")
    choice = full["choices"][0]
    expected = choice["message"]["content"] if route == "chat" else choice["text"]
    assert streamed == expected and len(expected) > 0
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == choice["finish_reason"]


@pytest.mark.parametrize("model", ["smollm2-135m", "smollm2-135m:dynamic"])
def test_usage_equals_the_tokenizer_counts(
    platform: Platform, prompts: PromptBuilder, model: str
) -> None:
    body = {"model": model, "messages": FRANCE, "temperature": 0, "max_tokens": 5}
    usage = post(platform, "/chat/completions", body).json()["usage"]
    tok = prompts.tokenizer
    rendered = tok.apply_chat_template(FRANCE, add_generation_prompt=True, tokenize=False)
    n_prompt = len(tok.encode(rendered, add_special_tokens=False))
    assert usage["prompt_tokens"] == n_prompt
    assert usage["completion_tokens"] == 5
    assert usage["total_tokens"] == n_prompt + 5

    full = post(platform, "/chat/completions", {**body, "max_tokens": 64}).json()
    finish = full["choices"][0]["finish_reason"]
    assert finish == "stop" or model != "smollm2-135m"  # a collapsed tier may talk on
    text = full["choices"][0]["message"]["content"]
    # The end-of-turn token the model emitted is counted, and carries no text.
    eot = 1 if finish == "stop" else 0
    assert full["usage"]["completion_tokens"] == len(prompts.tokenizer.encode(text)) + eot

    streamed = post(
        platform,
        "/chat/completions",
        {**body, "stream": True, "stream_options": {"include_usage": True}},
    )
    _, chunks = sse_text(streamed, chat=True)
    assert chunks[-1]["choices"] == []
    # the same prompt a third time: the same counts (a torch tier now reads some of it from
    # its prefix cache, which the details say)
    again = dict(chunks[-1]["usage"])
    cached = again.pop("prompt_tokens_details")["cached_tokens"]
    assert again == {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
    assert 0 <= cached < n_prompt and cached % 16 == 0


def test_the_official_openai_client_works(platform: Platform) -> None:
    client = openai.OpenAI(base_url=platform.base_url, api_key=platform.key, max_retries=0)
    ids = {m.id for m in client.models.list()}
    assert {"smollm2-135m", "smollm2-135m:baseline"} <= ids
    reply = client.chat.completions.create(
        model="smollm2-135m", messages=FRANCE, temperature=0, max_tokens=40
    )
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model="smollm2-135m",
        messages=FRANCE,
        temperature=0,
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage = [], None
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == reply.choices[0].message.content
    assert usage is not None and usage.completion_tokens == reply.usage.completion_tokens
    done = client.completions.create(
        model="smollm2-135m:baseline", prompt="1, 2, 3,", max_tokens=8, temperature=0
    )
    assert done.choices[0].text

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=platform.base_url, api_key="zl-wrong", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=FRANCE)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="smollm2-135m", messages=[])


def test_error_cases_over_http(platform: Platform) -> None:
    base = {"model": "smollm2-135m", "messages": FRANCE}
    cases = [
        (httpx.post(platform.base_url + "/chat/completions", json=base, timeout=30), 401),
        (post(platform, "/chat/completions", base, key="zl-unknown"), 401),
        (post(platform, "/chat/completions", {**base, "model": "llama-9000"}), 404),
        (post(platform, "/chat/completions", {**base, "max_tokens": -5}), 400),
        (post(platform, "/chat/completions", {**base, "messages": [{"role": "user"}]}), 400),
        (post(platform, "/completions", {"model": "smollm2-135m", "prompt": ""}), 400),
        (
            httpx.post(
                platform.base_url + "/chat/completions",
                content=b"{not json",
                headers={"Authorization": f"Bearer {platform.key}"},
                timeout=30,
            ),
            400,
        ),
    ]
    for resp, status in cases:
        assert resp.status_code == status, resp.text
        err = resp.json()["error"]
        assert err["message"] and err["type"]


def create_key(p: Platform, plan: str) -> subprocess.CompletedProcess[str]:
    """`zerolayer keys create --plan PLAN` against the platform's Redis."""
    return subprocess.run(
        [sys.executable, "-m", "zerolayer.cli", "keys", "create", "--plan", plan],
        # an operator's way to name a Redis: its URL and the file holding its password
        env=clean_env(
            REDIS_URL=(p.cfg.redis.url or "").replace("unix://", f"unix://{p.cfg.redis.username}@"),
            REDIS_PASSWORD_FILE=p.cfg.redis.password_file or "",
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_keys_create_cli_makes_a_working_key(platform: Platform) -> None:
    out = create_key(platform, "free")
    key = out.stdout.strip()
    assert key.startswith("zl-") and "not shown again" in out.stderr
    r = httpx.get(
        platform.base_url + "/models", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert r.status_code == 200


def test_healthz_reports_redis_and_tiers(platform: Platform) -> None:
    r = httpx.get(f"http://{platform.cfg.host}:{platform.cfg.port}/healthz", timeout=30)
    assert r.status_code == 200
    assert r.json()["tiers"] == {
        f"smollm2-135m:{t}": "ready" for t in ("baseline", "masked", "dynamic", "sparse24")
    }


@pytest.mark.parametrize("tier", ["baseline", "masked", "dynamic", "sparse24"])
def test_every_tier_answers_through_the_platform(platform: Platform, tier: str) -> None:
    body = {"model": f"smollm2-135m:{tier}", "messages": FRANCE, "temperature": 0}
    full = post(platform, "/chat/completions", {**body, "max_tokens": 24})
    assert full.status_code == 200, full.text
    reply = full.json()
    assert reply["model"] == f"smollm2-135m:{tier}"
    assert reply["choices"][0]["message"]["content"].strip()
    assert 0 < reply["usage"]["completion_tokens"] <= 24
    streamed, _ = sse_text(
        post(platform, "/chat/completions", {**body, "max_tokens": 24, "stream": True}), True
    )
    assert streamed == reply["choices"][0]["message"]["content"]


def test_models_list_tier_cards(platform: Platform) -> None:
    r = httpx.get(
        platform.base_url + "/models", headers={"Authorization": f"Bearer {platform.key}"}
    )
    cards = {m["id"]: m.get("tier_card") for m in r.json()["data"]}
    base, masked, sparse = (cards[f"smollm2-135m:{t}"] for t in ("baseline", "masked", "sparse24"))
    assert base["quality"]["ppl_delta"] == 0.0 and base["serving"]["engine"] == "vllm"
    assert masked["artifact"] == "masked" and masked["serving"]["engine"] == "vllm"
    assert "ppl_delta" in masked["quality"] and "intermediate_sizes" in masked
    assert sparse["serving"]["engine"] == "torch" and 0 < sparse["quality"]["ppl_delta"] <= 0.10
    # no 2:4 sparse tensor cores on a CPU: the card says the weights run dense
    assert sparse["serving"]["hardware_sparsity"] is False
    assert "run dense" in sparse["serving"]["sparsity_note"]
    assert sparse["serving"]["offload"] is False
    dynamic = cards["smollm2-135m:dynamic"]
    assert dynamic["artifact"] == "dynamic" and dynamic["serving"]["engine"] == "torch"
    assert dynamic["serving"]["latency_mode"] is True and "activation_sparsity" in dynamic
    states = {m["id"]: m.get("status") for m in r.json()["data"] if "tier" in m}
    assert set(states.values()) == {"ready"}


def test_a_plan_reaches_only_its_tiers(platform: Platform) -> None:
    key = create_key(platform, "free").stdout.strip()
    body = {"messages": FRANCE, "max_tokens": 4}
    denied = post(platform, "/chat/completions", {**body, "model": "smollm2-135m:baseline"}, key)
    assert denied.status_code == 403 and "plan 'free'" in denied.json()["error"]["message"]
    # a bare model id goes to the plan's default tier (masked for free)
    ok = post(platform, "/chat/completions", {**body, "model": "smollm2-135m"}, key)
    assert ok.status_code == 200 and ok.json()["model"] == "smollm2-135m:masked"


def test_status_command_shows_each_tier_that_answered(platform: Platform) -> None:
    for tier in ("baseline", "dynamic"):
        body = {"model": f"smollm2-135m:{tier}", "messages": FRANCE, "max_tokens": 6}
        assert post(platform, "/chat/completions", body).status_code == 200
    url = f"http://{platform.cfg.host}:{platform.cfg.port}"
    run = subprocess.run(
        [sys.executable, "-m", "zerolayer.cli", "status", "--url", url, "--json"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["health"]["status"] == "ok"
    for tier in ("baseline", "dynamic"):
        row = report["tiers"][f"smollm2-135m:{tier}"]
        assert row["requests"] >= 1 and row["completion_tokens"] >= 1, row
        assert row["ttft_p50_s"] is not None and row["ttft_p50_s"] > 0, row
    table = subprocess.run(
        [sys.executable, "-m", "zerolayer.cli", "status", "--url", url],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "smollm2-135m:dynamic" in table.stdout and "ttft p50/p95 ms" in table.stdout
    gone = subprocess.run(
        [
            sys.executable,
            "-m",
            "zerolayer.cli",
            "status",
            "--url",
            f"http://127.0.0.1:{free_port()}",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gone.returncode == 1 and "no platform answers" in gone.stderr


def _scrape(p: Platform) -> dict[str, dict[str, float]]:
    """Every per-tier sample on /metrics now (per-layer ones left out): {name: {tier: value}}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"http://{p.cfg.host}:{p.cfg.port}/metrics", timeout=30).text
    out: dict[str, dict[str, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "tier" in s.labels and "layer" not in s.labels:
                out.setdefault(s.name, {})[s.labels["tier"]] = s.value
    return out


def _gauges(p: Platform, name: str) -> dict[str, float]:
    """{tier: value} of one per-tier gauge on /metrics now."""
    return _scrape(p).get(name, {})


def test_live_signals_follow_the_input_and_the_canary_measures_every_tier(
    platform: Platform,
) -> None:
    import time
    from concurrent.futures import ThreadPoolExecutor

    from tests.integration.conftest import ADMIN_KEY, MONITORING

    tier = "smollm2-135m:dynamic"
    bucket = float(MONITORING["bucket_s"])

    def ask(text: str) -> None:
        body = {"model": tier, "prompt": text, "max_tokens": 4}
        assert post(platform, "/completions", body).status_code == 200

    # plain prose over several buckets: the skip rate's usual band
    prose = [
        "The history of the city begins in the twelfth century, when merchants settled there.",
        "Bees carry pollen from flower to flower, and many crops depend on them.",
        "The library opens at nine and closes at six; on Sundays it stays closed.",
        "A good map shows the roads, the rivers and the hills of a region.",
        "Winter came early that year, and the lake froze before the end of November.",
    ]
    for text in prose:
        ask(text)
        time.sleep(bucket)

    def gauge(name: str) -> float | None:
        return _gauges(platform, name).get(tier)

    deadline = time.monotonic() + 60
    while gauge("zerolayer_skip_rate_flag") is None:
        assert time.monotonic() < deadline, "no skip rate on /metrics"
        time.sleep(0.5)
    calm, high = gauge("zerolayer_skip_rate"), gauge("zerolayer_skip_rate_band_high")
    assert calm is not None and high is not None and calm <= high
    assert gauge("zerolayer_activation_drift_max_points") is not None
    assert gauge("zerolayer_live_sampled_tokens")
    # only a tier with thresholds has a skip rate
    assert "smollm2-135m:sparse24" not in _gauges(platform, "zerolayer_skip_rate")
    # degenerate input (a character repeated, as a raw prompt): the skip rate leaves its band
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(ask, ["q" * 300, ">" * 300]))
    deadline = time.monotonic() + 30
    while True:  # rate and flag from one scrape (the newest bucket may change between two)
        now = _scrape(platform)
        rate = now.get("zerolayer_skip_rate", {}).get(tier, 0.0)
        if now.get("zerolayer_skip_rate_flag", {}).get(tier) == 1:
            break
        assert time.monotonic() < deadline, (calm, high, rate)
        time.sleep(0.3)
    assert rate > high
    # the replicas' per-channel counts, as `collapse drift --live` reads them: every layer of
    # the dynamic artifact measured against the build's silence map, at its thresholds
    from zerolayer.artifacts import card_stamp
    from zerolayer.collapse.live_drift import compare_live, live_counts
    from zerolayer.collapse.silence_map import SilenceMap
    from zerolayer.replicas.artifacts import live_reference, tier_card
    from zerolayer.store.connect import sync_client

    cfg = platform.cfg
    stamp = card_stamp(cfg.artifact_dir("smollm2-135m", "dynamic"))
    client = sync_client(cfg.redis)
    deadline = time.monotonic() + 30
    while not all((counts := live_counts(client, tier, stamp))["rows"] or [0]):
        assert time.monotonic() < deadline, "no per-channel live counts in Redis"
        time.sleep(0.5)
    client.close()
    smap = SilenceMap.load(cfg.artifact_root("smollm2-135m") / "silence_map")
    ref = live_reference(cfg, "smollm2-135m", tier_card(cfg, "smollm2-135m", "dynamic"))
    report = compare_live(smap, counts, ref)
    assert report["thresholds_match"] is True and report["new"]["layers_measured"] == 30
    assert all(0 < s < 1 for s in report["sparsity_live"])
    # the canary, run now: every tier against the baseline, on /metrics and the tier cards
    url = f"http://{platform.cfg.host}:{platform.cfg.port}"
    run = httpx.post(
        f"{url}/admin/canary", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=300
    )
    assert run.status_code == 200, run.text
    result = run.json()["tiers"]
    for name in ("baseline", "masked", "dynamic", "sparse24"):
        row = result[f"smollm2-135m:{name}"]
        assert "kl" in row and row["positions"] > 100, row
    assert result["smollm2-135m:baseline"]["kl"] < 1e-6
    kl = _gauges(platform, "zerolayer_canary_kl")
    # /metrics writes six significant digits
    assert kl[tier] == pytest.approx(result[tier]["kl"], rel=1e-5) and kl[tier] > 0
    models = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {platform.key}"})
    cards = {m["id"]: m.get("tier_card") or {} for m in models.json()["data"]}
    assert cards[tier]["monitoring"]["canary"]["kl"] == pytest.approx(result[tier]["kl"])
    canary = cards[tier]["monitoring"]["canary"]
    assert canary["flag"] == (canary["kl"] > canary["limit"]) and canary["limit"] == 0.3
    # vLLM tiers report their prefix cache (queried tokens) instead of a probe
    body = {"model": "smollm2-135m:baseline", "messages": FRANCE, "max_tokens": 2}
    assert post(platform, "/chat/completions", body).status_code == 200
    deadline = time.monotonic() + 30
    while "smollm2-135m:baseline" not in _gauges(platform, "zerolayer_prefix_cache_hit_rate"):
        assert time.monotonic() < deadline, "no prefix cache hit rate for the vLLM tier"
        time.sleep(0.3)


def test_a_conversation_through_the_responses_api_with_the_real_model(
    platform: Platform,
) -> None:
    """Three turns by previous_response_id and on a conversation, whole and streamed, through
    Ray Serve and the real model: the follow-ups read the stored history (their prompts hold
    the earlier turns), and streaming stores the same items as a whole reply."""
    client = openai.OpenAI(base_url=platform.base_url, api_key=platform.key, max_retries=0)
    first = client.responses.create(
        model="smollm2-135m:baseline",
        input="What is the capital of France?",
        temperature=0,
        max_output_tokens=40,
    )
    assert first.status in ("completed", "incomplete") and "Paris" in first.output_text
    second = client.responses.create(
        model="smollm2-135m:baseline",
        input="Repeat the city's name once.",
        previous_response_id=first.id,
        temperature=0,
        max_output_tokens=8,
    )
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert client.responses.retrieve(second.id).output_text == second.output_text

    texts = {}
    for streamed in (False, True):
        conv = client.conversations.create(
            items=[{"role": "user", "content": "What is the capital of France?"}]
        )
        for question in ("Answer in one word.", "Say it again."):
            if streamed:
                with client.responses.stream(
                    model="smollm2-135m:baseline",
                    input=question,
                    conversation=conv.id,
                    temperature=0,
                    max_output_tokens=12,
                ) as s:
                    assert s.get_final_response().status in ("completed", "incomplete")
            else:
                client.responses.create(
                    model="smollm2-135m:baseline",
                    input=question,
                    conversation=conv.id,
                    temperature=0,
                    max_output_tokens=12,
                )
        items = client.conversations.items.list(conv.id, order="asc", limit=100).data
        texts[streamed] = [(i.role, i.content[0].text) for i in items]
    assert len(texts[False]) == 5 and [r for r, _ in texts[False]] == [
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert texts[True] == texts[False]  # temperature 0: the same answers, stored the same
