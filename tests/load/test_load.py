"""Correctness under load, at a reduced size (`benchmarks/bench_load.py` runs the full one and
times it): many workers heartbeating at once each have every heartbeat handled, in order; many
watchers of a running task each get every event once. The simulated workers and watchers run
in their own processes (`sim_workers.py`, `sim_clients.py`), as in the benchmark."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from shoal import admin
from shoal.api.server import RunningServer, running_server
from shoal.api.streams import current_seq
from shoal.config import Settings
from tests.load.sim_clients import ENDS, TYPES
from tests.runtime.harness import GatedEcho, echo_worker, login, submit, wait_until

HERE = Path(__file__).resolve().parent
WORKERS = 500
BEATS = 4
WATCHERS = 1000
STEPS = 8
WATCHED = frozenset(TYPES)
WAIT = 120.0  # seconds for a simulator's next line before the test gives up


@contextlib.asynccontextmanager
async def simulator(script: str, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`script` with `args` in its own process; its standard input closed (it stops) on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE / script), *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, limit=2**24)
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def line(proc: asyncio.subprocess.Process, starts: str) -> str:
    """The simulator's next line, which must start with `starts`."""
    assert proc.stdout is not None
    text = (await asyncio.wait_for(proc.stdout.readline(), WAIT)).decode()
    assert text.startswith(starts), f"expected {starts!r} from the simulator, got {text!r}"
    return text


async def stored_events(client: httpx.AsyncClient, task_id: str) -> list[tuple[int, str]]:
    """The task's events in the store (its SSE stream from the start): number and type."""
    events: list[tuple[int, str]] = []
    async with asyncio.timeout(WAIT), client.stream(
            "GET", f"/api/v1/tasks/{task_id}/events", headers={"Last-Event-ID": "0"}) as resp:
        async for text in resp.aiter_lines():
            if text.startswith("data: "):
                event = json.loads(text[6:])
                events.append((event["seq"], event["type"]))
                if event["type"] in ENDS:
                    return events
    return events


def heartbeats_handled(srv: RunningServer) -> int:
    """Heartbeats the runtime has committed (`shoal_worker_heartbeat_seconds`' count)."""
    counts = srv.services.runtime.metrics.heartbeat_time.series.get(())
    return int(sum(counts[:-1])) if counts else 0


async def test_every_heartbeat_of_many_workers_is_handled_in_order(settings: Settings) -> None:
    async with running_server(settings) as srv:
        token = await admin.create_worker_token(srv.services.db, name="load")
        async with simulator("sim_workers.py", "--url", srv.url, "--token", token,
                             "--count", str(WORKERS), "--beats", str(BEATS),
                             "--interval", str(settings.heartbeat_interval)) as proc:
            await line(proc, "connected")
            assert len(srv.services.runtime.fleet) == WORKERS
            await line(proc, f"sent {WORKERS * BEATS}")
            await wait_until(lambda: heartbeats_handled(srv) >= WORKERS * BEATS,
                             what=f"{WORKERS * BEATS} heartbeats to be committed")
            assert heartbeats_handled(srv) == WORKERS * BEATS
            await admin.create_user(srv.services.db, settings, username="root",
                                    password="password123", admin=True)
            async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
                signed = await client.post("/api/v1/auth/login", json={
                    "username": "root", "password": "password123"})
                client.headers["Authorization"] = f"Bearer {signed.json()['access_token']}"
                workers = (await client.get("/api/v1/workers")).json()["workers"]
    assert len(workers) == WORKERS
    wanted = [float(k) for k in range(1, BEATS + 1)]
    for worker in workers:  # each heartbeat's reading kept, in the order sent
        assert worker["status"] == "online", worker
        assert [s["cpu_percent"] for s in worker["recent"]][-BEATS:] == wanted, worker
        assert worker["resources"]["cpu_percent"] == BEATS


async def test_every_watcher_gets_every_event_once(settings: Settings) -> None:
    chain = [{"name": f"s{i}", "description": f"Step {i}", "tool": "echo",
              "dependencies": [f"s{i - 1}"] if i else []} for i in range(STEPS)]
    async with running_server(settings) as srv, echo_worker(srv, settings, slots=1):
        client = await login(srv, settings)
        token = client.headers["Authorization"].removeprefix("Bearer ")
        async with simulator("sim_clients.py", "--url", srv.url, "--token", token,
                             "--count", str(WATCHERS), "--until-ended") as proc:
            await line(proc, "subscribed")
            task_id = await submit(client, chain, "Watched by many")
            got = {int(seq): count for seq, (count, _) in json.loads(await line(proc, "{"))
                   .items()}
        stored = await stored_events(client, task_id)
        await client.aclose()
    wanted = {seq for seq, kind in stored if kind in WATCHED}
    assert len(wanted) > 2 * STEPS
    assert wanted <= set(got), f"events nobody got: {sorted(wanted - set(got))}"
    assert set(got) <= wanted, f"events of other types or tasks: {sorted(set(got) - wanted)}"
    assert {seq: n for seq, n in got.items() if n != WATCHERS} == {}, \
        "events some watchers missed or got twice"


async def test_watchers_of_one_task_each_get_its_events_once(settings: Settings) -> None:
    """Watchers spread over several running tasks, each subscribed to one (`--tasks`, as
    `bench_load.py --tasks` runs them): every event of a task committed once all had subscribed
    reaches each of its watchers once, and no watcher gets another task's."""
    tasks, tool = 4, GatedEcho()
    held = [{"name": "hold", "description": "Held", "tool": "echo", "options": {"gated": True}},
            *({"name": f"s{i}", "description": f"Step {i}", "tool": "echo",
               "dependencies": [f"s{i - 1}" if i else "hold"]} for i in range(STEPS))]
    settings = settings.model_copy(update={"max_active_tasks": tasks})
    async with running_server(settings) as srv, \
            echo_worker(srv, settings, slots=tasks, tools={"echo": tool}):
        client = await login(srv, settings)
        token = client.headers["Authorization"].removeprefix("Bearer ")
        ids = [await submit(client, held, f"Watched by a few ({i})") for i in range(tasks)]
        await wait_until(lambda: tool.runs == tasks, what="every task's held first step")
        async with simulator("sim_clients.py", "--url", srv.url, "--token", token,
                             "--count", str(WATCHERS), "--tasks", ",".join(ids),
                             "--until-ended") as proc:
            await line(proc, "subscribed")
            since = await current_seq(srv.services)
            tool.gate.set()
            got = {int(seq): count for seq, (count, _) in json.loads(await line(proc, "{"))
                   .items()}
        stored = {task_id: await stored_events(client, task_id) for task_id in ids}
        await client.aclose()
    mine = {seq for events in stored.values() for seq, kind in events if kind in WATCHED}
    assert set(got) <= mine, f"events of other types or tasks: {sorted(set(got) - mine)}"
    wanted = {seq for seq in mine if seq > since}
    assert len(wanted) > tasks * STEPS
    assert {seq: got.get(seq, 0) for seq in wanted
            if got.get(seq, 0) != WATCHERS // tasks} == {}, \
        "events some of their task's watchers missed or got twice"
