"""A lease measures a worker's silence as this copy heard it. When the copy's runtime stalls
for longer than a lease (its store slow to answer: the copies of a CI run under load saw 3 to 5 s),
the heartbeats and results that arrived meanwhile wait in its inbox behind the sweeper's ticks.
A tick judges the leases as of when it was due, not as of when the runtime got to it, so an
attempt whose worker kept heartbeating is not expired, re-run and cancelled on the way out of
the stall; one whose worker fell silent still is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.config import Settings
from shoal.runtime.jobs import Admit, Tick, sweep_at
from shoal.store.models import utcnow
from tests.e2e.procs import receive_until
from tests.runtime.harness import login, submit, subtask_detail, task_detail, wait_until

LEASE = 1.0


def _settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"lease_seconds": LEASE, "heartbeat_interval": 0.2,
                                       "sweep_interval": 0.05})


@contextlib.asynccontextmanager
async def _stalled(srv: RunningServer) -> AsyncIterator[asyncio.Event]:
    """The runtime busy in one batch until the event is set, as it is while its store does not
    answer: the event loop goes on reading the sockets and the sweeper goes on ticking."""
    runtime = srv.services.runtime
    release, entered = asyncio.Event(), asyncio.Event()
    own = runtime._handlers[Admit]

    async def stuck(*args: Any) -> None:
        entered.set()
        await release.wait()

    runtime._handlers[Admit] = stuck
    runtime._post(Admit(frozenset()))
    await asyncio.wait_for(entered.wait(), 10)
    try:
        yield release
    finally:
        release.set()
        runtime._handlers[Admit] = own


@contextlib.asynccontextmanager
async def _one_attempt(settings: Settings) -> AsyncIterator[tuple[
        RunningServer, ClientConnection, Any, str, dict[str, Any]]]:
    """A control plane, a raw worker connected to it, and a one-subtask task whose attempt that
    worker has been sent: (server, worker socket, signed-in client, task id, execute_task)."""
    async with running_server(_settings(settings)) as srv:
        token = await admin.create_worker_token(srv.services.db, name="raw")
        url = srv.url.replace("http://", "ws://") + "/ws/worker"
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await ws.send(json.dumps({
                "v": 1, "type": "worker_register", "machine_id": f"raw-{uuid.uuid4()}",
                "machine_name": "raw", "slots": 4, "tools": [{"name": "echo", "local": True}],
                "features": ["batches", "acks"]}))
            await receive_until(ws, lambda m: m["type"] == "registered")
            client = await login(srv, srv.services.settings)
            try:
                task_id = await submit(client, [{"name": "a", "description": "Say a",
                                                 "tool": "echo"}])
                sent = await receive_until(ws, lambda m: m["type"] in ("execute_task",
                                                                       "execute_tasks"))
                yield srv, ws, client, task_id, (sent["tasks"][0]
                                                 if sent["type"] == "execute_tasks" else sent)
            finally:
                await client.aclose()


async def _two_leases_stalled(srv: RunningServer) -> None:
    """The runtime stuck for two leases while the sockets are read and the ticks posted."""
    runtime = srv.services.runtime
    async with _stalled(srv):
        stalled_at = runtime._clock()
        await wait_until(lambda: runtime._clock() > stalled_at + timedelta(seconds=2 * LEASE),
                         what="two leases of stall", within=10)


async def _beat(ws: ClientConnection, running: list[str]) -> None:
    """Heartbeat `running` every 0.1 s (well within the 1 s lease), until cancelled."""
    while True:
        await ws.send(json.dumps({"v": 1, "type": "heartbeat", "running": running}))
        await asyncio.sleep(0.1)


async def test_heartbeats_that_waited_out_a_stall_keep_their_attempts(
    settings: Settings,
) -> None:
    async with _one_attempt(settings) as (srv, ws, client, task_id, attempt):
        beating = asyncio.create_task(_beat(ws, [attempt["attempt_id"]]))
        await _two_leases_stalled(srv)  # the heartbeats and ticks queue up behind the stall
        beating.cancel()
        await ws.send(json.dumps({"v": 1, "type": "task_result",
                                  "attempt_id": attempt["attempt_id"], "fence": attempt["fence"],
                                  "status": "succeeded", "output": "a",
                                  "duration_seconds": 0.1}))
        detail = await wait_until(lambda: _ended(client, task_id), what="the task to end")
        sub = await subtask_detail(client, detail["subtasks"][0]["subtask_id"])
    assert detail["status"] == "completed", detail
    history = sub["attempt_history"]
    assert [(a["attempt_id"], a["status"]) for a in history] == [
        (attempt["attempt_id"], "succeeded")], history  # not expired, not run again


async def test_a_worker_silent_through_the_stall_still_loses_its_attempt(
    settings: Settings,
) -> None:
    async with _one_attempt(settings) as (srv, ws, _client, _task_id, attempt):
        await _two_leases_stalled(srv)
        cancel = await receive_until(ws, lambda m: m["type"] == "cancel_task")
    assert cancel["attempt_id"] == attempt["attempt_id"]


def test_a_tick_is_as_of_when_it_was_due() -> None:
    """The sweeper's look is dated when it was due: later only by what the loop was late."""
    now = utcnow()
    assert sweep_at(now, due=10.0, woke=10.001) == now - timedelta(seconds=0.001)
    assert sweep_at(now, due=10.0, woke=13.5) == now - timedelta(seconds=3.5)
    assert sweep_at(now, due=10.0, woke=9.999) == now  # a timer may fire a hair early
    assert Tick().at is None  # posted by hand (tests): the batch's time


async def _ended(client: Any, task_id: str) -> dict[str, Any] | None:
    detail = await task_detail(client, task_id)
    return detail if detail["status"] in ("completed", "failed") else None
