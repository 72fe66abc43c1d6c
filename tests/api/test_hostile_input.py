"""Input the store cannot hold, over real HTTP and sockets: a 4xx naming the field, never a 5xx,
and nothing poisoned (a normal request afterwards still works, nothing half-stored)."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.limits import MAX_INT64, shown
from shoal.worker.agent import Worker
from tests.runtime.harness import login, submit, wait_for_status

NUL, SURROGATE = "a\x00b", "a\ud800b"
BAD_TEXT = [(NUL, "NUL"), (SURROGATE, "surrogate")]


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings.model_copy(update={"max_request_bytes": 64 * 1024})) as srv:
        yield srv




def _raw(body: dict[str, Any]) -> bytes:
    """JSON with lone surrogates kept as `\\ud800` escapes, as any JSON encoder writes them."""
    return json.dumps(body).encode()


def _assert_field_error(resp: httpx.Response, status: int, field: str, reason: str) -> None:
    where = f"{resp.request.method} {resp.request.url.path}"
    assert resp.status_code == status, f"{where}: {resp.status_code} {resp.text[:300]}"
    body = resp.json()
    assert set(body) == {"error", "message", "details"}, body
    fields = {d["field"]: d["message"] for d in body["details"]}
    assert field in fields, f"{where}: {field!r} not named in {fields}"
    assert reason.lower() in fields[field].lower(), fields[field]
    assert "retry-after" not in resp.headers


async def test_unstorable_text_in_a_task_is_422_naming_the_field(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    """A NUL or lone surrogate anywhere in a submission is a 422 naming that field; nothing is
    stored, and a normal submission afterwards works."""
    for text, reason in BAD_TEXT:
        for body, field in (
            ({"description": text}, "description"),
            ({"description": "ok", "requirements": {"notes": ["fine", text]}},
             "requirements.notes.1"),
            ({"description": "ok", "requirements": {text: 1}}, f"requirements.{shown(text)}"),
            ({"description": "ok", "plan": [{"name": "a", "description": text}]},
             "plan.0.description"),
            ({"description": "ok", "plan": [{"name": "a", "description": "d",
                                             "options": {"files": {"x": text}}}]},
             "plan.0.options.files.x"),
        ):
            resp = await client.post("/api/v1/tasks", content=_raw(body),
                                     headers={"content-type": "application/json"})
            _assert_field_error(resp, 422, field, reason)
    assert (await client.get("/api/v1/tasks")).json()["total"] == 0
    task_id = await submit(client, [{"name": "a", "description": "fine", "tool": "echo"}])
    assert (await wait_for_status(client, task_id, "completed"))["status"] == "completed"


async def test_unstorable_text_in_sign_in_and_accounts_is_422(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """Login (unauthenticated), user creation and worker-token names refuse bad text with 422;
    a normal login still works afterwards."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as anon:
        for text, reason in BAD_TEXT:
            resp = await anon.post("/api/v1/auth/login", content=_raw(
                {"username": text, "password": "password123"}),
                headers={"content-type": "application/json"})
            _assert_field_error(resp, 422, "username", reason)
        ok = await anon.post("/api/v1/auth/login",
                             json={"username": "alice", "password": "password123"})
        assert ok.status_code == 200, ok.text
    for text, reason in BAD_TEXT:
        for path, body, field in (
            ("/api/v1/workers/tokens", {"name": text}, "name"),
            ("/api/v1/users", {"username": "bob", "password": "password123", "email": text},
             "email"),
            (f"/api/v1/checkpoints/{uuid.uuid4()}/reject", {"reason": text}, "reason"),
        ):
            resp = await client.post(path, content=_raw(body),
                                     headers={"content-type": "application/json"})
            _assert_field_error(resp, 422, field, reason)


async def test_integers_beyond_the_store_are_422(client: httpx.AsyncClient) -> None:
    """Offsets and sequence numbers past 2^63 - 1 are 422 naming the parameter; the largest
    storable value is accepted."""
    task_id = str(uuid.uuid4())
    for path, params, headers, field in (
        ("/api/v1/tasks", {"offset": 2**64}, {}, "query.offset"),
        ("/api/v1/tasks", {"offset": MAX_INT64 + 1}, {}, "query.offset"),
        ("/api/v1/checkpoints", {"offset": MAX_INT64 + 1}, {}, "query.offset"),
        (f"/api/v1/tasks/{task_id}/events", {"since": MAX_INT64 + 1}, {}, "query.since"),
        (f"/api/v1/tasks/{task_id}/events", {}, {"Last-Event-ID": str(MAX_INT64 + 1)},
         "header.last-event-id"),
        (f"/api/v1/tasks/{task_id}/events", {}, {"Last-Event-ID": "abc"},
         "header.last-event-id"),
    ):
        resp = await client.get(path, params=params, headers=headers)
        assert resp.status_code == 422, f"{path} {params} {headers}: {resp.text}"
        assert field in {d["field"] for d in resp.json()["details"]}, resp.json()
    page = await client.get("/api/v1/tasks", params={"offset": MAX_INT64})
    assert page.status_code == 200, page.text
    assert page.json()["tasks"] == []


async def test_a_body_over_the_limit_is_413(client: httpx.AsyncClient) -> None:
    """A body larger than `max_request_bytes` is refused before parsing, announced or chunked."""
    big = {"description": "x", "requirements": {"blob": "y" * 100_000}}
    resp = await client.post("/api/v1/tasks", json=big)
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"] == "payload_too_large"

    async def chunks() -> AsyncIterator[bytes]:
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i:i + 8192]

    chunked = await client.post("/api/v1/tasks", content=chunks(),
                                headers={"content-type": "application/json"})
    assert chunked.status_code == 413, chunked.text
    assert (await client.get("/api/v1/tasks")).status_code == 200


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_client_that_keeps_sending_a_large_body_reads_the_413(
    server: RunningServer, framing: str,
) -> None:
    """A raw client sending 32 MB to an endpoint whose limit is 64 kB, without waiting for an
    answer, gets to send it all, then reads the 413 and a clean close, not a reset."""
    size, piece = 32 * 1024 * 1024, b"y" * 65_536
    framed = (f"Content-Length: {size}" if framing == "content-length"
              else "Transfer-Encoding: chunked")
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST /api/v1/tasks HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
                 f"\r\n{framed}\r\n\r\n".encode())

    async def keep_sending() -> int:
        sent = 0
        while sent < size:
            chunk = piece if framing == "content-length" else (
                b"%x\r\n" % len(piece) + piece + b"\r\n")
            writer.write(chunk)
            await writer.drain()
            sent += len(piece)
        if framing == "chunked":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        return sent

    async with asyncio.timeout(60):
        sending = asyncio.create_task(keep_sending())
        answer = await reader.read()  # to the end: raises ConnectionResetError on a reset
        sent = await sending
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"] == "payload_too_large"
    assert sent == size


async def test_file_names_beyond_latin1_download_with_rfc6266(
    client: httpx.AsyncClient, worker: Worker
) -> None:
    """Produced files named `résumé.md`, `报告.md` and `say "hi".txt` download with an ASCII
    fallback and the exact UTF-8 name, and the zip holds all three."""
    names = {"résumé.md": "cv", "报告.md": "report", 'say "hi".txt': "hi"}
    task_id = await submit(client, [{"name": "files", "description": "write", "tool": "echo",
                                     "options": {"files": names}}])
    detail = await wait_for_status(client, task_id, "completed")
    sub = detail["subtasks"][0]["subtask_id"]
    for name, content in names.items():
        resp = await client.get(f"/api/v1/subtasks/{sub}/files/{name}")
        assert resp.status_code == 200, resp.text
        assert resp.text == content
        disposition = resp.headers["content-disposition"]
        assert disposition.isascii()
        assert "filename*=UTF-8''" in disposition
        fallback = disposition.split('filename="', 1)[1].split('"', 1)[0]
        assert '"' not in fallback
        assert fallback
    archive = await client.get(f"/api/v1/tasks/{task_id}/download")
    assert archive.status_code == 200
    assert archive.headers["content-disposition"] == f'attachment; filename="task-{task_id}.zip"'
    with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
        assert sorted(zipped.namelist()) == sorted(names)


async def _frame(ws: ClientConnection, kind: str) -> dict[str, Any]:
    while True:
        message: dict[str, Any] = json.loads(await ws.recv())
        if message["type"] == kind:
            return message


def _ws(server: RunningServer) -> str:
    return server.url.replace("http://", "ws://") + "/ws"


async def test_client_socket_answers_bad_frames_and_stays_open(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """A `since` of 1e20, a NUL in a task id, a bad JSON frame and an unknown type each get an
    error frame naming the problem; the socket stays open and answers a ping."""
    token = client.headers["Authorization"].split()[1]
    async with connect(_ws(server), additional_headers={"Authorization": f"Bearer {token}"},
                       open_timeout=10) as ws:
        for frame, field in (
            ({"type": "subscribe", "since": 1e20}, "since"),
            ({"type": "subscribe", "since": -1}, "since"),
            ({"type": "subscribe", "task_id": NUL}, "task_id"),
            ({"type": "subscribe", "data": {"event_types": [SURROGATE]}}, "event_types.0"),
            ({"type": "launch"}, "type"),
        ):
            await ws.send(json.dumps(frame))
            error = await _frame(ws, "error")
            assert error["data"]["field"] == field, error
        await ws.send("{not json")
        assert (await _frame(ws, "error"))["data"]["code"] == "bad_message"
        await ws.send(json.dumps({"type": "ping"}))
        await _frame(ws, "pong")


async def test_client_socket_signs_in_with_a_first_frame(
    server: RunningServer, client: httpx.AsyncClient
) -> None:
    """Without a token in the URL or a header, an `auth` frame signs the socket in; any other
    first frame closes it with 4401."""
    token = client.headers["Authorization"].split()[1]
    async with connect(_ws(server), open_timeout=10) as ws:
        await ws.send(json.dumps({"type": "auth", "token": token}))
        await ws.send(json.dumps({"type": "subscribe", "event_types": ["task_update"]}))
        assert (await _frame(ws, "subscribed"))["data"]["event_types"] == ["task_update"]
    async with connect(_ws(server), open_timeout=10) as ws:
        await ws.send(json.dumps({"type": "subscribe"}))
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 4401


async def test_worker_socket_answers_unstorable_messages_and_stays_open(
    server: RunningServer, settings: Settings
) -> None:
    """A worker message with a NUL, a NaN or an out-of-range number gets an `error` frame
    naming the field, and the connection keeps serving."""
    token = await admin.create_worker_token(server.services.db, name="raw")
    url = server.url.replace("http://", "ws://") + "/ws/worker"
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                       open_timeout=10) as ws:
        await ws.send(json.dumps({"type": "worker_register", "v": 1, "machine_id": "raw-1",
                                  "machine_name": "raw", "slots": 1, "tools": []}))
        await _frame(ws, "registered")
        attempt = str(uuid.uuid4())
        for raw, code, field in (
            (json.dumps({"type": "agent_log", "attempt_id": attempt, "message": NUL}),
             "unstorable_text", "message"),
            ('{"type": "heartbeat", "cpu_percent": NaN}', "bad_message", "cpu_percent"),
            (json.dumps({"type": "task_result", "attempt_id": attempt, "fence": 2**70,
                         "status": "succeeded"}), "bad_message", "fence"),
            (json.dumps({"type": "task_result", "attempt_id": attempt, "fence": 1,
                         "status": "succeeded", "usage": {"input_tokens": 10**15}}),
             "bad_message", "usage.input_tokens"),
        ):
            await ws.send(raw)
            error = await _frame(ws, "error")
            assert error["code"] == code, error
            assert field in error["message"], error
        bob = await login(server, settings, "bob")
        try:
            workers = (await bob.get("/api/v1/workers")).json()["workers"]
        finally:
            await bob.aclose()
        assert [w["status"] for w in workers] == ["online"]
