"""The Files API through the official openai package and plain HTTP: a batch file uploaded,
listed, read back and deleted; a bad batch file refused whole, naming its line; another tenant's
file a 404."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.gateway.conftest import GatewayFactory
from tests.gateway.test_api import assert_openai_error

MODEL = "smollm2-135m"


def line(cid: str, url: str = "/v1/chat/completions", **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Say {cid}."}]}
    return {"custom_id": cid, "method": "POST", "url": url, "body": body, **extra}


def jsonl(lines: list[Any]) -> bytes:
    return b"".join(
        (json.dumps(x) if not isinstance(x, str) else x).encode() + b"\n" for x in lines
    )


def upload(
    gw: Any, data: bytes, purpose: str = "batch", name: str = "in.jsonl", key: str = ""
) -> httpx.Response:
    return httpx.post(
        gw.http() + "/files",
        headers={"Authorization": f"Bearer {key or gw.key}"},
        files={"file": (name, data, "application/jsonl")},
        data={"purpose": purpose},
        timeout=30,
    )


def test_a_batch_file_is_uploaded_listed_read_and_deleted_with_the_openai_package(
    make_gateway: GatewayFactory,
) -> None:
    gw = make_gateway()
    oc = OpenAI(base_url=gw.http(), api_key=gw.key, max_retries=0)
    data = jsonl([line(f"r{i}") for i in range(3)])
    made = oc.files.create(file=("requests.jsonl", io.BytesIO(data)), purpose="batch")
    assert made.object == "file" and made.id.startswith("file-") and made.purpose == "batch"
    assert made.bytes == len(data) and made.filename == "requests.jsonl"
    assert made.status == "processed"
    # a batch file expires after 30 days unless the upload says otherwise
    assert made.expires_at == made.created_at + 30 * 86400
    short = oc.files.create(
        file=("b.jsonl", io.BytesIO(data)),
        purpose="batch",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert short.expires_at == short.created_at + 3600
    notes = oc.files.create(file=("notes.txt", io.BytesIO(b"free text")), purpose="user_data")
    assert notes.expires_at is None
    assert oc.files.retrieve(made.id).model_dump() == made.model_dump()
    assert oc.files.content(made.id).read() == data
    listed = oc.files.list()
    assert [f.id for f in listed.data] == [notes.id, short.id, made.id]  # newest first
    assert [f.id for f in oc.files.list(purpose="batch", order="asc")] == [made.id, short.id]
    page = oc.files.list(limit=1)
    assert [f.id for f in page.data] == [notes.id] and page.has_more
    assert [f.id for f in oc.files.list(limit=2, after=notes.id).data] == [short.id, made.id]
    gone = oc.files.delete(made.id)
    assert gone.deleted and gone.id == made.id
    with pytest.raises(openai.NotFoundError):
        oc.files.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        oc.files.content(made.id)
    assert [f.id for f in oc.files.list()] == [notes.id, short.id]


@pytest.mark.parametrize(
    ("lines", "at", "says"),
    [
        (["{not json"], 1, "not JSON"),
        ([line("a"), "[1, 2]"], 2, "not a JSON object"),
        ([line("a"), line("a")], 2, "repeats the custom_id"),
        ([line("a"), line("b", url="/v1/embeddings")], 2, "names the url"),
        ([{**line("a"), "method": "GET"}], 1, "POST"),
        ([{**line("a"), "body": {"messages": []}}], 1, "with its model"),
        ([{**line("a"), "custom_id": ""}], 1, "custom_id"),
        ([line("a"), "", line("b")], 2, "is empty"),
        ([{**line("a"), "body": {"model": MODEL, "stream": True}}], 1, "stream"),
        ([line("a", extra_field=1)], 1, "extra_field"),
    ],
)
def test_a_bad_line_refuses_the_whole_file_naming_its_number(
    make_gateway: GatewayFactory, lines: list[Any], at: int, says: str
) -> None:
    gw = make_gateway()
    r = upload(gw, jsonl(lines))
    err = assert_openai_error(r, 400, "invalid_request_error")
    assert f"line {at} " in err["message"] and says in err["message"], err
    assert err["param"] == "file"
    listed = httpx.get(gw.http() + "/files", headers=gw.auth, timeout=10).json()
    assert listed["data"] == []  # nothing of it was kept


def test_other_bad_uploads_are_clear_4xx(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    err = assert_openai_error(upload(gw, b""), 400)
    assert err["code"] == "empty_file"
    err = assert_openai_error(upload(gw, b"\n\n"), 400)
    assert "no requests" in err["message"]
    err = assert_openai_error(upload(gw, jsonl([line("a")]), purpose="fine-tune"), 400)
    assert err["param"] == "purpose"
    err = assert_openai_error(upload(gw, jsonl([line("a")]), name="in.csv"), 400)
    assert "jsonl" in err["message"]
    r = httpx.post(gw.http() + "/files", headers=gw.auth, json={"purpose": "batch"}, timeout=10)
    assert_openai_error(r, 400)
    no_file = httpx.post(
        gw.http() + "/files", headers=gw.auth, files={"purpose": (None, "batch")}, timeout=10
    )
    assert assert_openai_error(no_file, 400)["param"] == "file"
    many = jsonl(
        [line(f"r{i}") for i in range(gw.app.state.parts.config.files.max_batch_lines + 1)]
    )
    err = assert_openai_error(upload(gw, many), 400)
    assert err["code"] == "too_many_batch_lines"
    for seconds in ("60", "x", str(31 * 86400)):
        r = httpx.post(
            gw.http() + "/files",
            headers=gw.auth,
            files={"file": ("a.jsonl", jsonl([line("a")]))},
            data={
                "purpose": "batch",
                "expires_after[anchor]": "created_at",
                "expires_after[seconds]": seconds,
            },
            timeout=10,
        )
        assert assert_openai_error(r, 400)["param"] == "expires_after"


def test_an_upload_over_the_size_limit_is_a_413(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    gw.app.state.parts.config.files.max_bytes = 4096
    r = upload(gw, jsonl([line(f"r{i}") for i in range(100)]))
    assert_openai_error(r, 413)


def test_another_tenants_file_is_a_404(make_gateway: GatewayFactory) -> None:
    first = make_gateway()
    second = make_gateway(key=None)
    made = upload(first, jsonl([line("a")])).json()
    for path in (f"/files/{made['id']}", f"/files/{made['id']}/content"):
        r = httpx.get(second.http() + path, headers=second.auth, timeout=10)
        assert_openai_error(r, 404)
    r = httpx.delete(second.http() + f"/files/{made['id']}", headers=second.auth, timeout=10)
    assert_openai_error(r, 404)
    assert httpx.get(second.http() + "/files", headers=second.auth, timeout=10).json()["data"] == []
    assert (
        httpx.get(first.http() + f"/files/{made['id']}", headers=first.auth, timeout=10).status_code
        == 200
    )


def test_a_tenants_purge_deletes_its_files_and_their_bytes(make_gateway: GatewayFactory) -> None:
    gw = make_gateway()
    made = upload(gw, jsonl([line("a")])).json()
    store = gw.app.state.parts.files
    path = store._path(made["id"])
    assert store.fs.exists(path)
    tenant = gw.record().owner
    gone = gw.client.delete(f"/admin/tenants/{tenant}/objects", headers=gw.admin).json()
    assert gone["deleted"]["file"] == 1
    assert not store.fs.exists(path)
    assert_openai_error(httpx.get(gw.http() + f"/files/{made['id']}", headers=gw.auth), 404)
