"""client.files and client.batches: upload files of requests, run them as batches at the batch
price, read the answers."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Literal, cast

import httpx

from .._base_client import Call, json_as
from .._models import body_of
from .._pagination import AsyncPaginator, Page
from .._resource import AsyncAPIResource, SyncAPIResource
from ..types.files import Batch, BatchCreateParams, FileDeleted, FileObject

__all__ = ["Files", "AsyncFiles", "Batches", "AsyncBatches"]

FileInput = str | Path | bytes | IO[bytes] | tuple[str, bytes | IO[bytes]]
Endpoint = Literal["/v1/chat/completions", "/v1/completions", "/v1/responses"]


def _named(file: FileInput) -> tuple[str, bytes]:
    """(file name, bytes) of what may be uploaded: a path, bytes, an open binary file, or
    (name, bytes or file)."""
    if isinstance(file, tuple):
        name, data = file
        return name, data if isinstance(data, bytes) else data.read()
    if isinstance(file, (str, Path)):
        path = Path(file)
        return path.name, path.read_bytes()
    if isinstance(file, bytes):
        return "upload.jsonl", file
    return Path(getattr(file, "name", "upload.jsonl")).name, file.read()


def _multipart(fields: Mapping[str, str], name: str, data: bytes) -> tuple[bytes, str]:
    boundary = "zl-" + secrets.token_hex(16)
    out = bytearray()
    for key, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'.encode()
        out += value.encode() + b"\r\n"
    safe = name.replace('"', "")
    out += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    out += data + f"\r\n--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def _upload(file: FileInput, purpose: str, expires_after_s: int | None) -> Call:
    name, data = _named(file)
    fields = {"purpose": purpose}
    if expires_after_s is not None:
        fields["expires_after[anchor]"] = "created_at"
        fields["expires_after[seconds]"] = str(expires_after_s)
    body, kind = _multipart(fields, name, data)
    return Call(
        "POST",
        "/files",
        parse=json_as(FileObject),
        content=lambda: body,
        content_type=kind,
        idempotent_key=False,  # a file is its own id: uploading twice makes two
    )


def _file(method: str, fid: str, parse: Any) -> Call:
    return Call(method, f"/files/{fid}", parse=json_as(parse))


def _content(fid: str) -> Call:
    return Call("GET", f"/files/{fid}/content", parse=_bytes, accept="application/octet-stream")


def _bytes(response: httpx.Response) -> bytes:
    return response.content


def _create(
    input_file_id: str, endpoint: str, window: str, metadata: Mapping[str, str] | None
) -> Call:
    body = body_of(
        BatchCreateParams,
        input_file_id=input_file_id,
        endpoint=endpoint,
        completion_window=window,
        metadata=metadata,
    )
    return Call("POST", "/batches", parse=json_as(Batch), json=body)


def _batch(bid: str, cancel: bool = False) -> Call:
    return Call(
        "POST" if cancel else "GET",
        f"/batches/{bid}" + ("/cancel" if cancel else ""),
        parse=json_as(Batch),
    )


class Files(SyncAPIResource):
    """The Files API."""

    def create(
        self,
        *,
        file: FileInput,
        purpose: Literal["batch", "user_data"],
        expires_after_s: int | None = None,
    ) -> FileObject:
        """Upload a file: a batch file is JSONL, one request per line, checked on upload."""
        return cast("FileObject", self._send(_upload(file, purpose, expires_after_s)))

    def retrieve(self, file_id: str) -> FileObject:
        return cast("FileObject", self._send(_file("GET", file_id, FileObject)))

    def content(self, file_id: str) -> bytes:
        """A file's bytes (a batch's output: JSONL, one result per line)."""
        return cast("bytes", self._send(_content(file_id)))

    def delete(self, file_id: str) -> FileDeleted:
        return cast("FileDeleted", self._send(_file("DELETE", file_id, FileDeleted)))

    def list(
        self,
        *,
        purpose: str | None = None,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        after: str | None = None,
    ) -> Page[FileObject]:
        """The files (newest first); iterating the page goes through all of them."""
        params = {"purpose": purpose, "limit": limit, "order": order, "after": after}
        return self._list("/files", FileObject, params)


class AsyncFiles(AsyncAPIResource):
    """The Files API (async)."""

    async def create(
        self,
        *,
        file: FileInput,
        purpose: Literal["batch", "user_data"],
        expires_after_s: int | None = None,
    ) -> FileObject:
        return cast("FileObject", await self._send(_upload(file, purpose, expires_after_s)))

    async def retrieve(self, file_id: str) -> FileObject:
        return cast("FileObject", await self._send(_file("GET", file_id, FileObject)))

    async def content(self, file_id: str) -> bytes:
        return cast("bytes", await self._send(_content(file_id)))

    async def delete(self, file_id: str) -> FileDeleted:
        return cast("FileDeleted", await self._send(_file("DELETE", file_id, FileDeleted)))

    def list(
        self,
        *,
        purpose: str | None = None,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        after: str | None = None,
    ) -> AsyncPaginator[FileObject]:
        params = {"purpose": purpose, "limit": limit, "order": order, "after": after}
        return self._list("/files", FileObject, params)


class Batches(SyncAPIResource):
    """The Batch API: a file of requests run on the tiers' spare capacity at the batch price."""

    def create(
        self,
        *,
        input_file_id: str,
        endpoint: Endpoint,
        completion_window: Literal["24h"] = "24h",
        metadata: Mapping[str, str] | None = None,
    ) -> Batch:
        return cast(
            "Batch", self._send(_create(input_file_id, endpoint, completion_window, metadata))
        )

    def retrieve(self, batch_id: str) -> Batch:
        return cast("Batch", self._send(_batch(batch_id)))

    def cancel(self, batch_id: str) -> Batch:
        """Stop a batch: it ends `cancelled` with what ran."""
        return cast("Batch", self._send(_batch(batch_id, cancel=True)))

    def list(self, *, limit: int | None = None, after: str | None = None) -> Page[Batch]:
        """The batches (newest first); iterating the page goes through all of them."""
        return self._list("/batches", Batch, {"limit": limit, "after": after})


class AsyncBatches(AsyncAPIResource):
    """The Batch API (async)."""

    async def create(
        self,
        *,
        input_file_id: str,
        endpoint: Endpoint,
        completion_window: Literal["24h"] = "24h",
        metadata: Mapping[str, str] | None = None,
    ) -> Batch:
        return cast(
            "Batch",
            await self._send(_create(input_file_id, endpoint, completion_window, metadata)),
        )

    async def retrieve(self, batch_id: str) -> Batch:
        return cast("Batch", await self._send(_batch(batch_id)))

    async def cancel(self, batch_id: str) -> Batch:
        return cast("Batch", await self._send(_batch(batch_id, cancel=True)))

    def list(self, *, limit: int | None = None, after: str | None = None) -> AsyncPaginator[Batch]:
        return self._list("/batches", Batch, {"limit": limit, "after": after})
