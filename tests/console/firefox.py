"""Headless Firefox (Debian's firefox-esr, which scripts/browser.sh installs) driven over
WebDriver BiDi, the W3C protocol Firefox speaks itself: no geckodriver and no patched build.
Playwright's Firefox needs its own patched build, and its BiDi mode asks for commands this
Firefox does not have yet, so the console's Firefox test uses this small client: navigate,
evaluate a script, type and press keys, take a screenshot, collect the page's errors."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from tests.console.browser import ensure_browsers, screenshots

FIREFOX = os.environ.get("ZEROLAYER_FIREFOX", "/usr/bin/firefox-esr")
ENTER = "\ue007"


class BidiError(RuntimeError):
    """A command the browser refused, or a wait that ran out."""


class Firefox:
    """One headless Firefox with one tab (use as a context manager)."""

    def __init__(self, width: int = 1280, height: int = 860, start_timeout_s: float = 60.0):
        ensure_browsers()
        self.profile = tempfile.mkdtemp(prefix="zl-firefox-")
        self.proc = subprocess.Popen(
            [
                FIREFOX,
                "--headless",
                "--remote-debugging-port=0",
                "--profile",
                self.profile,
                "--width",
                str(width),
                "--height",
                str(height),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        url = self._endpoint(start_timeout_s)
        self.ws = connect(url + "/session", max_size=64 * 2**20, open_timeout=30)
        self.ids = itertools.count(1)
        self.errors: list[str] = []
        self.command("session.new", {"capabilities": {}})
        self.command("session.subscribe", {"events": ["log.entryAdded"]})
        tree = self.command("browsingContext.getTree", {})
        self.context = tree["contexts"][0]["context"]

    def _endpoint(self, timeout_s: float) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            found = re.search(r"WebDriver BiDi listening on (ws://\S+)", line)
            if found:
                return found.group(1)
        self.close()
        raise BidiError("Firefox did not open its WebDriver BiDi port: " + "".join(seen[-10:]))

    def command(self, method: str, params: dict[str, Any], timeout_s: float = 60.0) -> Any:
        """Send a command; its result (events that come meanwhile are kept)."""
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BidiError(f"{method}: no answer in {timeout_s} s")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("type") == "event":
                self._event(msg)
            elif msg.get("id") == n:
                if msg.get("type") == "error":
                    raise BidiError(f"{method}: {msg.get('error')}: {msg.get('message')}")
                return msg.get("result")

    def _event(self, msg: dict[str, Any]) -> None:
        entry = msg.get("params") or {}
        if msg.get("method") == "log.entryAdded" and entry.get("level") == "error":
            self.errors.append(f"{entry.get('type')}: {entry.get('text')}")

    def goto(self, url: str) -> None:
        params = {"context": self.context, "url": url, "wait": "complete"}
        self.command("browsingContext.navigate", params)

    def eval(self, expression: str) -> Any:
        """A script's value in the page (awaited when it is a promise), as JSON-like data."""
        got = self.command(
            "script.evaluate",
            {
                "expression": expression,
                "target": {"context": self.context},
                "awaitPromise": True,
                "resultOwnership": "none",
            },
        )
        if got.get("type") == "exception":
            raise BidiError(f"{expression!r}: {got['exceptionDetails'].get('text')}")
        return _value(got["result"])

    def wait_for(self, expression: str, timeout_s: float = 60.0) -> Any:
        """Poll a script until its value is truthy; that value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BidiError(f"waited {timeout_s} s for {expression!r}")
            time.sleep(0.2)

    def keys(self, text: str) -> None:
        """Type into the focused element, key by key (real key events)."""
        actions = []
        for ch in text:
            actions += [{"type": "keyDown", "value": ch}, {"type": "keyUp", "value": ch}]
        self.command(
            "input.performActions",
            {
                "context": self.context,
                "actions": [{"type": "key", "id": "kbd", "actions": actions}],
            },
        )

    def shot(self, name: str) -> Path:
        data = self.command("browsingContext.captureScreenshot", {"context": self.context})
        path = screenshots() / f"console-{name}.png"
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                self.command("session.end", {}, timeout_s=10)
            except Exception:  # noqa: BLE001 - the browser may already be gone
                pass
            ws.close()
        self.proc.kill()
        self.proc.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Firefox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _value(remote: dict[str, Any]) -> Any:
    """A BiDi remote value as Python data (primitives, arrays, plain objects)."""
    kind = remote.get("type")
    if kind in ("undefined", "null"):
        return None
    if kind in ("string", "boolean"):
        return remote["value"]
    if kind == "number":
        v = remote["value"]
        return v if not isinstance(v, str) else float(v.replace("Infinity", "inf"))
    if kind == "array":
        return [_value(v) for v in remote.get("value", [])]
    if kind == "object":
        return {k if isinstance(k, str) else _value(k): _value(v) for k, v in remote["value"]}
    return remote.get("value")
