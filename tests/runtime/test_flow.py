"""A task runs end to end through the real runtime, API and a worker over WebSockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shoal import admin
from shoal.config import Settings
from shoal.testing.server import RunningServer, running_server
from shoal.tools.echo import EchoTool
from shoal.worker.agent import Worker


async def sse_events(
    client: httpx.AsyncClient, task_id: str, *, until: set[str], timeout: float = 30
) -> list[dict[str, Any]]:
    """Read a task's SSE stream until an event of a type in `until` arrives."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        async with client.stream("GET", f"/api/v1/tasks/{task_id}/events") as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["type"] in until:
                        return seen
    return seen


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings) as srv:
        yield srv


async def login(srv: RunningServer, settings: Settings, name: str = "alice") -> httpx.AsyncClient:
    await admin.create_user(srv.services.db, settings, username=name, password="password123")
    client = httpx.AsyncClient(base_url=srv.url, timeout=30)
    resp = await client.post("/api/v1/auth/login",
                             json={"username": name, "password": "password123"})
    client.headers["Authorization"] = f"Bearer {resp.json()['access_token']}"
    return client


async def test_explicit_plan_runs_to_completion(server: RunningServer, settings: Settings) -> None:
    """A user plan of echo subtasks completes and files come back."""
    token = await admin.create_worker_token(server.services.db, name="w1")
    worker = Worker(server.url, token, settings, tools={"echo": EchoTool()}, name="w1", slots=2)
    client = await login(server, settings)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(worker.run())
        while not len(server.services.runtime.fleet):
            await asyncio.sleep(0.01)
        plan = [{"name": "a", "description": "first", "tool": "echo",
                 "options": {"files": {"a.txt": "hello"}}},
                {"name": "b", "description": "second", "tool": "echo", "dependencies": ["a"]}]
        resp = await client.post("/api/v1/tasks", json={"description": "Echo things", "plan": plan})
        assert resp.status_code == 201, resp.text
        task_id = resp.json()["task_id"]
        events = await sse_events(client, task_id, until={"task_complete", "task_failed"})
        assert events[-1]["type"] == "task_complete"
        detail = (await client.get(f"/api/v1/tasks/{task_id}")).json()
        assert detail["status"] == "completed"
        assert [s["status"] for s in detail["subtasks"]] == ["completed", "completed"]
        sub_a = detail["subtasks"][0]["subtask_id"]
        files = (await client.get(f"/api/v1/subtasks/{sub_a}/files")).json()["files"]
        assert [f["path"] for f in files] == ["a.txt"]
        worker.stop()
    await client.aclose()
