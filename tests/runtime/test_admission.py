"""At most so many active tasks per user: more wait `queued` at their position, start in the
order they came once a slot frees, can be cancelled while they wait, and two control-plane
copies on one PostgreSQL never run one more between them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from tests.conftest import (
    POSTGRES_URL,
    drop_postgres,
    fresh_postgres,
    make_settings,
    require_service,
)
from tests.runtime.harness import (
    KeyedGates,
    echo_worker,
    login,
    max_running,
    max_running_by_commits,
    task_detail,
    wait_for_status,
    wait_until,
)

RUNNING = {"pending", "initializing", "in_progress", "checkpoint_pending", "awaiting_input"}


def gated(name: str) -> dict[str, Any]:
    """A task of one echo step that waits at gate `name`."""
    return {"description": f"Task {name}", "plan": [
        {"name": name, "description": "wait", "tool": "echo", "options": {"gate": name}}]}


async def submit(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    resp = await client.post("/api/v1/tasks", json=gated(name))
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


@contextlib.asynccontextmanager
async def plane(settings: Settings, *, worker: str = "w1", user: str | None = "alice",
                ) -> AsyncIterator[tuple[RunningServer, httpx.AsyncClient, KeyedGates]]:
    """A control plane with a worker of 8 slots whose echo tool waits at gates, and a client
    signed in as `user` (a new account; None: an anonymous client)."""
    tool = KeyedGates()
    async with running_server(settings) as srv, echo_worker(
            srv, settings, name=worker, slots=8, tools={"echo": tool}):
        client = (await login(srv, settings, user) if user
                  else httpx.AsyncClient(base_url=srv.url, timeout=30))
        try:
            yield srv, client, tool
        finally:
            await client.aclose()


async def test_the_fourth_and_fifth_wait_and_start_in_order(database_url: str,
                                                            tmp_path: Path) -> None:
    """With 3 slots, tasks 4 and 5 are queued at 1 and 2; each starts, in order, when a
    running one ends; a queued task can be cancelled."""
    settings = make_settings(tmp_path, database_url=database_url)
    async with plane(settings) as (_, client, gates):
        created = [await submit(client, f"t{i}") for i in range(1, 6)]
        assert [c["status"] for c in created[:3]] != ["queued"] * 3
        assert [(c["status"], c["queue_position"]) for c in created[3:]] == [
            ("queued", 1), ("queued", 2)]
        ids = [c["task_id"] for c in created]
        assert (await task_detail(client, ids[4]))["queue_position"] == 2
        gates.open("t1")
        await wait_for_status(client, ids[0], "completed")
        await wait_for_status(client, ids[3], *RUNNING)
        fifth = await task_detail(client, ids[4])
        assert (fifth["status"], fifth["queue_position"]) == ("queued", 1)
        cancelled = await client.post(f"/api/v1/tasks/{ids[4]}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert (await task_detail(client, ids[4]))["status"] == "cancelled"
        sixth = await submit(client, "t6")
        assert (sixth["status"], sixth["queue_position"]) == ("queued", 1)
        for name in ("t2", "t3", "t4", "t6"):
            gates.open(name)
        await wait_for_status(client, sixth["task_id"], "completed")
        details = [await task_detail(client, i) for i in [*ids[:4], sixth["task_id"]]]
    assert max_running(details) <= 3


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    url = await fresh_postgres(POSTGRES_URL)
    try:
        yield url
    finally:
        await drop_postgres(url, POSTGRES_URL)


@pytest.mark.postgres
async def test_two_copies_never_run_a_fourth(pg_url: str, tmp_path: Path) -> None:
    """Ten tasks of one user sent at once to two copies on one PostgreSQL: three hold slots,
    seven wait at positions 1 to 7 (a copy that loses a race for a slot decides again); as
    they finish, never more than three run."""
    a = make_settings(tmp_path / "a", database_url=pg_url, instance_id="a")
    b = make_settings(tmp_path / "b", database_url=pg_url, instance_id="b",
                      secret_key=a.secret_key)
    async with plane(a) as (_, client_a, gates_a), plane(
            b, worker="w2", user=None) as (_, client_b, gates_b):
        client_b.headers.update(client_a.headers)
        created = await asyncio.gather(*(submit(client_a if i % 2 else client_b, f"t{i}")
                                         for i in range(10)))
        queued = [await task_detail(client_a, c["task_id"]) for c in created
                  if c["status"] == "queued"]  # positions once every submission is stored
        assert sorted(d["queue_position"] for d in queued) == list(range(1, 8)), queued
        for name in [f"t{i}" for i in range(10)]:
            gates_a.open(name)
            gates_b.open(name)
        ids = [c["task_id"] for c in created]

        async def all_done() -> list[dict[str, Any]] | None:
            found = [await task_detail(client_a, i) for i in ids]
            return found if all(d["status"] == "completed" for d in found) else None

        await wait_until(all_done, what="every task to complete", within=60)
        assert await max_running_by_commits(client_a, ids) == 3  # three at first, never more
