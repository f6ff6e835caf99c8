"""The web console at /console: one page (index.html) and its script and style, shipped in
this package and served by the gateway; everything it shows it reads from the public API with
the key the user signs in with (kept in the tab's sessionStorage, sent as a bearer header).

Served with a Content-Security-Policy that allows nothing from anywhere but the gateway itself
(no inline script, no other origin), and never cached by the browser between versions."""

from __future__ import annotations

from pathlib import Path

from fastapi.responses import FileResponse, Response

from zerolayer.errors import ObjectNotFound

__all__ = ["ASSETS", "HEADERS", "console_file"]

ASSETS = Path(__file__).parent
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def console_file(name: str) -> Response:
    """One of the console's files, served with its headers; 404 for any other name."""
    path = ASSETS / name
    if path.suffix not in _TYPES or path.parent != ASSETS or not path.is_file():
        raise ObjectNotFound(f"the console has no file {name!r}")
    return FileResponse(path, media_type=_TYPES[path.suffix], headers=HEADERS)
