"""The console at /console in headless Chromium, against the started platform (the real model on
every tier, their real cards and the compiler's silence map): sign-in, models and tier cards,
the silence map with a channel opened by mouse and by keyboard, a phone's screen; a screenshot
of each page (tests/console/browser.py says where)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from zerolayer.serve.launcher import Platform

from tests.console.browser import PHONE, Page, chromium
from tests.integration.conftest import ADMIN_KEY

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
        assert f"${m['pricing']['completion_per_1k']}" in text
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
    page.wait_for_selector("#sm-channel-title")
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
    for route in ("#/models", "#/silence"):
        page.goto(root(platform) + "/console" + route)
        page.wait_for_selector(".card, #sm-meta:has-text('calibration samples')")
        wide = page.evaluate("document.documentElement.scrollWidth")
        assert wide <= PHONE["width"], (route, wide)
        tab.shot(f"phone-{route.strip('#/')}")
    assert tab.errors == []
