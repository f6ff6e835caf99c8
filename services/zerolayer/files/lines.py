"""A batch input file, checked line by line as OpenAI's Batch API reads one: JSONL, each line an
object {"custom_id": unique non-empty string, "method": "POST", "url": one of the batch
endpoints, "body": the request as that endpoint takes it (with its "model")}. The first bad
line is an error naming its number (1-based); a file with none is refused whole."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from zerolayer.errors import InvalidRequest

__all__ = ["BATCH_ENDPOINTS", "BatchLines", "check_batch_lines"]

BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
_CUSTOM_ID_MAX = 512


@dataclass
class BatchLines:
    """What a checked batch file holds: its requests' count, their endpoints and models."""

    count: int = 0
    endpoints: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)


def check_batch_lines(
    lines: Iterable[bytes], most: int, endpoint: str | None = None, param: str = "file"
) -> BatchLines:
    """Check every line (bytes, with or without its line break); at most `most` requests, each
    for `endpoint` when one is given (a batch's); errors name `param`."""

    def _bad(n: int, why: str) -> InvalidRequest:
        return InvalidRequest(f"line {n} of the file {why}", param=param, code="invalid_batch_line")

    seen: set[str] = set()
    out = BatchLines()
    blank_at = 0
    for n, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            blank_at = blank_at or n
            continue
        if blank_at:
            raise _bad(blank_at, "is empty; a batch file has one request per line")
        try:
            line = json.loads(text)
        except (ValueError, UnicodeDecodeError):
            raise _bad(n, "is not JSON") from None
        if not isinstance(line, dict):
            raise _bad(n, "is not a JSON object")
        cid = line.get("custom_id")
        if not isinstance(cid, str) or not cid or len(cid) > _CUSTOM_ID_MAX:
            raise _bad(n, f"needs a custom_id: a string of 1 to {_CUSTOM_ID_MAX} characters")
        if cid in seen:
            raise _bad(n, f"repeats the custom_id {cid!r}; each request needs its own")
        seen.add(cid)
        if line.get("method") != "POST":
            raise _bad(n, 'needs "method": "POST"')
        url = line.get("url")
        if url not in BATCH_ENDPOINTS:
            raise _bad(n, f"names the url {url!r}; a batch runs {', '.join(BATCH_ENDPOINTS)}")
        if endpoint is not None and url != endpoint:
            raise _bad(
                n,
                f"is for {url}; every request of a batch for {endpoint} must be sent there "
                f"({', '.join(BATCH_ENDPOINTS)} are batched)",
            )
        body = line.get("body")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise _bad(n, "needs a body: the request as a JSON object, with its model")
        if body.get("stream"):
            raise _bad(n, "asks for a stream; a batch's requests are answered whole")
        extra = set(line) - {"custom_id", "method", "url", "body"}
        if extra:
            raise _bad(n, f"has fields a batch request does not take: {', '.join(sorted(extra))}")
        out.count += 1
        if out.count > most:
            raise InvalidRequest(
                f"the file has more than {most} requests; split it into several batches",
                param="file",
                code="too_many_batch_lines",
            )
        out.endpoints.add(url)
        out.models.add(body["model"])
    if not out.count:
        raise InvalidRequest("the file holds no requests", param="file", code="empty_file")
    return out
