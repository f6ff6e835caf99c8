"""Uploaded files: each file's object (OpenAI's file object) in Redis, under its tenant, and its
bytes in a file system named by an fsspec URL: a folder under the cache by default, an
S3-compatible bucket (`s3://bucket/prefix`, with s3fs installed and its options configured)
when the platform config says so. fsspec's calls block, so they run in a worker thread.

A file lives until it is deleted or its `expires_at` passes (its Redis hash has that time to
live; its bytes are removed when a list or a read finds the hash gone, and by `sweep`). A file
of another tenant is reported exactly as a missing one."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import fsspec
import redis.asyncio as aioredis

from zerolayer.config import PlatformConfig
from zerolayer.conversations import NotFound
from zerolayer.store import keyspace
from zerolayer.store.pages import ids_after, list_page

__all__ = ["FileStore", "files_url", "new_file_id"]

_CHUNK = 1 << 20


def files_url(cfg: PlatformConfig) -> str:
    """Where the platform's files live: files.url, else the folder files/ of the cache."""
    return cfg.files.url or str(Path(cfg.cache_dir) / "files")


def new_file_id() -> str:
    return "file-" + secrets.token_hex(12)


class FileStore:
    """Files' objects in Redis and their bytes in an fsspec file system (module doc)."""

    def __init__(
        self, client: aioredis.Redis, url: str, storage_options: dict[str, Any] | None = None
    ):
        self.client = client
        self.url = url
        self.fs, self.root = fsspec.core.url_to_fs(url, **(storage_options or {}))

    def _path(self, fid: str) -> str:
        return f"{self.root.rstrip('/')}/{fid}"

    async def create(
        self,
        tenant: str,
        source: IO[bytes],
        filename: str,
        purpose: str,
        size: int,
        expires_after_s: int | None,
        fid: str | None = None,
    ) -> dict[str, Any]:
        """Store a file's bytes (read from `source`, from its start) and its object."""
        fid = fid or new_file_id()
        now = int(time.time())
        obj = {
            "id": fid,
            "object": "file",
            "bytes": size,
            "created_at": now,
            "expires_at": now + expires_after_s if expires_after_s else None,
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "status_details": None,
        }
        await asyncio.to_thread(self._write, fid, source)
        key = keyspace.file(fid)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping={"tenant": tenant, "obj": json.dumps(obj)})
        if expires_after_s:
            pipe.expireat(key, now + expires_after_s)
        pipe.zadd(keyspace.tenant_files(tenant), {fid: time.time_ns() // 1000})
        await pipe.execute()
        return obj

    def _write(self, fid: str, source: IO[bytes]) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        source.seek(0)
        with self.fs.open(self._path(fid), "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)

    async def get(self, tenant: str, fid: str) -> dict[str, Any]:
        """A tenant's file object; NotFound when it has none of that id."""
        owner, obj = await self.client.hmget(keyspace.file(fid), ["tenant", "obj"])
        if owner is None or keyspace.text(owner) != tenant or obj is None:
            raise NotFound(f"no file with id {fid!r}")
        found: dict[str, Any] = json.loads(obj)
        return found

    async def content(self, tenant: str, fid: str) -> AsyncIterator[bytes]:
        """A tenant's file's bytes, in pieces; NotFound (before any piece) when it has none,
        or when its bytes are gone from the file system (a bucket's own expiry, a lost disk)."""
        await self.get(tenant, fid)
        handle: IO[bytes] = await self._bytes(fid, self.fs.open, "rb")
        return _pieces(handle)

    async def read(self, tenant: str, fid: str) -> bytes:
        """A tenant's file's bytes, whole; NotFound as content() says."""
        await self.get(tenant, fid)
        data: bytes = await self._bytes(fid, self.fs.cat_file)
        return data

    async def _bytes(self, fid: str, call: Any, *args: Any) -> Any:
        """call(path of fid's bytes, *args) in a worker thread; NotFound when they are gone."""
        try:
            return await asyncio.to_thread(call, self._path(fid), *args)
        except FileNotFoundError:
            raise NotFound(f"the bytes of file {fid!r} are gone") from None

    async def page(
        self, tenant: str, limit: int, order: str, after: str | None, purpose: str | None
    ) -> dict[str, Any]:
        """A page of the tenant's files (newest first unless order is asc), as OpenAI lists."""
        ids = await self._ids(tenant)
        if order != "asc":
            ids.reverse()
        following = ids_after(ids, after)
        if following is None:
            raise NotFound(f"no file with id {after!r} to list after")
        data: list[dict[str, Any]] = []
        gone: list[str] = []
        for fid in following:
            try:
                obj = await self.get(tenant, fid)
            except NotFound:
                gone.append(fid)
                continue
            if purpose is None or obj["purpose"] == purpose:
                data.append(obj)
            if len(data) > limit:
                break
        if gone:
            await self._forget(tenant, gone)
        return list_page(data, limit)

    async def delete(self, tenant: str, fid: str) -> dict[str, Any]:
        """Delete a tenant's file (its object and its bytes)."""
        await self.get(tenant, fid)
        await self.client.delete(keyspace.file(fid))
        await self._forget(tenant, [fid])
        return {"id": fid, "object": "file", "deleted": True}

    async def purge_tenant(self, tenant: str) -> int:
        """Delete every file of a tenant; how many."""
        ids = await self._ids(tenant)
        if ids:
            await self.client.delete(*(keyspace.file(f) for f in ids))
            await self._forget(tenant, ids)
        return len(ids)

    async def sweep(self, tenant: str) -> int:
        """Remove the bytes of the tenant's files that expired; how many."""
        ids = await self._ids(tenant)
        exists = [await self.client.exists(keyspace.file(f)) for f in ids]
        gone = [f for f, e in zip(ids, exists, strict=True) if not e]
        if gone:
            await self._forget(tenant, gone)
        return len(gone)

    async def _ids(self, tenant: str) -> list[str]:
        """The tenant's file ids, oldest first."""
        got = await self.client.zrange(keyspace.tenant_files(tenant), 0, -1)
        # redis-py types zrange's reply for every option (scores, ...); without them: members
        return [keyspace.text(i) for i in got]  # type: ignore[arg-type]

    async def _forget(self, tenant: str, fids: list[str]) -> None:
        await self.client.zrem(keyspace.tenant_files(tenant), *fids)
        for fid in fids:
            await asyncio.to_thread(self._remove, fid)

    def _remove(self, fid: str) -> None:
        try:
            self.fs.rm_file(self._path(fid))
        except FileNotFoundError:
            pass


async def _pieces(handle: IO[bytes]) -> AsyncIterator[bytes]:
    try:
        while True:
            piece = await asyncio.to_thread(handle.read, _CHUNK)
            if not piece:
                return
            yield piece
    finally:
        handle.close()
