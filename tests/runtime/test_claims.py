"""Two control-plane copies on one database: each drives only the tasks it holds a claim on."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from structlog.testing import capture_logs

from shoal.api.app import build_services
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.errors import Conflict, Unavailable
from shoal.runtime import ownership
from shoal.runtime.fleet import Fleet
from shoal.runtime.jobs import Job
from shoal.runtime.memory import TaskMemory
from shoal.store import workers as worker_rows
from shoal.store.claims import Claim, claim_of
from shoal.store.db import Database
from shoal.tools.base import Tool
from shoal.worker.connection import Backoff
from tests.conftest import (
    POSTGRES_URL,
    drop_postgres,
    fresh_postgres,
    make_settings,
    require_service,
)
from tests.runtime.harness import (
    DEADLINE,
    GatedEcho,
    attempt_statuses,
    echo_worker,
    login,
    submit,
    wait_for_status,
    wait_until,
)

ONE_STEP = [{"name": "a", "description": "echo", "tool": "echo"}]


def runtime_task() -> asyncio.Task[None]:
    """The one control-plane runtime running in this process (the app names it)."""
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == "shoal-runtime"]
    return task


@dataclass
class Copies:
    """Copy "a" (whose runtime task the test may cancel, as a crash) and copy "b", which has
    the only worker: copy "a" cannot run the tasks it holds."""

    a: RunningServer
    a_runtime: asyncio.Task[None]
    a_stop: contextlib.AsyncExitStack  # closing it stops copy "a" gracefully
    b: RunningServer
    b_settings: Settings
    client_a: httpx.AsyncClient
    client_b: httpx.AsyncClient  # the same user, talking to copy "b"

    async def crash_a(self) -> None:
        """Stop copy "a"'s runtime the way a crash does: no release of its claims. (Cancelled
        again until it ends: redis-py may swallow a cancellation that lands inside one of its
        calls, as asyncio.timeout did before Python 3.12.)"""
        while not self.a_runtime.done():
            self.a_runtime.cancel()
            await asyncio.wait({self.a_runtime}, timeout=0.5)
        with contextlib.suppress(asyncio.CancelledError):
            await self.a_runtime

    async def claim(self, task_id: str) -> Claim:
        async with self.b.services.db.connection() as conn:
            claim = await conn.run_sync(claim_of, uuid.UUID(task_id))
        assert claim is not None
        return claim

    def held_by_b(self, task_id: str) -> bool:
        return uuid.UUID(task_id) in self.b.services.runtime.memory.states


@contextlib.asynccontextmanager
async def two_copies(
    database_url: str, tmp_path: Path, *, claim_ttl: float, b_claim_interval: float = 0.2,
    redis_url: str | None = None, worker_tools: Mapping[str, Tool] | None = None,
    worker_slots: int = 2, **overrides: object,
) -> AsyncIterator[Copies]:
    """Copies "a" and "b" of the control plane sharing `database_url` (and one data folder);
    "a" claims for `claim_ttl` seconds, "b" looks for orphaned tasks every `b_claim_interval`;
    with `redis_url`, they share that Redis (events, and commands forwarded to the owner).
    One worker with `worker_slots` slots is connected to "b"; `overrides` are both's settings."""
    settings_a = make_settings(tmp_path, database_url=database_url, instance_id="a",
                               claim_ttl=claim_ttl, claim_interval=0.2, redis_url=redis_url,
                               **overrides)
    settings_b = make_settings(tmp_path, database_url=database_url, instance_id="b",
                               claim_ttl=max(claim_ttl, 2 * b_claim_interval),
                               claim_interval=b_claim_interval, redis_url=redis_url,
                               **overrides)
    async with contextlib.AsyncExitStack() as stack:
        a_stop = contextlib.AsyncExitStack()
        stack.push_async_callback(a_stop.aclose)
        a = await a_stop.enter_async_context(running_server(settings_a))
        a_runtime = runtime_task()  # copy "a"'s, the only one running yet
        b = await stack.enter_async_context(running_server(settings_b))
        client_a = await login(a, settings_a)
        stack.push_async_callback(client_a.aclose)
        client_b = httpx.AsyncClient(base_url=b.url, headers=client_a.headers, timeout=30)
        stack.push_async_callback(client_b.aclose)
        await stack.enter_async_context(echo_worker(b, settings_b, tools=worker_tools,
                                                    slots=worker_slots))

        async def online() -> bool:  # copy "a" accepts tasks only once the store says so
            since = datetime.now(UTC) - timedelta(seconds=settings_a.lease_seconds)
            async with a.services.db.connection() as conn:
                return await worker_rows.any_online(conn, since=since)

        await wait_until(online, what="the worker to be online in the store")
        yield Copies(a=a, a_runtime=a_runtime, a_stop=a_stop, b=b, b_settings=settings_b,
                     client_a=client_a, client_b=client_b)


@pytest.fixture
async def copies(database_url: str, tmp_path: Path) -> AsyncIterator[Copies]:
    async with two_copies(database_url, tmp_path, claim_ttl=3.0) as pair:
        yield pair


async def test_task_is_held_by_the_copy_that_created_it(copies: Copies) -> None:
    """A task submitted to copy "a" is claimed by "a" and not loaded by copy "b"."""
    task_id = await submit(copies.client_a, ONE_STEP)
    claim = await copies.claim(task_id)
    assert claim.owner == "a"
    assert uuid.UUID(task_id) in copies.a.services.runtime.memory.states
    assert not copies.held_by_b(task_id)


async def test_cancel_sent_to_another_copy_is_refused_while_the_owner_lives(
    copies: Copies,
) -> None:
    """Without Redis (no way to reach "a"), copy "b" answers 503 task_owned_elsewhere, with a
    retry hint, for "a"'s live task (`test_forwarding.py`: with Redis, "a" decides it)."""
    task_id = await submit(copies.client_a, ONE_STEP)
    resp = await copies.client_b.post(f"/api/v1/tasks/{task_id}/cancel")
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"] == "task_owned_elsewhere"
    assert int(resp.headers["Retry-After"]) >= 1
    assert (await copies.claim(task_id)).owner == "a"
    assert not copies.held_by_b(task_id)


async def test_cancel_of_another_users_task_is_404_wherever_it_runs(copies: Copies) -> None:
    """Another user cancelling "a"'s task through copy "b" learns nothing: 404, not 503."""
    task_id = await submit(copies.client_a, ONE_STEP)
    mallory = await login(copies.b, copies.b_settings, name="mallory")
    try:
        resp = await mallory.post(f"/api/v1/tasks/{task_id}/cancel")
    finally:
        await mallory.aclose()
    assert resp.status_code == 404, resp.text


async def test_crashed_copys_task_is_taken_over_and_finished(copies: Copies) -> None:
    """When "a" dies without releasing, "b" claims its task once the claim expires and runs it."""
    task_id = await submit(copies.client_a, ONE_STEP)
    await copies.crash_a()
    detail = await wait_for_status(copies.client_b, task_id, "completed", "failed")
    assert detail["status"] == "completed", detail
    assert (await copies.claim(task_id)).owner == "b"


async def test_command_for_a_crashed_copys_task_claims_it_at_once(
    database_url: str, tmp_path: Path
) -> None:
    """A cancel sent to "b" for a task whose owner died and whose claim expired is carried out
    there and then, before "b" would have looked for orphaned tasks (a minute)."""
    async with two_copies(database_url, tmp_path, claim_ttl=1.0, b_claim_interval=60) as pair:
        task_id = await submit(pair.client_a, ONE_STEP)
        await pair.crash_a()

        async def expired() -> bool:
            claim = await pair.claim(task_id)
            return claim.expires_at is not None and claim.expires_at < datetime.now(UTC)

        await wait_until(expired, what='copy "a"\'s claim to expire')
        resp = await pair.client_b.post(f"/api/v1/tasks/{task_id}/cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"
        assert (await pair.claim(task_id)).owner == "b"


async def test_gracefully_stopped_copy_hands_its_tasks_over_at_once(
    database_url: str, tmp_path: Path
) -> None:
    """A copy that stops gracefully releases its claims: another copy runs the task long before
    the claim (a minute) would have expired."""
    async with two_copies(database_url, tmp_path, claim_ttl=60) as pair:
        task_id = await submit(pair.client_a, ONE_STEP)
        await pair.a_stop.aclose()
        detail = await wait_for_status(pair.client_b, task_id, "completed", "failed")
    assert detail["status"] == "completed", detail


async def test_copy_restarted_under_a_new_id_adopts_the_attempt_still_running(
    database_url: str, tmp_path: Path
) -> None:
    """After a crash, a copy with another id waits out the dead copy's claim, then adopts the
    attempt its reconnected worker still runs: that subtask finishes once, nothing re-runs."""
    common = {"database_url": database_url, "claim_ttl": 1.5, "claim_interval": 0.2}
    settings_a = make_settings(tmp_path, instance_id="a", **common)
    tool = GatedEcho()
    async with contextlib.AsyncExitStack() as stack:
        first = contextlib.AsyncExitStack()
        stack.push_async_callback(first.aclose)
        a = await first.enter_async_context(running_server(settings_a))
        a_runtime = runtime_task()
        client = await login(a, settings_a)
        stack.push_async_callback(client.aclose)
        await stack.enter_async_context(echo_worker(
            a, settings_a, backoff=Backoff(base=0.05, cap=0.2), tools={"echo": tool}))
        task_id = await submit(client, [
            {"name": "a", "description": "held", "tool": "echo", "options": {"gated": True}},
            {"name": "b", "description": "after a", "tool": "echo", "dependencies": ["a"]},
        ])
        await asyncio.wait_for(tool.started.wait(), DEADLINE)
        a_runtime.cancel()  # a crash: copy "a" keeps its claim until it expires
        with contextlib.suppress(asyncio.CancelledError):
            await a_runtime
        await first.aclose()
        b = await stack.enter_async_context(running_server(
            make_settings(tmp_path, instance_id="b", **common), port=urlsplit(a.url).port or 0))
        memory = b.services.runtime.memory
        await wait_until(lambda: uuid.UUID(task_id) in memory.states,
                         what='copy "b" to take the task over')
        (attempt_id,) = memory.states[uuid.UUID(task_id)].attempts
        grace = memory.leases[attempt_id]
        await wait_until(lambda: memory.leases.get(attempt_id, grace) > grace,
                         what="the worker's heartbeat to renew the adopted attempt's lease")
        tool.gate.set()
        detail = await wait_for_status(client, task_id, "completed", "failed")
        statuses = await attempt_statuses(client, detail)
    assert detail["status"] == "completed", detail
    assert statuses == [["succeeded"], ["succeeded"]]
    assert tool.runs == 2


@pytest.mark.postgres
async def test_a_second_copy_under_the_same_id_stops_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies may not share an instance id: the second one's start-up fails (after a short
    wait for a dead copy's lock to go), and once the first has stopped the id is free again."""
    require_service(POSTGRES_URL, "PostgreSQL", "SHOAL_TEST_POSTGRES_URL")
    monkeypatch.setattr(ownership, "NAME_LOCK_WAIT", 0.5)
    url = await fresh_postgres(POSTGRES_URL)
    settings = make_settings(tmp_path, database_url=url, instance_id="same")
    try:
        first = await build_services(settings)
        running = asyncio.create_task(first.runtime.run())
        await asyncio.wait_for(first.runtime.ready.wait(), DEADLINE)
        second = await build_services(settings)
        with pytest.raises(Conflict, match="running as instance 'same'") as refused:
            await asyncio.wait_for(second.runtime.run(), DEADLINE)
        assert refused.value.code == "instance_id_in_use"
        await second.db.dispose()
        first.runtime.stop()
        await asyncio.wait_for(running, DEADLINE)
        await first.db.dispose()
        third = await build_services(settings)  # the name was let go of with the claims
        running = asyncio.create_task(third.runtime.run())
        await asyncio.wait_for(third.runtime.ready.wait(), DEADLINE)
        third.runtime.stop()
        await asyncio.wait_for(running, DEADLINE)
        await third.db.dispose()
    finally:
        await drop_postgres(url, POSTGRES_URL)


async def test_a_renewal_late_by_half_its_margin_is_logged(tmp_path: Path) -> None:
    """A copy whose renewal is late by more than half the margin its `claim_ttl` leaves after
    its `claim_interval` says so (the loop or the process stalled: the whole margin would have
    cost it its tasks); one on time says nothing."""
    settings = make_settings(tmp_path, claim_ttl=10.0, claim_interval=0.01)
    db = Database.connect(f"sqlite+aiosqlite:///{tmp_path}/unused.db")  # keep() reads none
    keeper = ownership.Ownership(settings, db, TaskMemory(lambda: datetime.now(UTC)), Fleet())
    now = [100.0]
    stalls = iter([0.0, 6.0, 4.9])  # seconds each renewal takes (margin 9.99 s): on time,
    # late, on time

    async def renew(job: Job) -> ownership.Renewal:
        stall = next(stalls, None)
        if stall is None:
            raise Unavailable("stopping", code="shutting_down")
        now[0] += stall
        return ownership.Renewal(lost=frozenset(), taken=frozenset())

    with capture_logs() as logs:
        await asyncio.wait_for(keeper.keep(renew, lambda job: None, clock=lambda: now[0]),
                               DEADLINE)
    await db.dispose()
    late = [e for e in logs if e["event"] == "runtime.claims_renewed_late"]
    assert [(e["seconds"], e["claim_ttl"]) for e in late] == [(6.0, 10.0)]
