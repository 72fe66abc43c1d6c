"""A client that drops off the client WebSocket and resumes gets every event of its task once:
each way of resuming, with Hypothesis choosing where the client drops, compared against a full
replay from 0 (no gap, no duplicate, the same content)."""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect

from shoal.api.server import RunningServer
from shoal.worker.agent import Worker
from tests.runtime.harness import DEADLINE, submit, wait_for_status

# Five subtasks one after another, each a few milliseconds long: the task's events keep coming
# while a client is away, and after it is back.
CHAIN: list[dict[str, Any]] = [
    {"name": f"s{i}", "description": f"step {i}", "tool": "echo", "options": {"delay": 0.01},
     **({"dependencies": [f"s{i - 1}"]} if i else {})} for i in range(5)]


class Resume(StrEnum):
    """How the client comes back."""

    URL = "url"  # /ws?since=L, then subscribe to the task without a since
    MESSAGE = "message"  # /ws, then subscribe to the task with since L
    BOTH = "both"  # /ws?since=L, then subscribe with since L as well
    SWITCH = "switch"  # as URL; then another task, then back to this one, without a since





class Reader:
    """A client's view of one socket: every event of `task` it is sent, and the frames
    around them, in order."""

    def __init__(self, ws: ClientConnection, task: str, *, ended: bool = False) -> None:
        self.ws, self.task, self.ended = ws, task, ended  # ended: seen on an earlier socket
        self.events: list[dict[str, Any]] = []

    async def frame(self) -> list[dict[str, Any]]:
        """The items of the next frame (events of the task are kept as they pass)."""
        items = _items(json.loads(await self.ws.recv()))
        self.events += [i for i in items if "seq" in i and i["data"].get("task_id") == self.task]
        return items

    async def until(self, kind: str) -> None:
        """Read up to the next frame of type `kind`; no other kind but events on the way."""
        while True:
            for item in await self.frame():
                if item["type"] == kind:
                    return
                assert "seq" in item or item["type"] in {"subscribed", "caught_up"}, item

    async def events_until(self, count: int) -> None:
        """Read until `count` events of the task have come, or its last one."""
        while len(self.events) < count and not self.finished:
            await self.frame()

    @property
    def finished(self) -> bool:
        """Whether the task's last event has come."""
        return self.ended or any(e["type"] == "task_complete" for e in self.events)


def _items(frame: dict[str, Any]) -> list[dict[str, Any]]:
    return list(frame["items"]) if frame["type"] == "batch" else [frame]


def _socket(server: RunningServer, client: httpx.AsyncClient, since: int | None = None) -> Any:
    token = client.headers["Authorization"].removeprefix("Bearer ")
    query = f"?token={token}" + (f"&since={since}" if since is not None else "")
    return connect(server.url.replace("http://", "ws://") + "/ws" + query)


async def _subscribe(ws: ClientConnection, task: str, *, since: int | None,
                     batch: bool) -> None:
    message: dict[str, Any] = {"type": "subscribe", "task_id": task, "batch": batch}
    if since is not None:
        message["since"] = since
    await ws.send(json.dumps(message))


async def _full_replay(server: RunningServer, client: httpx.AsyncClient,
                       task: str) -> list[dict[str, Any]]:
    async with _socket(server, client) as ws:
        reader = Reader(ws, task)
        await _subscribe(ws, task, since=0, batch=False)
        await reader.until("subscribed")
        await reader.until("caught_up")
    return reader.events


async def _resume(server: RunningServer, client: httpx.AsyncClient, task: str, other: str, *,
                  how: Resume, last: int, finished: bool, batch: bool,
                  more: int) -> list[dict[str, Any]]:
    """The task's events a client gets after coming back, having seen up to `last` (and the
    task's end, if `finished`)."""
    url_since = None if how is Resume.MESSAGE else last
    async with _socket(server, client, url_since) as ws:
        reader = Reader(ws, task, ended=finished)
        await _subscribe(ws, task, since=None if how in (Resume.URL, Resume.SWITCH) else last,
                         batch=batch)
        await reader.until("subscribed")
        if how is Resume.SWITCH:
            await reader.events_until(len(reader.events) + more)
            await _subscribe(ws, other, since=None, batch=batch)
            await reader.until("subscribed")
            seen = len(reader.events)
            await reader.until("caught_up")  # the other task's past after `last`
            assert len(reader.events) == seen, "an event of a task no longer followed came"
            await _subscribe(ws, task, since=None, batch=batch)
            await reader.until("subscribed")
        await reader.until("caught_up")
        while not reader.finished:
            await reader.frame()
    return reader.events


@settings(max_examples=24, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=st.sampled_from(Resume), drop=st.integers(0, 40), more=st.integers(0, 10),
       batch=st.booleans())
async def test_a_resumed_client_gets_every_event_once(
    server: RunningServer, client: httpx.AsyncClient, worker: Worker,
    how: Resume, drop: int, more: int, batch: bool,
) -> None:
    """Whichever way a client resumes and wherever it dropped, what it got before the drop
    and after it is the task's whole log, once each, in order."""
    other = await submit(client, CHAIN[:1])
    await wait_for_status(client, other, "completed")
    async with asyncio.timeout(DEADLINE):
        async with _socket(server, client) as ws:
            task = await submit(client, CHAIN)
            first = Reader(ws, task)
            await _subscribe(ws, task, since=0, batch=batch)
            await first.until("subscribed")
            await first.events_until(drop)
        before = first.events
        last = before[-1]["seq"] if before else 0
        after = await _resume(server, client, task, other, how=how, last=last, batch=batch,
                              finished=first.finished, more=more)
    await wait_for_status(client, task, "completed")
    whole = await _full_replay(server, client, task)
    got = before + after
    assert [e["seq"] for e in got] == [e["seq"] for e in whole], (how, drop, more, batch)
    assert got == whole
