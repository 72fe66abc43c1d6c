"""No secret reaches a log or an error body: a normal session and hostile requests against real
`shoal serve` and `shoal worker` processes on PostgreSQL (with a database password), then every
log line and every error answer is searched for every secret the run used."""

from __future__ import annotations

import json
import secrets
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from sqlalchemy.engine import make_url
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import POSTGRES_URL, drop_postgres, fresh_postgres, require_service
from tests.e2e.procs import (
    SECRET,
    Cluster,
    cluster,
    free_port,
    sse_events,
    submit,
    wait_healthy,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(120)]


class Run:
    """The secrets one run uses, and every error body it was answered with."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {"secret key": SECRET}
        self.error_bodies: list[str] = []

    def keep(self, name: str, value: str) -> str:
        self.secrets[name] = value
        return value

    def record(self, resp: httpx.Response) -> httpx.Response:
        if resp.status_code >= 400:
            self.error_bodies.append(f"{resp.request.method} {resp.request.url.path} "
                                     f"{resp.status_code} {resp.text}")
        return resp


async def test_no_secret_in_any_log_or_error_body(tmp_path: Path) -> None:
    """JWTs, worker tokens, passwords, API keys and the database password never appear."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    run = Run()
    db_password = run.keep("database password", "db-pw-" + secrets.token_hex(8))
    plain = await fresh_postgres(POSTGRES_URL)
    # The test server trusts local connections, so any password is accepted: it still travels
    # in the URL that the server, the CLI and every error about the database would print.
    with_password = make_url(plain).set(password=db_password).render_as_string(
        hide_password=False)
    try:
        async with cluster(tmp_path, database_url=with_password) as stack:
            await _session(stack, tmp_path, run)
            logs = {p.name: p.output() for p in stack.procs}
    finally:
        await drop_postgres(plain, POSTGRES_URL)
    assert logs["server"].count("\n") > 10, logs["server"]  # the server did log
    assert "/ws?token=[redacted]" in logs["server"], logs["server"][-3000:]
    for name, value in run.secrets.items():
        for source, text in [*logs.items(), *((f"error body {i}", body) for i, body
                                              in enumerate(run.error_bodies))]:
            assert value not in text, f"the {name} appears in {source}"


async def _session(stack: Cluster, root: Path, run: Run) -> None:
    password = run.keep("password", "pw-" + secrets.token_hex(8))
    await stack.cli("user", "create", "--username", "alice", "--password", password, "--admin")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = stack.start_server(port)
    worker_token = run.keep("worker token", await stack.create_worker_token("w1"))
    await wait_healthy(url, server)
    keys = {"OPENAI_API_KEY": "sk-test-" + secrets.token_hex(12),
            "ANTHROPIC_API_KEY": "sk-ant-test-" + secrets.token_hex(12),
            "GEMINI_API_KEY": "AIza" + secrets.token_hex(16)}
    for name, value in keys.items():
        run.keep(name, value)
    data_dir = root / "worker-w1"
    worker = stack.start("worker-w1", ["worker", "--server", url, "--token", worker_token,
                                       "--name", "w1"], stack.env(data_dir, **keys), data_dir)
    async with httpx.AsyncClient(base_url=url, timeout=15) as client:
        pair = run.record(await client.post("/api/v1/auth/login", json={
            "username": "alice", "password": password})).json()
        access = run.keep("access token", pair["access_token"])
        refreshed = run.record(await client.post("/api/v1/auth/refresh", json={
            "refresh_token": run.keep("refresh token", pair["refresh_token"])})).json()
        run.keep("refreshed access token", refreshed["access_token"])
        client.headers["Authorization"] = f"Bearer {access}"
        await wait_workers_online(client, {"w1"}, [server, worker])
        created = run.record(await client.post("/api/v1/workers/tokens", json={"name": "w2"}))
        run.keep("API worker token", created.json()["token"])
        await _normal_work(client, url, access, run)
        await _hostile(client, url, access, password, run)


async def _normal_work(client: httpx.AsyncClient, url: str, access: str, run: Run) -> None:
    plan = [{"name": "note", "description": "Write a note.", "tool": "echo",
             "options": {"files": {"note.txt": "hello"}}}]
    ws_url = url.replace("http://", "ws://") + "/ws"
    async with connect(f"{ws_url}?token={access}", open_timeout=10) as ws:  # in the URL
        await ws.send(json.dumps({"type": "subscribe", "event_types": ["task_complete"]}))
        task_id = await submit(client, {"description": "Write a note", "plan": plan})
        while json.loads(await ws.recv())["type"] != "task_complete":
            pass
    async with connect(ws_url, open_timeout=10) as ws:  # the token in the first frame
        await ws.send(json.dumps({"type": "auth", "token": access}))
        await ws.send(json.dumps({"type": "ping"}))
        assert json.loads(await ws.recv())["type"] == "pong"
    await wait_task(client, task_id, until=lambda d: d["status"] == "completed", within=20,
                    what="the task to complete")
    await sse_events(client, task_id, until={"task_complete"})
    assert (await client.get(f"/api/v1/tasks/{task_id}/download")).status_code == 200
    await _shared_report(client, url, run)


NOTE = """\
name: note
version: 1
description: One note, which is the report.
roles:
  writer: {prompt: "# A note on {query}", tools: [echo]}
steps:
  - {id: write, kind: agent, role: writer, writes: report}
result: report
"""


async def _shared_report(client: httpx.AsyncClient, url: str, run: Run) -> None:
    """A share link, opened and revoked: its token is a secret like any other."""
    assert (await client.post("/api/v1/workflows", json={"document": NOTE})).status_code == 201
    task_id = await submit(client, {"description": "Cats", "workflow": "note"})
    await wait_task(client, task_id, until=lambda d: d["status"] == "completed", within=20,
                    what="the note to be written")
    share = (await client.post(f"/api/v1/tasks/{task_id}/shares")).json()
    token = run.keep("share token", share["url"].rsplit("/", 1)[1])
    async with httpx.AsyncClient(base_url=url, timeout=15) as anyone:
        assert (await anyone.get(f"/s/{token}")).status_code == 200
        await client.delete(f"/api/v1/tasks/{task_id}/shares/{share['share_id']}")
        revoked = await anyone.get(f"/s/{token}")
        assert revoked.status_code == 404
        assert token not in revoked.text


async def _hostile(client: httpx.AsyncClient, url: str, access: str, password: str,
                   run: Run) -> None:
    anon = httpx.AsyncClient(base_url=url, timeout=15)
    forged = jwt.encode({"sub": str(uuid.uuid4()), "type": "access", "exp": 4_000_000_000},
                        "not-the-key-" + "x" * 40, algorithm="HS256")
    wrong = run.keep("wrong password", password + "-wrong")
    attempts: list[tuple[httpx.AsyncClient, str, str, dict[str, Any]]] = [
        (anon, "POST", "/api/v1/auth/login", {"json": {"username": "alice", "password": wrong}}),
        (anon, "POST", "/api/v1/auth/login", {"json": {"username": "al\x00ice",
                                                       "password": password}}),
        (anon, "GET", "/api/v1/tasks", {"headers": {"Authorization": f"Bearer {forged}"}}),
        (anon, "GET", "/api/v1/tasks", {"params": {"token": access}}),
        (anon, "POST", "/api/v1/auth/refresh", {"json": {"refresh_token": access}}),
        (client, "POST", "/api/v1/tasks", {"json": {"description": "x\x00y"}}),
        (client, "GET", "/api/v1/tasks", {"params": {"offset": 2**64}}),
        (client, "GET", f"/api/v1/tasks/{uuid.uuid4()}/events",
         {"headers": {"Last-Event-ID": "not-a-number"}}),
        (client, "POST", "/api/v1/users", {
            "content": json.dumps({"username": "bob", "password": password, "email": "b\ud800"}),
            "headers": {"content-type": "application/json"}}),
    ]
    async with anon:
        for who, method, path, kwargs in attempts:
            resp = run.record(await who.request(method, path, **kwargs))
            assert 400 <= resp.status_code < 500, f"{method} {path}: {resp.status_code}"
    ws_url = url.replace("http://", "ws://") + "/ws"
    for token in (forged, run.secrets["refresh token"]):
        async with connect(f"{ws_url}?token={token}", open_timeout=10) as ws:
            with pytest.raises(ConnectionClosed):
                await ws.recv()
