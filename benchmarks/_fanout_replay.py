"""Fan-out with nothing else running: a real control plane's bus replays a chain's events to
watchers of many tasks (`bench_load.py --clients N --tasks T --replay`), so that the CPU
counted is the delivery's alone: how the watchers are spread over the tasks (one task
followed by all, or each followed by a few) can be compared without the chains' own CPU,
which is a hundred times the deliveries' and moves by more than they cost from run to run."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from _fanout import (
    FLOOR_GAP,
    chain_bursts,
    chain_events,
    chain_plane,
    floor_server,
    followed_tasks,
    watchers,
)
from _sims import system_seconds

from shoal.events import Event
from shoal.store.events import events


async def measure_replay(kind: str, clients: int, tasks: int, watched: int = 0,
                         rounds: int = 3) -> dict[str, Any]:
    """`tasks` tasks held at their first step, the watchers subscribed to the first `watched`
    of them (all if 0), each followed by `clients / watched`; then, `rounds` times, each
    burst of a real run of the chain is published on the bus for every one of the tasks, a
    burst every FLOOR_GAP (as the chain's steps come), numbered and stamped anew. Every task's
    events are published whether or not it is watched, so runs that spread the same watchers
    differently publish the same events and deliver as many."""
    followed = followed_tasks(clients, tasks, watched)
    async with chain_plane(kind, tasks) as (srv, client):
        bus = srv.services.bus
        bursts = await chain_events(srv, client)
        ids = await _submit_waiting(client, tasks)
        token = client.headers["Authorization"].removeprefix("Bearer ")
        stored: dict[int, float] = {}
        async with bus.subscribe() as sub:
            await _quiet(sub)  # every task started: from here on the control plane is idle
        async with watchers(srv.url, token, clients, tasks=ids[:followed]) as watching:
            before = await _newest(srv.services.db)
            cpu, kernel = time.process_time(), system_seconds()
            await _replay(bus, bursts, ids[:followed], ids[followed:], stored, rounds)
        cpu, kernel = watching.settled[0] - cpu, watching.settled[1] - kernel
        if foreign := await _newest(srv.services.db) - before:
            print(f"{foreign} events of the control plane's own came during the replay "
                  "(their CPU is counted)", file=sys.stderr)
        for task_id in ids:
            await client.post(f"/api/v1/tasks/{task_id}/cancel")
    figures = watching.figures(clients, stored, cpu, kernel, tasks=followed)
    figures["gross_us"] = figures["cpu_us"]  # nothing taken off: the same figure
    return figures


async def measure_floor_replay(kind: str, clients: int, tasks: int, watched: int = 0,
                               rounds: int = 3) -> dict[str, Any]:
    """The fan-out floor beside `measure_replay`: the same chain's bursts for `tasks` tasks,
    `rounds` times, a burst every FLOOR_GAP, each task's written as one frame to the sockets
    following it (none: nothing done), the watchers spread as there."""
    followed = followed_tasks(clients, tasks, watched)
    bursts = await chain_bursts(kind)
    ids = [str(uuid.uuid4()) for _ in range(tasks)]
    made = {task: [[{**event, "data": {**event["data"], "task_id": task}} for event in burst]
                   for burst in bursts] for task in ids}
    watched_ids = set(ids[:followed])
    stored: dict[int, float] = {}
    async with floor_server() as (floor, url), \
            watchers(url, "floor", clients, tasks=ids[:followed]) as watching:
        cpu, kernel, seq = time.process_time(), system_seconds(), 0
        due = time.monotonic()
        for _ in range(rounds):
            for b in range(len(bursts)):
                await asyncio.sleep(max(0.0, due - time.monotonic()))  # (at once if late)
                due += FLOOR_GAP
                for task in ids:
                    now = time.time()
                    stamp = datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z")
                    items = []
                    for event in made[task][b]:
                        seq += 1
                        items.append({**event, "seq": seq, "timestamp": stamp})
                        if task in watched_ids:
                            stored[seq] = now
                    await floor.burst(items, task)
    cpu, kernel = watching.settled[0] - cpu, watching.settled[1] - kernel
    figures = watching.figures(clients, stored, cpu, kernel, tasks=followed)
    figures["gross_us"] = figures["cpu_us"]
    return figures


async def _newest(db: Any) -> int:
    """The number of the store's newest event."""
    async with db.connection() as conn:
        return int((await conn.execute(sa.select(sa.func.max(events.c.seq)))).scalar() or 0)


async def _submit_waiting(client: Any, tasks: int) -> list[Any]:
    """`tasks` tasks whose first step waits longer than the run: they exist and stay
    running, so watchers may follow them, and make no event while it lasts."""
    step = {"name": "wait", "description": "Wait for the replay", "tool": "echo",
            "options": {"delay": 3600}}
    ids = []
    for i in range(tasks):
        created = await client.post("/api/v1/tasks", json={
            "description": f"Replayed ({i})", "plan": [step]})
        created.raise_for_status()
        ids.append(created.json()["task_id"])
    return ids


async def _quiet(sub: Any, quiet: float = 1.0) -> None:
    """Wait until the bus has carried nothing for `quiet` seconds (the tasks started)."""
    while True:
        try:
            await asyncio.wait_for(sub.take(1000), quiet)
        except TimeoutError:
            return


async def _replay(bus: Any, bursts: list[list[Event]], followed: list[str],
                  others: list[str], stored: dict[int, float], rounds: int) -> None:
    """Publish `bursts` for every task, `rounds` times; `stored` gets the `followed` tasks'
    event numbers and times. Each event is the chain's with the task's id in it (a stream
    sends an event whose data names its task), its data's JSON text made beforehand, as the
    runtime's events carry the text their rows were written with."""
    tasks = [(uuid.UUID(i), True) for i in followed] + [(uuid.UUID(i), False) for i in others]
    made = {task_id: [[_for_task(event, task_id) for event in burst] for burst in bursts]
            for task_id, _ in tasks}
    due = time.monotonic()
    for _ in range(rounds):
        for b in range(len(bursts)):
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # (at once if it is late)
            due += FLOOR_GAP
            for task_id, watched in tasks:
                now = time.time()
                stamp = datetime.fromtimestamp(now, UTC)
                seq = bus._high  # the bus's next numbers: no gap for it to report
                events = []
                for kind, data, text, user_id in made[task_id][b]:
                    seq += 1
                    events.append(Event(seq=seq, type=kind, data=data, timestamp=stamp,
                                        task_id=task_id, user_id=user_id, text=text))
                    if watched:
                        stored[seq] = now
                await bus.publish(events)


def _for_task(event: Event, task_id: uuid.UUID) -> tuple[Any, dict[str, Any], str, Any]:
    """`event`'s type, data (naming `task_id` where it named its own task), the data's text
    and its user."""
    data = {k: str(task_id) if k == "task_id" else v for k, v in event.data.items()}
    return event.type, data, json.dumps(data), event.user_id
