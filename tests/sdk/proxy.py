"""An HTTP proxy for fault tests: it forwards each request to the platform, reads the whole
answer, and for the first `drop` requests closes the client's connection instead of passing the
answer on: the request ran, its answer was lost on the way back (a dropped connection, a load
balancer restarting), and the client sees a connection error."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["LossyProxy"]

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


class LossyProxy:
    """`with LossyProxy(upstream, drop=1) as proxy:` then send to proxy.url. `seen` holds the
    headers of every request, `answers` the status and headers of every upstream answer."""

    def __init__(self, upstream: str, drop: int = 1):
        self.upstream = upstream.rstrip("/")
        self.drop = drop
        self.seen: list[dict[str, str]] = []
        self.answers: list[tuple[int, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                with proxy._lock:
                    proxy.seen.append({k.lower(): v for k, v in headers.items()})
                    dropping = proxy.drop > 0
                    proxy.drop -= 1 if dropping else 0
                r = httpx.request(
                    self.command,
                    proxy.upstream + self.path,
                    headers=headers,
                    content=body,
                    timeout=300,
                )
                with proxy._lock:
                    proxy.answers.append((r.status_code, dict(r.headers)))
                if dropping:  # the answer is lost: close without a byte of it
                    self.close_connection = True
                    return
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in _HOP:
                        self.send_header(k, v)
                self.send_header("content-length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_DELETE = do_PATCH = _forward

        return Handler

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
