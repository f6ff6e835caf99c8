"""The Files API under /v1/files, as OpenAI's: upload (multipart: `file`, `purpose`, and
optionally `expires_after[anchor]` / `expires_after[seconds]`), list by cursor, retrieve, read
the content, delete. A batch input file (purpose `batch`) is checked line by line before any of
it is kept (files.lines): a bad line is a 400 naming its number, and nothing is stored. Every
file belongs to the key's tenant; any other tenant's key gets 404."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.datastructures import UploadFile

from zerolayer.errors import InvalidRequest, PayloadTooLarge
from zerolayer.files import FileStore, check_batch_lines
from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.deps import Tenant, parts_of
from zerolayer.gateway.http import found
from zerolayer.gateway.replies import FileDeleted, FileList, FileObject, json_reply

__all__ = ["router", "files_of"]

router = APIRouter(prefix="/v1/files", route_class=BodyRoute)

PURPOSES = ("batch", "user_data")
_FORM_SLACK = 64 * 1024  # the form's own bytes around the file


async def files_of(request: Request) -> FileStore:
    """The file store (its routes are mounted only where one is configured)."""
    store = parts_of(request).files
    if store is None:
        raise InvalidRequest("this gateway keeps no files")
    return store


FilesDep = Annotated[FileStore, Depends(files_of)]


def _capped(request: Request, most: int) -> Request:
    """The request, its body read as it arrives and refused (413) past `most` bytes."""
    seen = [0]
    receive = request.receive

    async def counted() -> Any:
        msg = await receive()
        seen[0] += len(msg.get("body", b""))
        if seen[0] > most:
            raise PayloadTooLarge(f"the file is larger than {most - _FORM_SLACK} bytes")
        return msg

    return Request(request.scope, counted)


def _expiry(form: Any, purpose: str, default_s: int | None) -> int | None:
    anchor, seconds = form.get("expires_after[anchor]"), form.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return default_s if purpose == "batch" else None
    if anchor != "created_at":
        raise InvalidRequest("expires_after.anchor must be 'created_at'", param="expires_after")
    try:
        value = int(str(seconds))
    except ValueError:
        value = -1
    if not 3600 <= value <= 30 * 86400:
        raise InvalidRequest(
            "expires_after.seconds must be a whole number from 3600 (an hour) to 2592000 (30 days)",
            param="expires_after",
        )
    return value


@router.post("", responses=json_reply(FileObject))
async def upload(request: Request, owner: Tenant, store: FilesDep) -> dict[str, Any]:
    """Upload a file (multipart form); its file object."""
    cfg = parts_of(request).config.files
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cfg.max_bytes + _FORM_SLACK:
        raise PayloadTooLarge(f"the file is larger than {cfg.max_bytes} bytes")
    if not (request.headers.get("content-type") or "").startswith("multipart/form-data"):
        raise InvalidRequest("upload a file as a multipart form with fields file and purpose")
    try:
        form = await _capped(request, cfg.max_bytes + _FORM_SLACK).form(max_files=1, max_fields=8)
    except (PayloadTooLarge, InvalidRequest):
        raise
    except Exception as exc:  # Starlette's parser refuses a malformed form
        raise InvalidRequest(f"the multipart form could not be read: {exc}") from None
    try:
        file, purpose = form.get("file"), form.get("purpose")
        if not isinstance(file, UploadFile):
            raise InvalidRequest("the form needs a file field holding the file", param="file")
        if purpose not in PURPOSES:
            raise InvalidRequest(f"purpose must be one of {', '.join(PURPOSES)}", param="purpose")
        expires = _expiry(form, str(purpose), cfg.batch_expires_s)
        src = file.file
        src.seek(0, 2)
        size = src.tell()
        if size > cfg.max_bytes:
            raise PayloadTooLarge(f"the file is larger than {cfg.max_bytes} bytes")
        if size == 0:
            raise InvalidRequest("the file is empty", param="file", code="empty_file")
        if purpose == "batch":
            if not (file.filename or "").endswith(".jsonl"):
                raise InvalidRequest("a batch file is JSONL: name it *.jsonl", param="file")
            src.seek(0)
            check_batch_lines(src, cfg.max_batch_lines)
        return await store.create(
            owner, src, file.filename or "upload", str(purpose), size, expires
        )
    finally:
        await form.close()


@router.get("", responses=json_reply(FileList))
async def list_files(
    owner: Tenant,
    store: FilesDep,
    purpose: str | None = None,
    limit: int = Query(default=10_000, ge=1, le=10_000),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    """A page of the tenant's files, newest first (by cursor: `after`)."""
    return await found(store.page(owner, limit, order, after, purpose))


@router.get("/{file_id}", responses=json_reply(FileObject))
async def retrieve(owner: Tenant, store: FilesDep, file_id: str) -> dict[str, Any]:
    """A file's object."""
    return await found(store.get(owner, file_id))


@router.get("/{file_id}/content")
async def content(owner: Tenant, store: FilesDep, file_id: str) -> StreamingResponse:
    """A file's bytes."""
    pieces = await found(store.content(owner, file_id))
    return StreamingResponse(pieces, media_type="application/octet-stream")


@router.delete("/{file_id}", responses=json_reply(FileDeleted))
async def delete(owner: Tenant, store: FilesDep, file_id: str) -> dict[str, Any]:
    """Delete a file."""
    return await found(store.delete(owner, file_id))
