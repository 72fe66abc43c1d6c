"""What a read costs the control plane on SQLite: the API's and the runtime's reads through
`Database.connection()` (on the loop's own thread, ADR 0047), beside the same reads through
SQLAlchemy's asyncio engine on aiosqlite (the path they took before) and, as the floor, the
same `SELECT` on a plain `sqlite3` connection.

    .venv/bin/python benchmarks/read_cost.py [--reads 300] [--events 1000]

Three reads, each timed `--reads` times after a warm-up, in one run on a fresh database:
a user by id (`accounts.user_by_id`, what every task submission reads), a page of 20 of a
user's tasks (`queries.list_tasks`, the dashboard's list) and a task's events after the first
(`events.events_since`, a stream's replay; `--events` of them). Wall time p50 and p90, and the
loop thread's CPU p50 (`time.thread_time`): the async driver's own thread works beside it, but
the loop's share is what every other request and the runtime wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import uvloop
from rich.console import Console
from rich.table import Table

from shoal.events import EventType, NewEvent
from shoal.store import accounts, events, queries
from shoal.store.convert import tasks
from shoal.store.db import Database

Read = Callable[[Any], Awaitable[Any]]


async def timed(connect: Callable[[], Any], read: Read, n: int) -> tuple[float, float, float]:
    """p50 and p90 of the wall time of `read` on a connection from `connect`, and the p50 of
    the loop thread's CPU, in µs."""
    for _ in range(min(50, n)):
        async with connect() as conn:
            await read(conn)
    wall, cpu = [], []
    for _ in range(n):
        began, began_cpu = time.perf_counter(), time.thread_time()
        async with connect() as conn:
            await read(conn)
        cpu.append((time.thread_time() - began_cpu) * 1e6)
        wall.append((time.perf_counter() - began) * 1e6)
    wall.sort()
    return wall[len(wall) // 2], wall[len(wall) * 9 // 10], statistics.median(cpu)


def floor(path: Path, sql: str, params: tuple[Any, ...], n: int) -> float:
    """p50 of the same statement on a plain `sqlite3` connection, rows fetched, in µs."""
    conn = sqlite3.connect(path)
    try:
        times = []
        for _ in range(n + 50):
            began = time.perf_counter()
            conn.execute(sql, params).fetchall()
            times.append((time.perf_counter() - began) * 1e6)
        return statistics.median(times[50:])
    finally:
        conn.close()


async def fill(db: Database, n_events: int) -> tuple[uuid.UUID, uuid.UUID]:
    """A user with 30 tasks, the first of which has `n_events` events."""
    now = datetime.now(UTC)
    async with db.begin() as conn:
        user_id = await accounts.create_user(conn, username="reader", password_hash="x",
                                             is_admin=False, email=None, now=now)
        ids = [uuid.uuid4() for _ in range(30)]
        await conn.execute(sa.insert(tasks), [
            {"id": tid, "user_id": user_id, "description": f"task {i}", "status": "completed",
             "workflow": "dag", "created_at": now, "updated_at": now} for i, tid in enumerate(ids)])
        await events.append_events(conn, [
            NewEvent(EventType.NOTICE, {"task_id": str(ids[0]), "n": i}, task_id=ids[0],
                     user_id=user_id) for i in range(n_events)], now)
    return user_id, ids[0]


async def main_async(args: argparse.Namespace, console: Console) -> None:
    with tempfile.TemporaryDirectory(prefix="shoal-reads-") as tmp:
        path = Path(tmp) / "shoal.db"
        db = Database.connect(f"sqlite+aiosqlite:///{path}")
        try:
            await db.migrate()
            user_id, task_id = await fill(db, args.events)
            reads: list[tuple[str, Read, str, tuple[Any, ...]]] = [
                ("a user by id", lambda c: accounts.user_by_id(c, user_id),
                 "SELECT * FROM users WHERE id = ?", (user_id.hex,)),
                ("20 of a user's tasks", lambda c: queries.list_tasks(
                    c, user_id=user_id, status=None, workflow=None, search=None, ids=None,
                    limit=20, offset=0),
                 "SELECT * FROM tasks WHERE user_id = ? ORDER BY created_at DESC LIMIT 20",
                 (user_id.hex,)),
                (f"a task's {args.events} events", lambda c: events.events_since(
                    c, 0, user_id=user_id, task_id=task_id, limit=args.events),
                 "SELECT * FROM events WHERE task_id = ? AND seq > 0 ORDER BY seq LIMIT ?",
                 (task_id.hex, args.events)),
            ]
            table = Table(title=f"A read on SQLite (µs, {args.reads} each)", title_justify="left")
            for col in ("read", "aiosqlite p50 / p90", "loop CPU", "inline p50 / p90",
                        "loop CPU ", "sqlite3 floor", "inline ÷ aiosqlite", "inline ÷ floor"):
                table.add_column(col, justify="left" if col == "read" else "right")
            for label, read, sql, params in reads:
                old = await timed(db.engine.connect, read, args.reads)
                new = await timed(db.connection, read, args.reads)
                low = floor(path, sql, params, args.reads)
                table.add_row(label, f"{old[0]:.0f} / {old[1]:.0f}", f"{old[2]:.0f}",
                              f"{new[0]:.0f} / {new[1]:.0f}", f"{new[2]:.0f}", f"{low:.1f}",
                              f"{new[0] / old[0]:.2f}", f"{new[0] / low:.1f}")
            console.print(table)
        finally:
            await db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--events", type=int, default=1000)
    args = parser.parse_args()
    uvloop.install()
    asyncio.run(main_async(args, Console()))


if __name__ == "__main__":
    sys.exit(main())
