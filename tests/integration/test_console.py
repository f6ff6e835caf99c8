"""The console at /console in headless Chromium, against the started platform (the real model on
every tier, their real cards and the compiler's silence map): sign-in, models and tier cards,
the silence map with a channel opened by mouse and by keyboard, the playground, usage, keys
made, relabelled and revoked, the operator's pages, a phone's screen; and the same essentials
in headless Firefox. A screenshot of each page (tests/console/browser.py says where)."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from zerolayer.serve.launcher import Platform

from tests.console.browser import PHONE, Page, chromium
from tests.console.firefox import ENTER, Firefox
from tests.integration.conftest import ADMIN_KEY
from tests.integration.up import start_batch

pytestmark = pytest.mark.integration

MODEL = "smollm2-135m"


def root(p: Platform) -> str:
    return f"http://{p.cfg.host}:{p.cfg.port}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def customer(platform: Platform) -> dict[str, str]:
    """A pro key, with a few requests made on it (so tiers have a measured speed and the live
    signals have samples)."""
    r = httpx.post(
        root(platform) + "/admin/keys",
        json={"plan": "pro", "name": "console test"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    made = r.json()
    auth = {"Authorization": f"Bearer {made['key']}"}
    for tier in ("baseline", "dynamic", "sparse24"):
        body = {
            "model": f"{MODEL}:{tier}",
            "messages": [{"role": "user", "content": "Name three rivers of Europe."}],
            "max_tokens": 24,
        }
        url = platform.base_url + "/chat/completions"
        got = httpx.post(url, json=body, headers=auth, timeout=120)
        assert got.status_code == 200, got.text
    return made


def sign_in(tab: Page, platform: Platform, key: str) -> None:
    tab.page.goto(root(platform) + "/console")
    tab.page.fill("#key", key)
    tab.page.click("#sign-in-form button[type=submit]")
    tab.page.wait_for_selector("#who:not([hidden])")


def api(platform: Platform, path: str, key: str) -> Any:
    r = httpx.get(root(platform) + path, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_wrong_key_is_refused_and_a_right_one_stays_in_the_tab_alone(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    tab = Page(browser)
    page = tab.page
    page.goto(root(platform) + "/console")
    assert page.get_attribute("#key", "type") == "password"
    page.fill("#key", "zl-not-a-key")
    page.click("#sign-in-form button[type=submit]")
    page.wait_for_selector("#sign-in-error:has-text('refused')")
    assert page.is_hidden("#nav")
    tab.shot("sign-in-refused")

    page.fill("#key", customer["key"])
    page.click("#sign-in-form button[type=submit]")
    page.wait_for_selector(".card")
    assert "plan pro" in page.text_content("#who-text")
    assert page.evaluate("sessionStorage.length") == 1
    assert page.evaluate("localStorage.length") == 0
    assert customer["key"] not in page.url
    page.reload()  # the tab keeps it
    page.wait_for_selector(".card")
    other = Page(browser)  # another session does not
    other.page.goto(root(platform) + "/console")
    other.page.wait_for_selector("#sign-in:not([hidden])")
    page.click("#sign-out")
    page.wait_for_selector("#sign-in:not([hidden])")
    assert page.evaluate("sessionStorage.length") == 0
    assert tab.errors == [] and other.errors == []


def test_models_show_every_tier_with_its_card_and_the_quality_charts(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    tab = Page(browser)
    sign_in(tab, platform, customer["key"])
    page = tab.page
    page.wait_for_selector(".card")
    listed = {m["id"]: m for m in api(platform, "/v1/models", customer["key"])["data"]}
    tiers = [m for m in listed.values() if m.get("root") == MODEL]
    shown = page.eval_on_selector_all(".card", "cs => cs.map(c => c.dataset.tier)")
    assert sorted(shown) == sorted(m["tier"] for m in tiers)
    for m in tiers:
        card = page.locator(f".card[data-tier='{m['tier']}']")
        text = card.inner_text()
        delta = m["tier_card"]["quality"]["ppl_delta"] * 100
        assert f"{'+' if delta > 0 else ''}{delta:.2f}% perplexity" in text, (m["id"], text)
        flips = m["tier_card"]["flips"]  # the tiny build's cards count changed answers too
        assert "Answers changed" in text and f"{flips['flips'] * 100:.1f}%" in text, text
        assert "curve" not in str(flips)  # the ROC curves stay on disk
        assert f"${m['pricing']['completion_per_1m']}" in text  # people read prices per 1M
        assert f"{m['context_length']} tokens" in text
        assert m["engine"] in text
    # one chart per measure, a point per tier that has one
    figures = page.locator("figure svg.chart")
    assert figures.count() == 3
    assert page.locator("figure svg.chart").nth(2).locator("circle.point").count() == len(tiers)
    tab.shot("models")
    assert tab.errors == []


def test_the_silence_map_opens_a_channel_by_mouse_and_keyboard(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    tab = Page(browser)
    sign_in(tab, platform, customer["key"])
    page = tab.page
    page.click("#nav a[href='#/silence']")
    page.wait_for_selector("#sm-meta:has-text('calibration samples')")
    smap = api(platform, f"/v1/models/{MODEL}/silence_map", customer["key"])
    mlp = smap["kinds"]["mlp"]
    box = page.locator("#sm-heat").bounding_box()
    assert box is not None
    # the middle of layer 5's row, a third of the way along
    layer, at = 5, 1 / 3
    row = (layer + 0.5) / mlp["layers"]
    page.mouse.click(box["x"] + box["width"] * at, box["y"] + box["height"] * row)
    page.wait_for_selector("#sm-channel-title, #sm-channel-view .error")
    assert page.locator("#sm-channel-view .error").count() == 0, page.inner_text("#sm-channel-view")
    title = page.text_content("#sm-channel-title")
    channel = int(page.input_value("#sm-channel"))
    assert title == f"Layer {layer}, channel {channel}"
    assert abs(channel - at * mlp["channels"]) <= 2
    got = api(platform, f"/v1/models/{MODEL}/silence_map/mlp/{layer}/{channel}", customer["key"])
    shown = page.text_content("#sm-channel-view")
    assert f"silent on {got['silent_fraction'] * 100:.1f}% of tokens" in shown
    # one point per calibration sample on the channel's chart
    assert page.locator("#sm-channel-view svg circle").count() == len(got["samples"]) * 2
    tab.shot("silence-map")

    page.focus("#sm-heat")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    moved = f"Layer {layer + 1}, channel {channel + 1}"
    page.wait_for_selector(f"#sm-channel-title:has-text('{moved}')")
    assert tab.errors == []


def test_the_playground_streams_continues_and_compares_with_usage_and_cost(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    key = customer["key"]
    tab = Page(browser)
    sign_in(tab, platform, key)
    page = tab.page
    page.click("#nav a[href='#/playground']")
    page.wait_for_selector("#left-tier option", state="attached")
    page.select_option("#left-tier", "dynamic")
    page.fill("#pg-max", "16")

    def turn(text: str, n: int, column: str = "left") -> dict[str, str]:
        page.fill("#pg-prompt", text)
        page.click("#pg-send")
        meta = page.locator(f"#{column}-log li.assistant .meta").nth(n)
        meta.locator("xpath=self::*[@data-response-id]").wait_for()
        return {
            "id": meta.get_attribute("data-response-id") or "",
            "cost": meta.get_attribute("data-cost") or "",
            "text": page.locator(f"#{column}-log li.assistant .answer").nth(n).inner_text(),
            "meta": meta.inner_text(),
        }

    first = turn("What is the capital of France?", 0)
    second = turn("And which river runs through it?", 1)
    stored = api(platform, f"/v1/responses/{second['id']}", key)
    assert stored["previous_response_id"] == first["id"]  # the conversation continued
    assert stored["output"][0]["content"][0]["text"] == second["text"]
    usage = stored["usage"]
    price = api(platform, "/v1/account", key)["plan"]["prices"]["dynamic"]
    # the continued turn reads the first from the tier's prefix cache: those at the cached price
    cached = usage["input_tokens_details"]["cached_tokens"]
    cost = (
        (usage["input_tokens"] - cached) * float(price["prompt_per_1k"])
        + cached * float(price["cached_prompt_per_1k"])
        + usage["output_tokens"] * float(price["completion_per_1k"])
    ) / 1000
    assert abs(float(second["cost"]) - cost) < 1e-9, (second, usage, price)
    assert f"{usage['input_tokens']} tokens in, {usage['output_tokens']} out" in second["meta"]
    tab.shot("playground")

    page.check("#pg-compare")
    page.select_option("#right-tier", "baseline")
    both = turn("Say hello.", 2)
    other = page.locator("#right-log li.assistant .meta").first
    other.locator("xpath=self::*[@data-response-id]").wait_for()
    assert other.get_attribute("data-response-id") != both["id"]
    assert api(platform, f"/v1/responses/{other.get_attribute('data-response-id')}", key)[
        "model"
    ].endswith(":baseline")
    tab.shot("playground-side-by-side")
    assert tab.errors == []


def test_usage_shows_the_charts_the_request_log_and_the_invoice(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    key = customer["key"]
    # billing counts requests within a second or so: wait until the log stops growing
    deadline = time.monotonic() + 60
    logged: list[dict[str, Any]] = []
    while True:
        now = api(platform, "/v1/requests", key)["data"]
        if len(now) >= 3 and now == logged:
            break
        assert time.monotonic() < deadline, "the requests were not billed"
        logged = now
        time.sleep(2)
    invoice = api(platform, f"/v1/invoices/{time.strftime('%Y-%m', time.gmtime())}", key)
    tab = Page(browser)
    sign_in(tab, platform, key)
    page = tab.page
    page.click("#nav a[href='#/usage']")
    page.wait_for_selector("#invoice-total")
    assert page.text_content("#invoice-total") == f"${invoice['total_usd']}"
    rows = page.locator("#request-log tbody tr")
    assert rows.count() == min(20, len(logged))
    first = rows.first.inner_text()
    assert f"{logged[0]['model']}:{logged[0]['tier']}" in first and logged[0]["cost_usd"] in first
    # two charts of the last 30 days, with a bar for each tier used today
    assert page.locator("#usage-charts svg.chart").count() == 2
    assert page.locator("#usage-charts svg.chart").first.locator("rect[height]").count() >= 3
    with page.expect_download() as got:
        page.click("#log-csv")
    table = list(csv.DictReader(io.StringIO(Path(got.value.path()).read_text())))
    assert [r["id"] for r in table] == [r["id"] for r in logged]
    tab.shot("usage")
    assert tab.errors == []


def test_batches_show_their_progress_and_give_their_output(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    """A batch of three requests to a torch tier (the real model, the gateway's batch worker)
    runs to completed; the console's Batches page lists it with its progress and downloads
    its output file."""
    import json

    key = customer["key"]
    lines = [
        {
            "custom_id": f"q{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": f"{MODEL}:dynamic",
                "messages": [{"role": "user", "content": f"Name a river of Europe ({i})."}],
                "max_tokens": 12,
                "temperature": 0,
            },
        }
        for i in range(3)
    ]
    bid = start_batch(platform.base_url, key, lines, "rivers.jsonl")
    tab = Page(browser)
    sign_in(tab, platform, key)
    page = tab.page
    page.click("#nav a[href='#/batches']")
    row = page.locator("#batches tbody tr", has_text=bid)
    row.wait_for()
    # the page reads a running batch's progress again by itself until it ends
    deadline = time.monotonic() + 180
    while "completed" not in row.inner_text():
        assert time.monotonic() < deadline, row.inner_text()
        time.sleep(0.5)
    assert "3 / 3" in row.inner_text()
    done = api(platform, f"/v1/batches/{bid}", key)
    assert done["request_counts"] == {"total": 3, "completed": 3, "failed": 0}
    with page.expect_download() as got:
        row.get_by_role("button", name="Output").click()
    out = [json.loads(x) for x in Path(got.value.path()).read_text().splitlines()]
    assert [o["custom_id"] for o in out] == ["q0", "q1", "q2"]
    assert all(o["response"]["body"]["model"].endswith(":dynamic") for o in out)
    tab.shot("batches")
    assert tab.errors == []


def test_the_admin_key_sees_the_models_without_a_plans_prices(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    tab = Page(browser)
    sign_in(tab, platform, ADMIN_KEY)
    assert tab.page.text_content("#who-text") == "admin"
    tab.page.wait_for_selector(".card")
    assert "per plan" in tab.page.locator(".card").first.inner_text()
    assert tab.errors == []


def test_a_phone_screen_gets_the_whole_page_without_sideways_scrolling(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    tab = Page(browser, viewport=PHONE)
    sign_in(tab, platform, customer["key"])
    page = tab.page
    for route in ("#/models", "#/silence", "#/usage", "#/keys"):
        page.goto(root(platform) + "/console" + route)
        page.wait_for_selector(f"#nav a[href='{route}'][aria-current='page']")
        page.wait_for_selector(
            ".card, #sm-meta:has-text('calibration samples'), #invoice, #keys-table"
        )
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= PHONE["width"], (route, wide)
        tab.shot(f"phone-{route.strip('#/')}")
    assert tab.errors == []


def test_keys_are_created_once_shown_replanned_relabelled_and_revoked(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    admin = Page(browser)
    sign_in(admin, platform, ADMIN_KEY)
    page = admin.page
    page.click("#nav a[href='#/keys']")
    page.wait_for_selector("#keys-table")
    page.select_option("#new-plan", "free")
    page.fill("#new-name", "made in the browser")
    page.fill("#new-tenant", customer["tenant"])
    page.click("#create-key-button")
    page.wait_for_selector("#new-key-value")
    key = page.input_value("#new-key-value")
    assert key.startswith("zl-")
    made = api(platform, "/v1/account", key)["key"]  # the key works, as shown
    assert made["plan"] == "free" and made["tenant"] == customer["tenant"]
    row = f"#keys-table tr[data-key-id='{made['key_id']}']"
    page.wait_for_selector(row)
    # one page at a time: the models page that signing in began is not drawn below this one
    assert page.locator("#view h1").all_inner_texts() == ["API keys"]
    admin.shot("keys", hide="#new-key-value")  # a key, even a test's, stays off the picture
    # re-plan from its row
    page.select_option(f"{row} select[data-action=plan]", "pro")
    deadline = time.monotonic() + 30
    while api(platform, "/v1/account", key)["key"]["plan"] != "pro":
        assert time.monotonic() < deadline, "the plan did not change"
        time.sleep(0.5)
    # shown once: after a reload the page holds no trace of it
    page.reload()
    page.wait_for_selector(row)
    assert key not in page.content()
    # the newest keys come first (at most 50 shown); the filter finds any by tenant, label, id
    page.fill("#keys-filter", "made in the browser")
    deadline = time.monotonic() + 30  # (the page's policy allows no wait_for_function)
    while page.locator("#keys-table tbody tr").count() != 1:
        assert time.monotonic() < deadline, "the filter did not narrow the keys to one"
        time.sleep(0.2)
    assert page.locator(row).count() == 1

    # the customer's own page lists both keys of the tenant, relabels and revokes the new one
    tab = Page(browser)
    sign_in(tab, platform, customer["key"])
    mine = tab.page
    mine.click("#nav a[href='#/keys']")
    own = f"#keys-table tr[data-key-id='{made['key_id']}']"
    mine.wait_for_selector(own)
    assert mine.locator("#keys-table tbody tr").count() == 2
    assert (
        "this key"
        in mine.locator(f"#keys-table tr[data-key-id='{customer['key_id']}']").inner_text()
    )
    mine.fill(f"{own} input.label-input", "renamed by its tenant")
    mine.click(f"{own} button[data-action=save-label]")
    deadline = time.monotonic() + 30
    while api(platform, "/v1/account", key)["key"]["name"] != "renamed by its tenant":
        assert time.monotonic() < deadline, "the label was not saved"
        time.sleep(0.5)
    mine.click(f"{own} button[data-action=revoke]")
    mine.click(f"{own} button[data-action=confirm-revoke]")
    mine.wait_for_selector(f"{own}.revoked")
    r = httpx.get(
        root(platform) + "/v1/account", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert r.status_code == 401
    tab.shot("keys-customer")
    assert admin.errors == [] and tab.errors == []


def test_operators_see_tenants_and_live_tier_figures(
    platform: Platform, browser: Any, customer: dict[str, str]
) -> None:
    tab = Page(browser)
    sign_in(tab, platform, ADMIN_KEY)
    page = tab.page
    page.click("#nav a[href='#/operations']")
    page.wait_for_selector("#ops-tiers table")
    ops = api(platform, "/admin/operations", ADMIN_KEY)
    rows = page.locator("#ops-tiers tbody tr")
    assert rows.count() == len(ops["tiers"])
    baseline = next(t for t in ops["tiers"] if t["tier"] == f"{MODEL}:baseline")
    assert baseline["requests"] >= 1 and baseline["ttft_s"] is not None
    text = page.locator("#ops-tiers tbody tr", has_text=f"{MODEL}:baseline").inner_text()
    assert "ready" in text
    assert page.locator("#ops-tiers svg.chart").count() == 2
    # the live signals may move while the page polls: the heading must agree with the
    # gateway's count read around it, within a few polls
    deadline = time.monotonic() + 30
    while True:
        before = api(platform, "/admin/operations", ADMIN_KEY)
        shown = page.text_content("#alerts h2")
        after = api(platform, "/admin/operations", ADMIN_KEY)
        counts = {f"Collapse alerts ({len(o['alerts'])})" for o in (before, after)}
        if shown in counts:
            break
        assert time.monotonic() < deadline, (shown, counts)
        time.sleep(1.0)
    assert page.locator("#view h1").all_inner_texts() == ["Operations"]
    tab.shot("operations")
    # the tenants, and one tenant's usage
    assert page.is_visible("#nav a[href='#/tenants']")
    page.click("#nav a[href='#/tenants']")
    link = page.locator(f"#tenants a[href='#/tenants/{customer['tenant']}']")
    link.click()
    page.wait_for_selector("#invoice")
    assert customer["tenant"] in page.text_content("#view h1")
    tab.shot("tenant")
    # customers get no operator pages: the route falls back to the models
    other = Page(browser)
    sign_in(other, platform, customer["key"])
    assert other.page.is_hidden("#nav a[href='#/operations']")
    other.page.goto(root(platform) + "/console#/operations")
    other.page.wait_for_selector(".card")
    assert tab.errors == [] and other.errors == []


def test_firefox_signs_in_draws_the_pages_and_streams_an_answer(
    platform: Platform, customer: dict[str, str]
) -> None:
    key = customer["key"]
    with Firefox() as ff:
        ff.goto(root(platform) + "/console")
        ff.wait_for("!document.getElementById('sign-in').hidden")
        ff.eval("document.getElementById('key').focus()")
        ff.keys(key + ENTER)  # typed, and the form sent with Enter
        ff.wait_for("document.querySelectorAll('.card').length")
        tiers = [m["tier"] for m in api(platform, "/v1/models", key)["data"] if m.get("tier")]
        shown = ff.eval("[...document.querySelectorAll('.card')].map(c => c.dataset.tier)")
        assert sorted(shown) == sorted(tiers)
        assert ff.eval("document.querySelectorAll('figure svg.chart').length") == 3
        assert ff.eval("sessionStorage.length") == 1 and ff.eval("localStorage.length") == 0
        ff.shot("firefox-models")

        # the silence map's canvas, by keyboard: Down, Right, Enter opens layer 1, channel 1
        ff.eval("location.hash = '#/silence'")
        ff.wait_for("document.getElementById('sm-meta')?.textContent.includes('calibration')")
        ff.eval("document.getElementById('sm-heat').focus()")
        ff.keys("\ue015\ue014" + ENTER)
        title = ff.wait_for("document.getElementById('sm-channel-title')?.textContent")
        assert title == "Layer 1, channel 1"
        got = api(platform, f"/v1/models/{MODEL}/silence_map/mlp/1/1", key)
        pct = f"silent on {got['silent_fraction'] * 100:.1f}% of tokens"
        assert pct in ff.eval("document.getElementById('sm-channel-view').textContent")

        # a streamed answer in the playground (fetch's body reader), stored as it was shown
        ff.eval("location.hash = '#/playground'")
        ff.wait_for("document.querySelector('#left-tier option')")
        ff.eval("document.getElementById('pg-max').value = '12'")
        ff.eval("document.getElementById('pg-prompt').focus()")
        ff.keys("Name a colour.")
        ff.eval("document.getElementById('pg-send').click()")
        rid = ff.wait_for("document.querySelector('#left-log .meta')?.dataset.responseId", 120)
        answer = ff.eval("document.querySelector('#left-log .answer').textContent")
        stored = api(platform, f"/v1/responses/{rid}", key)
        assert answer and stored["output"][0]["content"][0]["text"] == answer
        assert ff.errors == []
