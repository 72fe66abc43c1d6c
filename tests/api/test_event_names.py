"""A workflow's own names for Shoal's events (`events:` in its document): the SSE stream and
the client WebSocket give them to a client that asks (`names=workflow`); stored events, and
clients that do not ask, stay Shoal's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from websockets.asyncio.client import connect

from shoal.api.server import RunningServer
from shoal.events import EventType
from shoal.worker.agent import Worker
from tests.runtime.harness import DEADLINE, wait_for_status

NAMED = """\
name: named
version: 1
description: One note, whose events have names of their own.
roles:
  writer: {prompt: "A note on {query}", tools: [echo]}
steps:
  - {id: write, kind: agent, role: writer}
events:
  step_started: {event: subtask_update, where: {status: in_progress}}
  step_done: {event: subtask_update, where: {status: completed}}
  all_done: {event: task_complete, report: true}
"""


async def _sse(client: httpx.AsyncClient, task: str, names: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    name = ""
    async with client.stream("GET", f"/api/v1/tasks/{task}/events",
                             params={"since": 0, "names": names}) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                found.append((name, json.loads(line[6:])))
                if found[-1][1]["type"] == "task_complete":
                    return found
    raise AssertionError("no task_complete")


async def test_a_client_that_asks_gets_the_workflows_names(
        server: RunningServer, client: httpx.AsyncClient, worker: Worker) -> None:
    added = await client.post("/api/v1/workflows", json={"document": NAMED})
    assert added.status_code == 201, added.text
    created = await client.post("/api/v1/tasks", json={"workflow": "named",
                                                       "description": "tides"})
    task = created.json()["task_id"]
    await wait_for_status(client, task, "completed")
    async with asyncio.timeout(DEADLINE):
        named = await _sse(client, task, "workflow")
        plain = await _sse(client, task, "shoal")
        token = client.headers["Authorization"].removeprefix("Bearer ")
        async with connect(server.url.replace("http://", "ws://") + f"/ws?token={token}") as ws:
            await ws.send(json.dumps({"type": "subscribe", "task_id": task, "since": 0,
                                      "names": "workflow"}))
            frames: list[dict[str, Any]] = []
            while not frames or frames[-1]["type"] != "task_complete":
                frames.append(json.loads(await ws.recv()))
    names = [n for n, _ in named]
    assert "step_started" in names
    assert "step_done" in names
    assert names[-1] == "all_done"
    assert named[-1][1]["data"]["report_url"] == f"/api/v1/tasks/{task}/report"
    shoals = {t.value for t in EventType}
    assert all(e["type"] in shoals for _, e in named)  # the events are Shoal's, as stored
    assert all(e.get("name") == n for n, e in named if n not in shoals)
    assert {n for n, _ in plain} <= {e["type"] for _, e in plain}  # no names unasked
    assert [f.get("name") for f in frames if f.get("name")] == [
        n for n in names if n in ("step_started", "step_done", "all_done")]
