"""The Files API and the Batch API: uploaded files, batches and their request counts."""

from __future__ import annotations

from typing import Any

from .._models import BaseModel, RequestModel

__all__ = [
    "FileObject",
    "FileDeleted",
    "Batch",
    "BatchCreateParams",
    "BatchRequestCounts",
]


class FileObject(BaseModel):
    """An uploaded file (or a batch's output file, purpose "batch_output")."""

    id: str
    object: str = "file"
    bytes: int = 0
    created_at: int = 0
    expires_at: int | None = None
    filename: str = ""
    purpose: str = ""
    status: str = "processed"


class FileDeleted(BaseModel):
    """What DELETE /v1/files/{id} answers."""

    id: str
    object: str = "file"
    deleted: bool = True


class BatchCreateParams(RequestModel):
    """The body of POST /v1/batches."""

    input_file_id: str
    endpoint: str
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None


class BatchRequestCounts(BaseModel):
    """How many of a batch's requests there are, and how many ended well or not."""

    total: int = 0
    completed: int = 0
    failed: int = 0


class Batch(BaseModel):
    """A batch: its status flow validating -> in_progress -> finalizing -> completed (or
    cancelling -> cancelled, expired, failed), its counts and its output and error files."""

    id: str
    object: str = "batch"
    endpoint: str = ""
    input_file_id: str = ""
    completion_window: str = "24h"
    status: str = ""
    created_at: int = 0
    expires_at: int | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    request_counts: BatchRequestCounts = BatchRequestCounts()
