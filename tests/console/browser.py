"""Headless Chromium (Debian's, which scripts/browser.sh installs) driven by Playwright, for the
console's tests; and where their screenshots go. The browsers are installed when a selected test
first asks for one (`ensure_browsers`), so a run without browser tests never installs them."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("ZEROLAYER_CHROMIUM", "/usr/bin/chromium")
# no background traffic: this machine's closed network refuses it, many connections at a time
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def screenshots() -> Path:
    """Where a run saves its screenshots: ZEROLAYER_SCREENSHOTS (docs/img, to refresh the
    README's), else .test-cache/screenshots."""
    folder = Path(os.environ.get("ZEROLAYER_SCREENSHOTS") or ROOT / ".test-cache" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@functools.cache
def ensure_browsers() -> None:
    """Install Debian's Chromium and Firefox ESR if they are missing (scripts/browser.sh; once
    per test run)."""
    subprocess.run([str(ROOT / "scripts" / "browser.sh")], check=True, timeout=900)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium browser for the test."""
    from playwright.sync_api import sync_playwright

    ensure_browsers()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Page:
    """A browser tab that collects what the page reports as errors (console errors other than
    refused requests, which a test provokes on purpose, and uncaught exceptions)."""

    def __init__(self, browser: Any, viewport: dict[str, int] = LAPTOP):
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.page.set_default_timeout(60_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on(
            "console",
            lambda m: (
                self.errors.append(m.text)
                if m.type == "error" and "Failed to load resource" not in m.text
                else None
            ),
        )

    def shot(self, name: str, hide: str | None = None) -> Path:
        """A full-page screenshot; `hide`: a selector whose elements are covered (a key)."""
        path = screenshots() / f"console-{name}.png"
        mask = [self.page.locator(hide)] if hide else []
        self.page.screenshot(path=str(path), full_page=True, mask=mask, mask_color="#c9d2db")
        return path
