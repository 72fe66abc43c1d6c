"""Deleting a task: everything of it goes (rows, events, files no other task has, the copies
its workers keep), nothing of another task that shares a file, and a crash half-way through the
file sweep is finished by the next round. Deleting an upload: only its owner learns that a
task still reads it."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from shoal.api.server import RunningServer, running_server
from shoal.artifacts.store import ArtifactStore
from shoal.store import deletion
from shoal.store.models import Base, utcnow
from tests.conftest import make_settings
from tests.runtime.harness import GatedEcho, echo_worker, login, wait_for_status, wait_until


def _plan(files: dict[str, str], **options: Any) -> list[dict[str, Any]]:
    return [{"name": "write", "description": "write files", "tool": "echo",
             "options": {"files": files, **options}}]


@pytest.fixture
async def server(database_url: str, tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = make_settings(tmp_path, database_url=database_url, file_sweep_grace=0,
                             file_sweep_interval=3600)
    async with running_server(settings) as srv:
        yield srv


async def _run(client: httpx.AsyncClient, files: dict[str, str], **options: Any) -> str:
    resp = await client.post("/api/v1/tasks", json={"description": "Write",
                                                    "plan": _plan(files, **options)})
    assert resp.status_code == 201, resp.text
    task_id = str(resp.json()["task_id"])
    if not options.get("gated"):
        await wait_for_status(client, task_id, "completed")
    return task_id


async def _rows_of(server: RunningServer, task_id: str) -> dict[str, int]:
    """How many rows of each table mention `task_id`."""
    counts: dict[str, int] = {}
    async with server.services.db.connection() as conn:
        for table in Base.metadata.sorted_tables:
            column = table.c.get("task_id") if table.name != "tasks" else table.c.id
            if column is None:
                continue
            n = (await conn.execute(sa.select(sa.func.count()).select_from(table).where(
                column == uuid.UUID(task_id)))).scalar()
            counts[table.name] = int(n or 0)
    return counts


def _stored(store: ArtifactStore) -> set[str]:
    return {p.parent.name + p.name for p in (store.root / "objects").glob("*/*")}


async def test_deleting_a_task_removes_it_all_and_spares_a_shared_file(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """Its rows and events go at once, its own file after the sweep; a file another task also
    wrote stays, with that task whole."""
    async with echo_worker(server, server.services.settings):
        mine = await _run(client, {"own.txt": "only mine", "shared.txt": "shared bytes"})
        other = await _run(client, {"shared.txt": "shared bytes"})
    store = server.services.artifacts
    before, other_rows = _stored(store), await _rows_of(server, other)
    had = await _rows_of(server, mine)
    assert all(had[t] for t in ("tasks", "subtasks", "attempts", "artifacts", "events")), had
    assert (await client.delete(f"/api/v1/tasks/{mine}")).status_code == 204
    assert (await client.get(f"/api/v1/tasks/{mine}")).status_code == 404
    assert (await client.delete(f"/api/v1/tasks/{mine}")).status_code == 404
    assert set((await _rows_of(server, mine)).values()) == {0}
    assert await _rows_of(server, other) == other_rows
    await server.services.runtime.files.sweep_once()
    after = _stored(store)
    assert len(before - after) == 1, "only the file no other task has goes"
    download = await client.get(f"/api/v1/tasks/{other}/download")
    assert download.status_code == 200
    async with server.services.db.connection() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM file_sweep"))).scalar() == 0


async def test_a_deleted_tasks_copies_leave_its_worker_at_once_or_when_it_returns(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """The worker that ran a task deletes the task's workspaces, and the search indexes of
    its sources no other task reads, as soon as the task is deleted; a worker that was away
    when a task was deleted deletes them when it connects again. Another task's stay."""
    settings = server.services.settings
    only, shared = b"# Only the first task reads me.", b"# Both tasks read me."
    uploaded = await client.post("/api/v1/uploads", files=[
        ("file", ("only.md", only)), ("file", ("shared.md", shared))])
    assert uploaded.status_code == 201, uploaded.text
    ids = [u["upload_id"] for u in uploaded.json()["uploads"]]
    tasks = []
    async with echo_worker(server, settings, name="w1") as worker:
        for sources in (ids, ids[1:]):
            resp = await client.post("/api/v1/tasks", json={
                "description": "Read", "sources": sources, "plan": _plan({"a.txt": "a"})})
            assert resp.status_code == 201, resp.text
            tasks.append(resp.json()["task_id"])
            await wait_for_status(client, tasks[-1], "completed")
        first, second = (worker.workspaces / t for t in tasks)
        assert (first / next(p.name for p in first.iterdir()) / "sources" / "only.md").exists()
        worker.indexes.mkdir(parents=True, exist_ok=True)
        index = {data: worker.indexes / f"{hashlib.sha256(data).hexdigest()}.v1.sqlite"
                 for data in (only, shared)}
        for path in index.values():  # as `shoal mcp sources` leaves them
            path.write_bytes(b"index")
        assert (await client.delete(f"/api/v1/tasks/{tasks[0]}")).status_code == 204
        await wait_until(lambda: not first.exists() and not index[only].exists(),
                         what="the worker to delete the first task's copies")
        assert second.is_dir()
        assert index[shared].exists()
    assert (await client.delete(f"/api/v1/tasks/{tasks[1]}")).status_code == 204
    assert second.is_dir()
    assert index[shared].exists()
    async with echo_worker(server, settings, name="w1"):
        await wait_until(lambda: not second.exists() and not index[shared].exists(),
                         what="the worker back to delete the second task's copies")


async def test_a_running_task_is_not_deleted_and_another_users_is_not_found(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """409 while it runs (cancel first), 404 for somebody else."""
    tool = GatedEcho()
    async with echo_worker(server, server.services.settings, tools={"echo": tool}):
        task_id = await _run(client, {"a.txt": "a"}, gated=True)
        refused = await client.delete(f"/api/v1/tasks/{task_id}")
        assert refused.status_code == 409, refused.text
        assert "cancel" in refused.json()["message"]
        bob = await login(server, server.services.settings, "bob")
        try:
            assert (await bob.delete(f"/api/v1/tasks/{task_id}")).status_code == 404
        finally:
            await bob.aclose()
        await client.post(f"/api/v1/tasks/{task_id}/cancel")
        assert (await client.delete(f"/api/v1/tasks/{task_id}")).status_code == 204
        tool.gate.set()


async def test_a_sweep_cut_short_is_finished_by_the_next(server: RunningServer) -> None:
    """A file removed without its sweep row cleared (a crash between the two) is no trouble:
    the next round finds it gone and clears the row."""
    store = server.services.artifacts
    sha = await store.put(b"lonely bytes")
    await server.services.db.run_write(
        lambda conn: deletion.queue_for_sweep(conn, [sha], now=utcnow()))
    store.path_of(sha).unlink()  # what the crashed round did before it could record it
    assert await server.services.runtime.files.sweep_once() == 1
    async with server.services.db.connection() as conn:
        assert (await conn.execute(sa.text("SELECT count(*) FROM file_sweep"))).scalar() == 0


async def test_numbers_of_deleted_events_are_never_given_again(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """When the deleted task's events were the newest, the next events still get higher
    numbers than any a reader has seen (SQLite would reuse them without AUTOINCREMENT)."""
    async with echo_worker(server, server.services.settings):
        task_id = await _run(client, {"a.txt": "a"})
        async with server.services.db.connection() as conn:
            newest = (await conn.execute(sa.text("SELECT max(seq) FROM events"))).scalar()
        assert (await client.delete(f"/api/v1/tasks/{task_id}")).status_code == 204
        later = await _run(client, {"b.txt": "b"})
    async with server.services.db.connection() as conn:
        first = (await conn.execute(sa.text(
            "SELECT min(seq) FROM events WHERE task_id = :t"),
            {"t": uuid.UUID(later).hex if server.services.db.dialect == "sqlite"
             else uuid.UUID(later)})).scalar()
    assert first > newest


async def test_another_users_upload_in_use_is_not_found_as_an_unknown_one(
    server: RunningServer, client: httpx.AsyncClient,
) -> None:
    """Another user deleting an upload that a task reads gets the 404 of an unknown id, not
    the 409 naming the owner's tasks; the owner gets that 409, and the upload stays."""
    sent = await client.post("/api/v1/uploads", files=[("file", ("a.md", b"# a"))])
    upload_id = sent.json()["uploads"][0]["upload_id"]
    async with echo_worker(server, server.services.settings):
        resp = await client.post("/api/v1/tasks", json={
            "description": "Read", "plan": _plan({"a.txt": "a"}), "sources": [upload_id]})
        task_id = resp.json()["task_id"]
        await wait_for_status(client, task_id, "completed")
    bob, unknown_id = await login(server, server.services.settings, "bob"), str(uuid.uuid4())
    try:
        foreign = await bob.delete(f"/api/v1/uploads/{upload_id}")
        unknown = await bob.delete(f"/api/v1/uploads/{unknown_id}")
    finally:
        await bob.aclose()
    assert foreign.status_code == unknown.status_code == 404, foreign.text
    assert foreign.content.replace(upload_id.encode(), b"<id>") == \
        unknown.content.replace(unknown_id.encode(), b"<id>")
    own = await client.delete(f"/api/v1/uploads/{upload_id}")
    assert own.status_code == 409, own.text
    assert own.json()["error"] == "upload_in_use"
    assert task_id in own.json()["message"]
    listed = (await client.get("/api/v1/uploads")).json()["uploads"]
    assert [u["upload_id"] for u in listed] == [upload_id]
