"""A busy task's SSE stream writes its events in batches: at most one write each `sse_linger`,
holding every event since the last, in order; an event after a quiet spell goes at once, and
so does one after which the task goes quiet (ADR 0051)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from shoal.api import streams
from shoal.api.server import RunningServer
from shoal.config import Settings
from shoal.events import Event, EventType, NewEvent
from shoal.metrics import StreamKind
from shoal.store.events import append_events
from shoal.store.models import utcnow
from shoal.store.state import load_task_states
from shoal.worker.agent import Worker
from tests.runtime.harness import DEADLINE, sse_events, submit, wait_until

HELD = [{"name": "a", "description": "runs for a while", "tool": "echo",
         "options": {"delay": 60}}]
CHAIN = 40
TERMINAL = {"task_complete", "task_failed", "task_cancelled"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The route's linger: longer than the whole chain below takes on any machine here."""
    return settings.model_copy(update={"sse_linger": 0.25})


async def _held_task(server: RunningServer, client: httpx.AsyncClient
                     ) -> tuple[uuid.UUID, uuid.UUID]:
    """A task whose one step runs for a minute, and its user: nothing of its own is published
    meanwhile, so the events the test publishes are the only live ones."""
    task_id = uuid.UUID(await submit(client, HELD))
    async with server.services.db.connection() as conn:
        (state,) = await load_task_states(conn, [task_id])
    return task_id, state.task.user_id


async def _publish(server: RunningServer, task_id: uuid.UUID, user_id: uuid.UUID,
                   n: int, type_: EventType = EventType.NOTICE) -> Event:
    """An event of the task's (a notice), stored and published as a commit's would be."""
    async with server.services.db.begin() as conn:
        (event,) = await append_events(conn, [NewEvent(
            type_, {"task_id": str(task_id), "n": n}, task_id=task_id,
            user_id=user_id)], utcnow())
    await server.services.bus.publish([event])
    return event


async def _live(server: RunningServer, task_id: uuid.UUID, user_id: uuid.UUID, *,
                linger: float, follow: streams.Follow | None = None, limit: int = streams.PAGE,
                ) -> AsyncGenerator[list[dict[str, Any]], None]:
    """The task's SSE stream as the route makes it, past its replay."""
    since = await streams.current_seq(server.services)
    stream = streams.replay_then_live_batches(
        server.services, user_id=user_id, task_id=task_id, since=since, kind=StreamKind.SSE,
        follow=follow if follow is not None else streams.Follow(), linger=linger, limit=limit)
    assert await anext(stream) == []  # subscribed, nothing to replay
    return stream


async def test_an_event_after_a_quiet_spell_goes_at_once(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """A minute's linger holds back nothing when the stream has written nothing live yet."""
    task_id, user_id = await _held_task(server, client)
    stream = await _live(server, task_id, user_id, linger=60.0)
    async with asyncio.timeout(DEADLINE):
        first = await _publish(server, task_id, user_id, 1)
        assert [item["seq"] for item in await anext(stream)] == [first.seq]
    await stream.aclose()


@pytest.mark.parametrize("type_", sorted(streams.QUIETING))
async def test_an_event_after_which_the_task_goes_quiet_is_not_held_back(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker, type_: EventType,
) -> None:
    """Within a minute's linger of the last write, the task's end (or a question for a
    person) still goes at once: nothing follows it soon, and it is what a client waits for."""
    task_id, user_id = await _held_task(server, client)
    stream = await _live(server, task_id, user_id, linger=60.0)
    async with asyncio.timeout(DEADLINE):
        first = await _publish(server, task_id, user_id, 1)
        assert [item["seq"] for item in await anext(stream)] == [first.seq]
        last = await _publish(server, task_id, user_id, 2, type_)
        assert [item["seq"] for item in await anext(stream)] == [last.seq]
    await stream.aclose()


async def _lingering(server: RunningServer, client: httpx.AsyncClient, *, linger: float,
                     limit: int = streams.PAGE) -> tuple[
                         AsyncGenerator[list[dict[str, Any]], None],
                         Callable[..., Awaitable[Event]], asyncio.Task[Any], Event]:
    """A held task's stream that wrote its first live event at once and now waits out
    `linger` with the second: the stream, a publisher of more of the task's events (`n`,
    `type_`), the task that gets the stream's next list, and the second event."""
    task_id, user_id = await _held_task(server, client)
    follow = streams.Follow()
    stream = await _live(server, task_id, user_id, linger=linger, follow=follow, limit=limit)
    sub = follow.sub
    assert sub is not None

    async def publish(n: int, type_: EventType = EventType.NOTICE) -> Event:
        return await _publish(server, task_id, user_id, n, type_)

    first = await publish(1)
    assert [item["seq"] for item in await anext(stream)] == [first.seq]  # a write now
    second = await publish(2)
    following = asyncio.create_task(anext(stream))
    await wait_until(sub.empty, what="the stream to take the second event")
    return stream, publish, following, second


@pytest.mark.parametrize(("linger", "limit"), [(2.0, streams.PAGE), (60.0, 3)])
async def test_what_comes_within_the_linger_goes_in_one_write(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker, linger: float,
    limit: int,
) -> None:
    """An event that comes less than `linger` after the last write waits out the rest of it;
    the events published meanwhile go with it, in order. A list that holds a page (three
    events, with a page of three) goes then, without waiting out a minute's linger."""
    async with asyncio.timeout(DEADLINE):
        stream, publish, following, second = await _lingering(server, client, linger=linger,
                                                               limit=limit)
        later = [await publish(n) for n in (3, 4)]
        assert [item["seq"] for item in await following] == [
            second.seq, *(e.seq for e in later)]
    await stream.aclose()


async def test_the_tasks_end_cuts_the_linger_short(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """A list waiting out a minute's linger goes as soon as the task's end comes, with what
    came before it, in order."""
    async with asyncio.timeout(DEADLINE):
        stream, publish, following, second = await _lingering(server, client, linger=60.0)
        third = await publish(3)
        end = await publish(4, EventType.TASK_COMPLETE)
        assert [item["seq"] for item in await following] == [second.seq, third.seq, end.seq]
    await stream.aclose()


async def test_a_busy_chain_reaches_its_sse_client_in_few_writes(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
) -> None:
    """Through the route: a chain whose steps each publish their events costs its client a
    write each `sse_linger` (0.25 s here), not one a step, and the client misses nothing."""
    plan = [{"name": f"s{i}", "description": "echo", "tool": "echo",
             "dependencies": [i - 1] if i else []} for i in range(CHAIN)]
    task_id = await submit(client, plan)
    writes, live, rest = 0, [], b""
    async with asyncio.timeout(DEADLINE), client.stream(
            "GET", f"/api/v1/tasks/{task_id}/events") as resp:
        async for chunk in resp.aiter_raw():  # (a write arrives as one chunk or more)
            writes += 1
            *blocks, rest = (rest + chunk).split(b"\n\n")
            live += [json.loads(line[6:]) for block in blocks
                     for line in block.decode().split("\n") if line.startswith("data: ")]
            if live and live[-1]["type"] in TERMINAL:
                break
    assert live[-1]["type"] == "task_complete"
    assert writes <= CHAIN // 4, f"{writes} writes for a chain of {CHAIN}"
    replayed = await sse_events(client, task_id, until=TERMINAL)
    assert [e["seq"] for e in live] == [e["seq"] for e in replayed]  # all of them, in order
