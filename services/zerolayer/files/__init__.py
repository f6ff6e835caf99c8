"""The Files API's store: uploaded files' objects in Redis, their bytes in a file system named by
an fsspec URL (a folder under the cache by default, an S3-compatible bucket when configured);
and the check of a batch input file, line by line."""

from zerolayer.files.lines import BATCH_ENDPOINTS, BatchLines, check_batch_lines
from zerolayer.files.store import FileStore, files_url, new_file_id

__all__ = [
    "BATCH_ENDPOINTS",
    "BatchLines",
    "FileStore",
    "check_batch_lines",
    "files_url",
    "new_file_id",
]
