"""A task's stream follows only its task's events on the bus, and still misses none: an event
stored but never published comes from the store once the bus sees the gap it left."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from shoal.api import streams
from shoal.api.server import RunningServer
from shoal.events import Event, EventType, NewEvent
from shoal.metrics import StreamKind
from shoal.store.events import append_events
from shoal.store.models import utcnow
from shoal.store.state import load_task_states
from shoal.worker.agent import Worker
from tests.runtime.harness import DEADLINE, submit

PLAN = [{"name": "a", "description": "runs for a while", "tool": "echo",
         "options": {"delay": 60}}]


async def _append(server: RunningServer, task_id: uuid.UUID, user_id: uuid.UUID,
                  n: int) -> Event:
    async with server.services.db.begin() as conn:
        (event,) = await append_events(conn, [NewEvent(
            EventType.NOTICE, {"task_id": str(task_id), "n": n}, task_id=task_id,
            user_id=user_id)], utcnow())
    return event


async def test_a_task_stream_gets_a_stored_event_that_was_never_published(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """Routed to its task, a stream whose bus never carried one of the task's events (its
    publish lost) gets it from the store, in order, when the next event shows the gap."""
    task_id = uuid.UUID(await submit(client, PLAN))
    services = server.services
    async with services.db.connection() as conn:
        (state,) = await load_task_states(conn, [task_id])
    user_id = state.task.user_id
    first = await _append(server, task_id, user_id, 0)  # stored only: the replay sends it
    stream = streams.replay_then_live_batches(services, user_id=user_id, task_id=task_id,
                                              since=first.seq - 1, kind=StreamKind.WEBSOCKET)
    async with asyncio.timeout(DEADLINE):
        assert [item["seq"] for item in await anext(stream)] == [first.seq]  # subscribed
        lost = await _append(server, task_id, user_id, 1)
        shown = await _append(server, task_id, user_id, 2)
        await services.bus.publish([shown])
        seen: list[int] = []
        while shown.seq not in seen:
            seen += [item["seq"] for item in await anext(stream)]
    await stream.aclose()
    assert lost.seq in seen
    assert seen.index(lost.seq) < seen.index(shown.seq)
