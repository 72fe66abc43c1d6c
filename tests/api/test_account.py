"""Exporting an account: one zip with the account, each task's detail, events and files, and
the uploads; nothing of another user's."""

from __future__ import annotations

import io
import json
import zipfile

import httpx

from shoal.api.server import RunningServer
from shoal.worker.agent import Worker
from tests.runtime.harness import login, wait_for_status


async def test_the_export_holds_everything_of_yours_and_nothing_else(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """Account, tasks (detail, events, files) and uploads; another user's task is absent."""
    up = await client.post("/api/v1/uploads", files=[("file", ("notes.md", b"# Mine"))])
    assert up.status_code == 201, up.text
    plan = [{"name": "write", "description": "w", "tool": "echo",
             "options": {"files": {"out.txt": "hello"}}}]
    task_id = (await client.post("/api/v1/tasks", json={"description": "Mine",
                                                        "plan": plan})).json()["task_id"]
    await wait_for_status(client, task_id, "completed")
    bob = await login(server, server.services.settings, "bob")
    try:
        theirs = (await bob.post("/api/v1/tasks", json={"description": "Theirs",
                                                        "plan": plan})).json()["task_id"]
        await wait_for_status(bob, theirs, "completed")
    finally:
        await bob.aclose()
    resp = await client.get("/api/v1/export")
    assert resp.status_code == 200, resp.text
    archive = zipfile.ZipFile(io.BytesIO(resp.content))
    names = set(archive.namelist())
    assert json.loads(archive.read("account.json"))["username"] == "alice"
    assert [t["task_id"] for t in json.loads(archive.read("tasks.json"))] == [task_id]
    detail = json.loads(archive.read(f"tasks/{task_id}/task.json"))
    assert detail["status"] == "completed"
    events = archive.read(f"tasks/{task_id}/events.jsonl").decode().splitlines()
    assert json.loads(events[-1])["type"] == "task_complete"
    (out,) = [n for n in names if n.startswith(f"tasks/{task_id}/files/")]
    assert out.endswith("/out.txt")
    assert archive.read(out) == b"hello"
    upload_id = up.json()["uploads"][0]["upload_id"]
    assert archive.read(f"uploads/{upload_id}/notes.md") == b"# Mine"
    assert not any(theirs in n for n in names)
