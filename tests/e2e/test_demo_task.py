"""The demo todo task runs end to end on real server, model and two worker processes."""

from __future__ import annotations

import asyncio
import io
import zipfile
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.e2e.procs import (
    Cluster,
    finished,
    free_port,
    signed_in,
    submit,
    wait_healthy,
    wait_port,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def _overlap(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


async def _succeeded_spans(
    client: httpx.AsyncClient, subtasks: list[dict[str, Any]]
) -> list[tuple[datetime, datetime]]:
    spans = []
    for sub in subtasks:
        detail = (await client.get(f"/api/v1/subtasks/{sub['subtask_id']}")).json()
        for att in detail["attempt_history"]:
            if att["status"] == "succeeded":
                spans.append(
                    (
                        datetime.fromisoformat(att["dispatched_at"]),
                        datetime.fromisoformat(att["finished_at"]),
                    )
                )
    return spans


async def test_todo_task_completes_in_parallel_on_two_workers(stack: Cluster) -> None:
    """The todo task is planned, runs on both workers at once, and its zip holds working code."""
    port, model_port = free_port(), free_port()
    url, model_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{model_port}/v1"
    await stack.create_user("alice")  # also migrates the database
    model = stack.start_demo_model(model_port)
    server = stack.start_server(port)
    tokens = await asyncio.gather(stack.create_worker_token("wa"), stack.create_worker_token("wb"))
    await asyncio.gather(wait_healthy(url, server), wait_port(model_port, model))
    workers = [
        stack.start_worker(name, token, url, slots=1, model_url=model_url)
        for name, token in zip(("wa", "wb"), tokens, strict=True)
    ]
    procs = [server, model, *workers]
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"wa", "wb"}, procs)
        task_id = await submit(client, {"description": "Build a CLI todo app with tests"})
        detail = await wait_task(
            client, task_id, until=finished, within=40, what="the todo task to finish", procs=procs
        )
        assert detail["status"] == "completed", detail
        subtasks = detail["subtasks"]
        assert len(subtasks) >= 4
        assert all(s["status"] == "completed" for s in subtasks), subtasks
        assert {s["assigned_worker"] for s in subtasks} == {"wa", "wb"}
        spans = await _succeeded_spans(client, subtasks)
        assert any(_overlap(a, b) for i, a in enumerate(spans) for b in spans[i + 1 :]), spans
        resp = await client.get(f"/api/v1/tasks/{task_id}/download")
        assert resp.status_code == 200
        with zipfile.ZipFile(io.BytesIO(resp.content)) as archive:
            names = set(archive.namelist())
            assert {"todo.py", "cli.py", "test_todo.py", "README.md"} <= names, names
            source = archive.read("todo.py").decode()
        compile(source, "todo.py", "exec")
