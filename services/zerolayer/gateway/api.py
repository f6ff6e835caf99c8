"""The gateway's HTTP surface: OpenAI routes under /v1, /healthz. Built as a plain FastAPI app
over a Backend, so it runs inside Ray Serve and in unit tests alike."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from zerolayer.config import GatewayConfig
from zerolayer.errors import APIError, AuthenticationFailed, InvalidRequest, openai_error_body
from zerolayer.gateway.catalog import Catalog
from zerolayer.gateway.schemas import ChatCompletionRequest, CompletionRequest
from zerolayer.store.keys import ApiKeyRecord

__all__ = ["Backend", "create_app"]


class Backend(Protocol):
    """Where the gateway sends a request once it is authorised and parsed."""

    def stream(self, target: str, req: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Events of one request (see zerolayer.replicas.core)."""

    async def complete(self, target: str, req: dict[str, Any]) -> dict[str, Any]:
        """The final event of one request, with the whole text."""

    async def cards(self) -> dict[str, dict[str, Any]]:
        """Tier cards of the served tiers that answered, by '<model>:<tier>'."""


KeyLookup = Callable[[str], Awaitable[ApiKeyRecord | None]]
HealthCheck = Callable[[], Awaitable[dict[str, Any]]]


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status_code)


def _validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body",)]
    param = ".".join(loc) or None
    where = f" at '{param}'" if param else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid request body{where}: {first.get('msg', 'invalid value')}{more}", param


def _sse(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class _Shape:
    """How one endpoint's objects look (chat vs text completion)."""

    def __init__(self, chat: bool, rid: str, model: str):
        self.chat = chat
        self.rid = rid
        self.model = model
        self.created = int(time.time())

    def _frame(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def final(self, text: str, finish: str, usage: dict[str, int]) -> dict[str, Any]:
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            return self._frame("chat.completion", [choice], usage=usage)
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return self._frame("text_completion", [choice], usage=usage)

    def chunk(self, text: str | None, finish: str | None, usage: bool) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {}
            if text is None and finish is None:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        extra = {"usage": None} if usage else {}
        return self._frame(obj, [choice], **extra)

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._frame(obj, [], usage=usage)


def create_app(
    backend: Backend,
    lookup_key: KeyLookup,
    catalog: Catalog,
    settings: GatewayConfig,
    health: HealthCheck,
) -> FastAPI:
    """The gateway's FastAPI app."""
    app = FastAPI(title="zerolayer", version="0.1.0", docs_url=None, redoc_url=None)

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(list(exc.errors()))
        return _error(InvalidRequest(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = openai_error_body(str(exc.detail), kind)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        body = openai_error_body(f"internal error ({type(exc).__name__})", "server_error")
        return JSONResponse(body, status_code=500)

    async def authorise(request: Request) -> ApiKeyRecord:
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthenticationFailed(
                "no API key given: send 'Authorization: Bearer <key>' "
                "(create one with `zerolayer keys create --plan NAME`)"
            )
        record = await lookup_key(key.strip())
        if record is None or record.revoked:
            raise AuthenticationFailed("the API key is unknown or revoked")
        return record

    async def parse(request: Request, model: type[BaseModel]) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise _TooLarge(settings.max_body_bytes)
        raw = await request.body()
        if len(raw) > settings.max_body_bytes:
            raise _TooLarge(settings.max_body_bytes)
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise InvalidRequest("the request body must be a JSON object")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            message, param = _validation_message(list(exc.errors()))
            raise InvalidRequest(message, param=param) from exc

    async def serve(body: ChatCompletionRequest | CompletionRequest, plan: str) -> Response:
        chat = isinstance(body, ChatCompletionRequest)
        target = catalog.resolve(body.model, plan)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        req: dict[str, Any] = {"request_id": rid, **body.sampling()}
        if isinstance(body, ChatCompletionRequest):
            req["messages"] = [{"role": m.role, "content": m.text()} for m in body.messages]
        else:
            req["prompt"] = body.prompt
        shape = _Shape(chat, rid, target)  # the tier that answered, as OpenAI names the version
        headers = {"x-request-id": rid}
        if not body.stream:
            res = await backend.complete(target, req)
            if res["event"] == "error":
                return JSONResponse(res["body"], status_code=res["status"], headers=headers)
            usage = _usage(res["prompt_tokens"], res["completion_tokens"])
            return JSONResponse(
                shape.final(res["text"], res["finish_reason"], usage), headers=headers
            )
        events = backend.stream(target, req)
        first = await anext(events)
        if first["event"] == "error":
            await events.aclose()
            return JSONResponse(first["body"], status_code=first["status"], headers=headers)
        return StreamingResponse(
            _sse_stream(shape, events, first, body.include_usage()),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        record = await authorise(request)
        return await serve(await parse(request, ChatCompletionRequest), record.plan)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        record = await authorise(request)
        return await serve(await parse(request, CompletionRequest), record.plan)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        await authorise(request)
        return {"object": "list", "data": catalog.cards(int(time.time()), await backend.cards())}

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        report = await health()
        return JSONResponse(report, status_code=200 if report.get("status") == "ok" else 503)

    return app


class _TooLarge(APIError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"

    def __init__(self, limit: int):
        super().__init__(f"the request body is larger than {limit} bytes")


async def _sse_stream(
    shape: _Shape, events: AsyncIterator[dict[str, Any]], first: dict[str, Any], usage: bool
) -> AsyncIterator[bytes]:
    prompt_tokens = first["prompt_tokens"]
    completion = 0
    try:
        if shape.chat:
            yield _sse(shape.chunk(None, None, usage))
        async for ev in events:
            kind = ev["event"]
            if kind == "delta":
                completion += ev["tokens"]
                if ev["text"]:  # an end-of-sequence token carries no text: nothing to send
                    yield _sse(shape.chunk(ev["text"], None, usage))
            elif kind == "end":
                completion = ev["completion_tokens"]
                yield _sse(shape.chunk(None if shape.chat else "", ev["finish_reason"], usage))
                if usage:
                    yield _sse(shape.usage_chunk(_usage(prompt_tokens, completion)))
            elif kind == "error":
                # Status 200 is already sent: report in-band, then end the stream properly.
                yield _sse(ev["body"])
                break
        yield _sse("[DONE]")
    finally:
        await events.aclose()  # type: ignore[attr-defined]
