"""A deleted task leaves nothing of it on a remote worker's disk: the `shoal worker` process that
ran it deletes the task's workspaces at once, and one that was down (kill -9) when the task was
deleted deletes them when it comes back, from the same data folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.e2e.procs import (
    Cluster,
    Proc,
    finished,
    free_port,
    signed_in,
    submit,
    wait_for,
    wait_healthy,
    wait_task,
    wait_workers_online,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
PLAN = [{"name": "write", "description": "Write a file.", "tool": "echo",
         "options": {"files": {"notes.txt": "the user's words"}}}]


async def _run(client: httpx.AsyncClient, procs: list[Proc]) -> str:
    task_id = await submit(client, {"description": "Write my notes", "plan": PLAN})
    detail = await wait_task(client, task_id, until=finished, within=30, what="the task",
                             procs=procs)
    assert detail["status"] == "completed", detail
    return task_id


async def _gone(folder: Path, procs: list[Proc], what: str) -> None:
    async def absent() -> bool:
        return not await asyncio.to_thread(folder.exists)

    await wait_for(absent, within=20, what=what, procs=procs)


async def test_a_remote_worker_deletes_what_it_kept_of_a_deleted_task(stack: Cluster) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    await stack.create_user("alice")
    server = stack.start_server(port)
    token = await stack.create_worker_token("remote")
    await wait_healthy(url, server)
    worker = stack.start_worker("remote", token, url)
    workspaces = stack.root / "worker-remote" / "worker" / "remote" / "workspaces"
    async with signed_in(url, "alice") as client:
        await wait_workers_online(client, {"remote"}, [server, worker])
        first = await _run(client, [server, worker])
        assert any((workspaces / first).rglob("notes.txt"))
        assert (await client.delete(f"/api/v1/tasks/{first}")).status_code == 204
        await _gone(workspaces / first, [server, worker], "the worker to delete the task")

        second = await _run(client, [server, worker])
        await worker.kill()
        assert (await client.delete(f"/api/v1/tasks/{second}")).status_code == 204
        assert (workspaces / second).is_dir()  # down: nobody to tell
        again = stack.start_worker("remote", token, url)
        await _gone(workspaces / second, [server, again],
                    "the worker, back, to delete the task deleted while it was down")
