"""Tenancy and authentication against a real server process: 404 for others, 401 without a token."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.e2e.procs import (
    Cluster,
    access_token,
    cluster,
    free_port,
    receive_until,
    sse_events,
    submit,
    wait_healthy,
    wait_task,
    wait_workers_online,
    worker_socket,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90), pytest.mark.asyncio(loop_scope="module")]

PLAN = [
    {
        "name": "note",
        "description": "Write a note.",
        "tool": "echo",
        "options": {"files": {"note.txt": "private"}},
    }
]


@dataclass(frozen=True, slots=True)
class World:
    """A server with one worker, two users, and a finished task of Alice's."""

    stack: Cluster
    url: str
    alice: str  # access tokens
    bob: str
    worker_token: str
    task_id: str
    subtask_id: str

    def client(self, token: str | None) -> httpx.AsyncClient:
        """An HTTP client with `token` as its bearer token (none if None)."""
        return _client(self.url, token)


def _client(url: str, token: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=15)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    """One control plane for the whole module (the checks here only read)."""
    root: Path = tmp_path_factory.mktemp("security")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with cluster(root) as stack:
        await stack.create_user("alice", admin=True)
        server = stack.start_server(port)
        _, token = await asyncio.gather(stack.create_user("bob"), stack.create_worker_token("w1"))
        await wait_healthy(url, server)
        worker = stack.start_worker("w1", token, url)
        async with httpx.AsyncClient(base_url=url, timeout=15) as anon:
            alice, bob = await access_token(anon, "alice"), await access_token(anon, "bob")
        async with _client(url, alice) as client:
            await wait_workers_online(client, {"w1"}, [server, worker])
            task_id = await submit(client, {"description": "Alice's secret", "plan": PLAN})
            detail = await wait_task(
                client,
                task_id,
                within=20,
                what="Alice's task done",
                procs=[server, worker],
                until=lambda d: d["status"] == "completed",
            )
        yield World(stack, url, alice, bob, token, task_id, detail["subtasks"][0]["subtask_id"])


def _assert_error(resp: httpx.Response, status: int) -> None:
    assert resp.status_code == status, (resp.request.method, resp.request.url, resp.text)
    assert set(resp.json()) == {"error", "message", "details"}, resp.text


def _task_routes(world: World) -> list[tuple[str, str]]:
    t, s = world.task_id, world.subtask_id
    return [
        ("GET", f"/api/v1/tasks/{t}"),
        ("POST", f"/api/v1/tasks/{t}/cancel"),
        ("GET", f"/api/v1/tasks/{t}/download"),
        ("GET", f"/api/v1/tasks/{t}/subtasks"),
        ("GET", f"/api/v1/tasks/{t}/events"),
        ("GET", f"/api/v1/subtasks/{s}"),
        ("GET", f"/api/v1/subtasks/{s}/files"),
        ("GET", f"/api/v1/subtasks/{s}/files/note.txt"),
        ("GET", f"/api/v1/subtasks/{s}/previews/note.txt"),
    ]


async def test_a_workers_history_shows_only_the_callers_own_work(world: World) -> None:
    """Workers are shared; what they worked on is not: Bob sees none of Alice's subtasks in a
    worker's history, and Alice, an admin, sees hers."""
    async with world.client(world.bob) as bob, world.client(world.alice) as alice:
        [worker] = (await bob.get("/api/v1/workers")).json()["workers"]
        seen_by_bob = (await bob.get(f"/api/v1/workers/{worker['worker_id']}")).json()
        seen_by_alice = (await alice.get(f"/api/v1/workers/{worker['worker_id']}")).json()
    assert seen_by_bob["task_history"] == []
    assert seen_by_bob["current"] is None
    assert [h["subtask_id"] for h in seen_by_alice["task_history"]] == [world.subtask_id]


async def test_another_users_task_is_not_found(world: World) -> None:
    """Bob gets 404 on every route of Alice's task, and does not see it in his list."""
    async with world.client(world.bob) as bob:
        for method, path in _task_routes(world):
            _assert_error(await bob.request(method, path), 404)
        assert (await bob.get("/api/v1/tasks")).json()["tasks"] == []
    async with world.client(world.alice) as alice:
        resp = await alice.get(f"/api/v1/subtasks/{world.subtask_id}/files/note.txt")
        assert resp.status_code == 200
        assert resp.text == "private"
        shown = (await alice.get(f"/api/v1/subtasks/{world.subtask_id}/previews/note.txt")).json()
        assert (shown["html"], shown["previous_attempt_id"]) == ("private\n", None)
        assert (await alice.get(f"/api/v1/tasks/{world.task_id}")).json()["status"] == "completed"


async def test_another_users_events_never_reach_the_websocket(world: World) -> None:
    """Bob's client WebSocket, replaying from the start, shows nothing of Alice's task."""
    async with world.client(world.alice) as alice:
        alices = await sse_events(alice, world.task_id, until={"task_complete"})
    newest = max(e["seq"] for e in alices)
    seen: list[dict[str, Any]] = []
    ws_url = f"{world.url.replace('http', 'ws')}/ws?token={world.bob}&since=0"
    async with connect(ws_url) as ws:  # read until the worker's heartbeats pass Alice's events
        async with asyncio.timeout(15):
            while not seen or seen[-1].get("seq", 0) <= newest:
                seen.append(json.loads(await ws.recv()))
    assert {m["type"] for m in seen} <= {"worker_update", "caught_up"}, seen
    assert world.task_id not in json.dumps(seen)


async def test_every_api_route_needs_a_token(world: World) -> None:
    """Without credentials every /api/v1 route answers 401 with the error shape."""
    some = str(uuid.uuid4())
    routes = [
        *_task_routes(world),
        ("GET", "/api/v1/tasks"),
        ("POST", "/api/v1/tasks"),
        ("GET", "/api/v1/workers"),
        ("GET", f"/api/v1/workers/{some}"),
        ("GET", "/api/v1/workers/tokens"),
        ("POST", "/api/v1/workers/tokens"),
        ("DELETE", f"/api/v1/workers/tokens/{some}"),
        ("GET", "/api/v1/users/me"),
        ("POST", "/api/v1/users"),
    ]
    bodies = {
        "/api/v1/tasks": {"description": "x"},
        "/api/v1/workers/tokens": {"name": "x"},
        "/api/v1/users": {"username": "eve", "password": "password123"},
    }
    async with world.client(None) as anon:
        for method, path in routes:
            body = bodies.get(path) if method == "POST" else None
            resp = await anon.request(method, path, json=body)
            _assert_error(resp, 401)
            assert resp.headers["www-authenticate"] == "Bearer"
    async with world.client("not-a-jwt") as forged:
        _assert_error(await forged.get("/api/v1/tasks"), 401)


async def test_health_needs_no_token(world: World) -> None:
    """/healthz answers without credentials."""
    async with world.client(None) as anon:
        resp = await anon.get("/healthz")
    assert resp.status_code == 200
    assert resp.json()["status"] == "ok"


async def test_worker_token_is_not_a_user_token(world: World) -> None:
    """A worker token opens neither the REST API nor the client WebSocket."""
    async with world.client(world.worker_token) as as_worker:
        _assert_error(await as_worker.get("/api/v1/tasks"), 401)
        _assert_error(await as_worker.get(f"/api/v1/tasks/{world.task_id}"), 401)
    assert await _refused(f"{world.url.replace('http', 'ws')}/ws?token={world.worker_token}")


async def test_revoked_or_unknown_worker_token_cannot_connect(world: World) -> None:
    """/ws/worker refuses an unknown token and a revoked one, and still takes a live one."""
    doomed = await world.stack.create_worker_token("doomed")
    async with world.client(world.alice) as admin:
        tokens = (await admin.get("/api/v1/workers/tokens")).json()
        token_id = next(t["token_id"] for t in tokens if t["name"] == "doomed")
        assert (await admin.delete(f"/api/v1/workers/tokens/{token_id}")).status_code == 204
    assert await _worker_refused(world.url, doomed)
    assert await _worker_refused(world.url, "shw_" + "x" * 43)
    assert await _worker_refused(world.url, world.alice)
    async with worker_socket(world.url, world.worker_token) as ws:  # the live one still works
        await ws.send(
            json.dumps(
                {
                    "type": "worker_register",
                    "v": 1,
                    "machine_id": "probe",
                    "machine_name": "probe",
                    "tools": [],
                }
            )
        )
        await receive_until(ws, lambda m: m["type"] == "registered")


async def _worker_refused(url: str, token: str) -> bool:
    try:
        async with worker_socket(url, token) as ws:
            await ws.send(
                json.dumps(
                    {
                        "type": "worker_register",
                        "v": 1,
                        "machine_id": "intruder",
                        "machine_name": "intruder",
                    }
                )
            )
            await ws.recv()
    except InvalidStatus as exc:
        return exc.response.status_code in (401, 403)
    except ConnectionClosed as exc:
        return exc.rcvd is not None and exc.rcvd.code == 4401
    return False


async def _refused(ws_url: str) -> bool:
    try:
        async with connect(ws_url) as ws:
            await ws.send(json.dumps({"type": "ping"}))
            await ws.recv()
    except InvalidStatus as exc:
        return exc.response.status_code in (401, 403)
    except ConnectionClosed as exc:
        return exc.rcvd is not None and exc.rcvd.code == 4401
    return False
