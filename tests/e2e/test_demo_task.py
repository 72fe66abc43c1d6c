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
    wait_for,
    wait_healthy,
    wait_port,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


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


async def _finish_approving(
    client: httpx.AsyncClient, task_id: str, procs: list[Any], approved: list[dict[str, Any]]
) -> dict[str, Any]:
    """Wait for the task to end, approving every checkpoint it opens on the way."""

    async def check() -> dict[str, Any] | None:
        detail: dict[str, Any] = (await client.get(f"/api/v1/tasks/{task_id}")).json()
        if finished(detail):
            return detail
        if detail["status"] == "checkpoint_pending":
            page = (await client.get("/api/v1/checkpoints", params={
                "task_id": task_id, "status": "pending_review"})).json()
            for cp in page["checkpoints"]:
                resp = await client.post(f"/api/v1/checkpoints/{cp['checkpoint_id']}/approve")
                assert resp.status_code == 200, resp.text
                approved.append(cp)
        return None

    return await wait_for(check, within=120, what="the todo task to finish", procs=procs)


async def test_todo_task_completes_in_parallel_on_two_workers(stack: Cluster) -> None:
    """The todo task is planned, runs on both workers at once, goes through evaluation, peer
    review and checkpoints, and its zip holds working code."""
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
        approved: list[dict[str, Any]] = []
        detail = await _finish_approving(client, task_id, procs, approved)
        assert detail["status"] == "completed", detail
        work = [s for s in detail["subtasks"] if s["kind"] in ("agent", "expand")]
        subtasks = [s for s in work if s["kind"] == "agent"]
        assert len(subtasks) >= 4
        assert all(s["status"] == "completed" for s in work), work
        assert {s["assigned_worker"] for s in work} == {"wa", "wb"}
        # medium frequency, four subtasks: after the 2nd (50 %) and the 3rd (every 3, and
        # before the final one)
        assert [cp["reason"] for cp in approved].count("frequency") == 2, approved
        for sub in subtasks:
            evaluation = sub["evaluation"]
            assert evaluation is not None, sub
            assert evaluation["overall"] is not None, sub
            assert evaluation["scores"]["completeness"] == 9.0  # the demo judge's score
        code = next(s for s in subtasks if s["name"] == "Todo storage module")
        assert code["evaluation"]["scores"]["code_quality"] is not None
        assert code["evaluation"]["scores"]["security"] is not None
        reviewed = [s for s in subtasks if s["review"]]
        assert reviewed, "complexity-2 subtasks scored 8.x must be peer reviewed"
        for sub in reviewed:
            assert sub["review"]["reviewer_worker"] != sub["review"]["author_worker"]
        assert detail["evaluation_scores"]["overall"] is not None
        spans = await _succeeded_spans(client, work)
        assert any(_overlap(a, b) for i, a in enumerate(spans) for b in spans[i + 1 :]), spans
        resp = await client.get(f"/api/v1/tasks/{task_id}/download")
        assert resp.status_code == 200
        with zipfile.ZipFile(io.BytesIO(resp.content)) as archive:
            names = set(archive.namelist())
            assert {"todo.py", "cli.py", "test_todo.py", "README.md"} <= names, names
            source = archive.read("todo.py").decode()
        compile(source, "todo.py", "exec")
