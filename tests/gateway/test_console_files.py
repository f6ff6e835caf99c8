"""The console's files as the gateway serves them: from the package, under a policy that lets
the page load nothing from elsewhere, and nothing else under /console."""

from __future__ import annotations

import re

import pytest
from zerolayer.gateway.console import ASSETS

from tests.gateway.conftest import Gateway
from tests.gateway.test_api import assert_openai_error


def test_the_page_and_its_files_are_served_with_a_closed_policy(gateway: Gateway) -> None:
    page = gateway.client.get("/console")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and page.headers["x-content-type-options"] == "nosniff"
    # every file the page names is served, with its type
    named = re.findall(r'(?:src|href)="(/console/[^"]+)"', page.text)
    assert {"/console/console.js", "/console/console.css", "/console/icon.svg"} <= set(named)
    for path in named:
        r = gateway.client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"] == policy
    js = gateway.client.get("/console/console.js").headers["content-type"]
    assert js.startswith("text/javascript")
    moved = gateway.client.get("/console/", follow_redirects=False)
    assert moved.status_code == 308 and moved.headers["location"] == "/console"


@pytest.mark.parametrize("name", ["nope.js", "__init__.py", "..%2F..%2Fconfig%2F__init__.py"])
def test_nothing_else_is_served(gateway: Gateway, name: str) -> None:
    assert_openai_error(gateway.client.get(f"/console/{name}"), 404)


def test_the_files_name_no_other_host_and_keep_the_key_out_of_local_storage() -> None:
    for path in ASSETS.iterdir():
        if path.suffix not in (".html", ".js", ".css", ".svg"):
            continue
        text = path.read_text()
        # the one address allowed: SVG's namespace, a name and never fetched
        urls = set(re.findall(r"https?://[^\s\"')]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (path.name, urls)
        assert "localStorage" not in text and "innerHTML" not in text, path.name
