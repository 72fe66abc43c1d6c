"""The floor: the least a durable orchestrator written in Python can do for the same workloads.

`bench_dag.py` runs it beside Shoal (`floor` columns). It keeps the guarantees that cost time
on the critical path and nothing else:

- every change is durable before anything acts on it: a batch of results is stored (subtask
  and attempt rows updated, one attempt row inserted per dispatched subtask, one event row per
  change) in one transaction, and only then are the next subtasks sent;
- workers are real processes connected over WebSockets (the `websockets` library's own server
  and client, no web framework), results that end in the same loop turn travel as one frame,
  and the dispatches one commit makes travel as one frame per worker;
- a submission stores the task, every subtask and the roots' attempts in one transaction.

What it leaves out is everything else a product needs and Shoal does: HTTP and
authentication, validation, the engine's lifecycles and fencing checks, retries, leases,
allocation by score, files, usage, logs, checkpoints, the event bus, metrics. On SQLite it
writes inline on the event loop (as Shoal does); on PostgreSQL each batch is one
self-committing statement over `asyncpg` (as Shoal's is), on a connection planned as Shoal's
batch connection is (`KEYED_PLANNING`, ADR 0049): without it, PostgreSQL read the floor's
growing tables whole at each step, as it had Shoal's, and the floor's W2 took 1.05 to 1.15 ms a
step where it takes 0.63 to 0.66 with it. So its figures are a lower bound:
no Python orchestrator on this machine that stores each step before acting on it will beat
them by much, and a target below them is out of reach for any.

    python benchmarks/_floor.py --worker URL   (started by the benchmark, never by hand)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import websockets
from _workloads import Dag

WORKERS = 2
HERE = Path(__file__).resolve()

SQLITE_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS f_tasks (id TEXT PRIMARY KEY, status TEXT, updated REAL)",
    "CREATE TABLE IF NOT EXISTS f_subtasks (id TEXT PRIMARY KEY, task_id TEXT, name TEXT, "
    "deps TEXT, status TEXT, version INTEGER, output TEXT, updated REAL)",
    "CREATE TABLE IF NOT EXISTS f_attempts (id TEXT PRIMARY KEY, subtask_id TEXT, worker "
    "INTEGER, status TEXT, started REAL, ended REAL)",
    "CREATE TABLE IF NOT EXISTS f_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT, "
    "type TEXT, payload TEXT)",
]
POSTGRES_SCHEMA = [s.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
                   .replace(" REAL", " DOUBLE PRECISION") for s in SQLITE_SCHEMA]

# One batch on PostgreSQL: results stored, dispatches stored, events appended, one statement.
POSTGRES_BATCH = """
WITH done AS (
    UPDATE f_subtasks s SET status = 'completed', version = s.version + 1, output = 'ok',
        updated = $1 FROM unnest($2::text[]) d(id) WHERE s.id = d.id),
ended AS (
    UPDATE f_attempts a SET status = 'succeeded', ended = $1
    FROM unnest($3::text[]) e(id) WHERE a.id = e.id),
running AS (
    UPDATE f_subtasks s SET status = 'running', version = s.version + 1, updated = $1
    FROM unnest($4::text[]) r(id) WHERE s.id = r.id),
started AS (
    INSERT INTO f_attempts (id, subtask_id, worker, status, started)
    SELECT a, s, w, 'running', $1 FROM unnest($5::text[], $4::text[], $6::int[]) t(a, s, w)),
task AS (
    UPDATE f_tasks SET status = $7, updated = $1 WHERE id = $8)
INSERT INTO f_events (task_id, type, payload) SELECT $8, t, p FROM unnest($9::text[], $10::text[])
    x(t, p)
"""


class Store:
    """Where the floor keeps its rows: SQLite inline on the loop, or PostgreSQL."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind = kind
        self.target = target
        self._sqlite: sqlite3.Connection | None = None
        self._pg: asyncpg.Connection | None = None

    async def open(self) -> None:
        """Connect and create the tables."""
        if self.kind == "sqlite":
            self._sqlite = sqlite3.connect(self.target, isolation_level=None)
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL"):
                self._sqlite.execute(f"PRAGMA {pragma}")
            for statement in SQLITE_SCHEMA:
                self._sqlite.execute(statement)
            return
        from shoal.store.db import KEYED_PLANNING  # (not in the worker process: it is lean)

        self._pg = await asyncpg.connect(self.target)
        await self._pg.execute(KEYED_PLANNING)
        for statement in POSTGRES_SCHEMA:
            await self._pg.execute(statement)

    async def close(self) -> None:
        """Disconnect."""
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            await self._pg.close()

    async def submit(self, task: str, dag: Dag, ids: dict[str, str],
                     roots: list[tuple[str, str, int]]) -> None:
        """The task, its subtasks and its roots' attempts, in one transaction."""
        now = time.time()
        subtasks = [(ids[n], task, n, json.dumps(deps), "pending", 1, None, now)
                    for n, deps in dag.items()]
        events = [(task, "task_created", json.dumps({"task_id": task, "subtasks": len(dag)}))]
        if self._sqlite is not None:
            db = self._sqlite
            db.execute("BEGIN")
            db.execute("INSERT INTO f_tasks VALUES (?, 'running', ?)", (task, now))
            db.executemany("INSERT INTO f_subtasks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", subtasks)
            self._sqlite_batch(db, task, now, [], [], roots, "running", events)
            db.execute("COMMIT")
            return
        assert self._pg is not None
        async with self._pg.transaction():
            await self._pg.execute("INSERT INTO f_tasks VALUES ($1, 'running', $2)", task, now)
            await self._pg.copy_records_to_table(
                "f_subtasks", records=[(*row[:6], None, now) for row in subtasks])
            await self._pg_batch(task, now, [], [], roots, "running", events)

    async def step(self, task: str, done: list[tuple[str, str]],
                   started: list[tuple[str, str, int]], status: str) -> None:
        """Results (subtask id, attempt id) stored and dispatches (attempt, subtask, worker)
        recorded, with one event per change, in one transaction."""
        now = time.time()
        events = [(task, "subtask_completed", json.dumps({"subtask_id": s, "attempt_id": a}))
                  for s, a in done]
        events += [(task, "subtask_running", json.dumps({"subtask_id": s, "attempt_id": a}))
                   for a, s, _ in started]
        if status != "running":
            events.append((task, "task_" + status, json.dumps({"task_id": task})))
        if self._sqlite is not None:
            db = self._sqlite
            db.execute("BEGIN")
            self._sqlite_batch(db, task, now, [s for s, _ in done], [a for _, a in done],
                               started, status, events)
            db.execute("COMMIT")
            return
        await self._pg_batch(task, now, [s for s, _ in done], [a for _, a in done], started,
                             status, events)

    @staticmethod
    def _sqlite_batch(db: sqlite3.Connection, task: str, now: float, subtasks: list[str],
                      attempts: list[str], started: list[tuple[str, str, int]], status: str,
                      events: list[tuple[str, str, str]]) -> None:
        db.executemany("UPDATE f_subtasks SET status = 'completed', version = version + 1, "
                       "output = 'ok', updated = ? WHERE id = ?", [(now, s) for s in subtasks])
        db.executemany("UPDATE f_attempts SET status = 'succeeded', ended = ? WHERE id = ?",
                       [(now, a) for a in attempts])
        db.executemany("UPDATE f_subtasks SET status = 'running', version = version + 1, "
                       "updated = ? WHERE id = ?", [(now, s) for _, s, _ in started])
        db.executemany("INSERT INTO f_attempts VALUES (?, ?, ?, 'running', ?, NULL)",
                       [(a, s, w, now) for a, s, w in started])
        db.execute("UPDATE f_tasks SET status = ?, updated = ? WHERE id = ?", (status, now, task))
        db.executemany("INSERT INTO f_events (task_id, type, payload) VALUES (?, ?, ?)", events)

    async def _pg_batch(self, task: str, now: float, subtasks: list[str], attempts: list[str],
                        started: list[tuple[str, str, int]], status: str,
                        events: list[tuple[str, str, str]]) -> None:
        assert self._pg is not None
        await self._pg.execute(
            POSTGRES_BATCH, now, subtasks, attempts, [s for _, s, _ in started],
            [a for a, _, _ in started], [w for _, _, w in started], status, task,
            [t for _, t, _ in events], [p for _, _, p in events])


class Workers:
    """The server's side of the floor's worker connections: each result frame is handed to
    `received`; `joined` is set once all the workers are connected."""

    def __init__(self) -> None:
        self.workers: list[Any] = []
        self.joined = asyncio.Event()

    async def serve(self, ws: Any) -> None:
        """One worker's connection, until it closes."""
        self.workers.append(ws)
        if len(self.workers) >= WORKERS:
            self.joined.set()
        with contextlib.suppress(websockets.ConnectionClosed):
            async for frame in ws:
                self.received(json.loads(frame)["results"])

    def received(self, results: list[str]) -> None:
        """The attempt ids of one result frame."""
        raise NotImplementedError


class Floor(Workers):
    """The minimal orchestrator's server side: accepts workers, runs one DAG at a time."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self._results: list[str] = []
        self._arrived = asyncio.Event()
        self._ids = itertools.count()

    def received(self, results: list[str]) -> None:
        """Results for the running DAG."""
        self._results.extend(results)
        self._arrived.set()

    async def run(self, dag: Dag, delay: float) -> float:
        """Store and run `dag`; seconds from submission to its stored completion."""
        await self.joined.wait()
        started = time.monotonic()
        task = f"t{next(self._ids)}"
        ids = {name: f"{task}.{name}" for name in dag}
        waiting = {name: len(deps) for name, deps in dag.items()}
        children: dict[str, list[str]] = {name: [] for name in dag}
        for name, deps in dag.items():
            for dep in deps:
                children[dep].append(name)
        running: dict[str, str] = {}  # attempt id → subtask name
        turn = itertools.count()

        def attempts(ready: list[str]) -> list[tuple[str, str, int]]:
            out: list[tuple[str, str, int]] = []
            for name in ready:
                aid = f"{ids[name]}.a{next(turn)}"
                running[aid] = name
                out.append((aid, ids[name], len(out) % len(self.workers)))
            return out

        first = attempts([name for name, n in waiting.items() if n == 0])
        await self.store.submit(task, dag, ids, first)
        await self._send(first, delay)
        left = len(dag)
        while left:
            await self._arrived.wait()
            self._arrived.clear()
            batch, self._results = self._results, []
            done, ready = [], []
            for aid in batch:
                name = running.pop(aid)
                done.append((ids[name], aid))
                for child in children[name]:
                    waiting[child] -= 1
                    if waiting[child] == 0:
                        ready.append(child)
            left -= len(batch)
            new = attempts(ready)
            await self.store.step(task, done, new, "running" if left else "completed")
            await self._send(new, delay)
        return time.monotonic() - started

    async def _send(self, started: list[tuple[str, str, int]], delay: float) -> None:
        frames: dict[int, list[tuple[str, float]]] = {}
        for aid, _, worker in started:
            frames.setdefault(worker, []).append((aid, delay))
        for worker, tasks in frames.items():
            await self.workers[worker].send(json.dumps({"tasks": tasks}))


@contextlib.asynccontextmanager
async def floor(kind: str, target: str) -> AsyncIterator[Floor]:
    """A store of `kind` at `target` (a file path or a PostgreSQL URL), the floor's server and
    its worker process, ready to run DAGs."""
    store = Store(kind, target)
    await store.open()
    server = Floor(store)
    try:
        async with workers_of(server):
            yield server
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def workers_of(server: Workers) -> AsyncIterator[None]:
    """A WebSocket server for `server`, with the floor's worker process connected to it; the
    process stops on the way out."""
    async with websockets.serve(server.serve, "127.0.0.1", 0, compression=None) as ws:
        port = next(iter(ws.sockets)).getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE), "--worker",
            f"ws://127.0.0.1:{port}", stdin=asyncio.subprocess.PIPE)
        try:
            async with asyncio.timeout(30):
                await server.joined.wait()
            yield
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            await proc.wait()


# ---- the worker process ----------------------------------------------------------------------


async def work(ws: Any) -> None:
    """One worker: runs each task it is sent (sleeping its delay) and sends the results that
    end in the same loop turn as one frame, until its connection closes."""
    ended: list[str] = []
    running: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()

    def spawn(coro: Any) -> None:
        task = loop.create_task(coro)
        running.add(task)
        task.add_done_callback(running.discard)

    async def flush() -> None:
        batch = ended[:]
        ended.clear()
        await ws.send(json.dumps({"results": batch}))

    def finish(aid: str) -> None:
        if not ended:
            loop.call_soon(lambda: spawn(flush()))
        ended.append(aid)

    async def run(aid: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        finish(aid)

    with contextlib.suppress(websockets.ConnectionClosed):
        async for frame in ws:
            for aid, delay in json.loads(frame)["tasks"]:
                spawn(run(aid, delay))


async def workers(url: str) -> None:
    """`WORKERS` workers until standard input closes; then their connections close."""
    conns = [await websockets.connect(url, compression=None) for _ in range(WORKERS)]
    tasks = [asyncio.create_task(work(ws)) for ws in conns]
    await asyncio.to_thread(sys.stdin.read)
    for ws in conns:
        await ws.close()
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True, metavar="URL")
    asyncio.run(workers(parser.parse_args().worker))
