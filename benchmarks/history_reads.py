"""What the store's reads that look across tasks cost as a history grows: the daily budget's
check, which a submission makes when a daily budget is set (`usage.spent_since`); the user's
slots and queue, which every submission reads (`slots.user_slots`); a page of the user's task
list, newest first (`queries.list_tasks`, the dashboard's first page) and of their checkpoints
(`queries.list_checkpoints`); and the claims a control-plane copy renews and takes every
`claim_interval` inside a batch, on the event loop (`claims.renew_claims` and
`claims.claim_tasks`).

    .venv/bin/python benchmarks/history_reads.py [--db sqlite|postgres] [--days 0,1,5]
        [--tasks-a-day 100] [--attempts 200] [--today 10] [--checks 50]

For each number of past days, a fresh database gets one user with `--tasks-a-day` ended tasks
a day for that many days before midnight and `--today` tasks since (half of them still
running), each task `--attempts` finished attempts with some usage, as the engine leaves them:
a task's `updated_at` is its last change. The rows go in directly, in bulk (no engine, no
runtime), and PostgreSQL then analyses the tables, as its autovacuum does on a server in use.
Then each read runs `--checks` times: the median in ms of each (the budget's check's p90 too),
and the tokens it found (the same for every history, since only the day counts). None of them
should grow with the history (ADR 0058). With `PYTHONPATH`
pointed at another tree's `src`, the same run prices that tree's reads.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import uvloop
from bench_dag import database
from rich.console import Console
from rich.table import Table

from shoal.engine.model import AttemptRecord, SubtaskRecord, TaskRecord
from shoal.states import AttemptStatus, SubtaskStatus, TaskStatus
from shoal.store import accounts, queries, slots, usage
from shoal.store.claims import claim_tasks, renew_claims
from shoal.store.convert import (
    attempt_values,
    attempts,
    subtask_values,
    subtasks,
    task_values,
    tasks,
)
from shoal.store.db import Database
from shoal.store.state import insert_rows

MIDNIGHT = datetime(2026, 3, 4, tzinfo=UTC)


Row = dict[str, Any]
Rows = tuple[Row, list[Row], list[Row]]  # a task's row, its subtasks' and its attempts'


def task_rows(user_id: uuid.UUID, at: datetime, attempts_each: int, *, ended: bool) -> Rows:
    """One task of `user_id` whose attempts all finished at `at`, ended then or still running:
    its row, its subtasks' and its attempts' (one attempt a subtask)."""
    status = TaskStatus.COMPLETED if ended else TaskStatus.IN_PROGRESS
    task = TaskRecord(id=uuid.uuid4(), user_id=user_id, description="history", status=status,
                      created_at=at - timedelta(minutes=5), updated_at=at,
                      completed_at=at if ended else None, input_tokens=10 * attempts_each)
    subs, atts = [], []
    for i in range(attempts_each):
        sub = SubtaskRecord(id=uuid.uuid4(), task_id=task.id, key=f"s{i}", role="coder",
                            name=f"s{i}", description="step", status=SubtaskStatus.COMPLETED,
                            created_at=task.created_at, attempts=1)
        subs.append(subtask_values(sub))
        atts.append(attempt_values(AttemptRecord(
            id=uuid.uuid4(), subtask_id=sub.id, task_id=task.id, worker_id=user_id, fence=1,
            tool="echo", status=AttemptStatus.SUCCEEDED, dispatched_at=at - timedelta(seconds=1),
            finished_at=at, usage={"input_tokens": 10, "output_tokens": 0, "cost_usd": 0.001})))
    return task_values(task), subs, atts


async def filled(db: Database, days: int, per_day: int, today: int, attempts_each: int,
                 ) -> uuid.UUID:
    """A user with `per_day` ended tasks a day for `days` days before midnight, and `today`
    tasks since (every other one still running); their id."""
    async with db.begin() as conn:
        user_id = await accounts.create_user(conn, username="heavy", password_hash="x",
                                             is_admin=False, email=None, now=MIDNIGHT)
    moments = [MIDNIGHT - timedelta(days=d, hours=1 + i % 20, seconds=i)
               for d in range(days) for i in range(per_day)]
    made = [(at, True) for at in moments]
    made += [(MIDNIGHT + timedelta(hours=1, seconds=i), i % 2 == 0) for i in range(today)]
    for start in range(0, len(made), 50):  # a transaction every 50 tasks
        rows = [task_rows(user_id, at, attempts_each, ended=ended)
                for at, ended in made[start:start + 50]]

        def write(conn: sa.Connection, rows: list[Rows] = rows) -> None:
            insert_rows(conn, tasks, [r[0] for r in rows])
            insert_rows(conn, subtasks, [s for r in rows for s in r[1]])
            insert_rows(conn, attempts, [a for r in rows for a in r[2]])
        await db.run_write(write)
    return user_id


async def checked(db: Database, user_id: uuid.UUID, checks: int,
                  ) -> tuple[float, float, tuple[int, float]]:
    """The budget's check: its median and p90 in ms over `checks` runs, and what it found."""
    found: list[tuple[int, float]] = []

    async def check() -> None:
        async with db.connection() as conn:
            found.append(await usage.spent_since(conn, user_id, MIDNIGHT))
    p50, p90 = await timed(checks, check)
    return p50, p90, found[-1]


async def timed(checks: int, read: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """`read`'s median and p90 in ms over `checks` runs, after five unmeasured."""
    times = []
    for _ in range(checks + 5):
        began = time.perf_counter()
        await read()
        times.append((time.perf_counter() - began) * 1e3)
    times = sorted(times[5:])
    return statistics.median(times), times[len(times) * 9 // 10]


async def renewed(db: Database, checks: int) -> tuple[float, float]:
    """A copy's renewal of its claims and taking of free ones, as one write."""
    def renew(conn: sa.Connection) -> None:
        renew_claims(conn, "bench", now=MIDNIGHT, ttl=30)
        claim_tasks(conn, "bench", now=MIDNIGHT, ttl=30)
    return await timed(checks, lambda: db.run_write(renew))


async def listed(db: Database, user_id: uuid.UUID, checks: int) -> tuple[float, float]:
    """A page of 20 of the user's tasks, newest first, and how many they have."""
    async def page() -> None:
        async with db.connection() as conn:
            await queries.list_tasks(conn, user_id=user_id, status=None, limit=20, offset=0)
    return await timed(checks, page)


async def checkpoints_page(db: Database, user_id: uuid.UUID, checks: int,
                           ) -> tuple[float, float]:
    """A page of 20 of the user's checkpoints, newest first, and how many they have."""
    async def page() -> None:
        async with db.connection() as conn:
            await queries.list_checkpoints(conn, user_id=user_id, task_id=None, status=None,
                                           limit=20, offset=0)
    return await timed(checks, page)


async def queue_read(db: Database, user_id: uuid.UUID, checks: int) -> tuple[float, float]:
    """The user's limit, slots and queue, as a submission reads them."""
    async def read() -> None:
        async with db.connection() as conn:
            await slots.user_slots(conn, user_id, default_limit=3)
    return await timed(checks, read)


@contextlib.asynccontextmanager
async def migrated(kind: str, tmp: Path) -> AsyncIterator[Database]:
    async with database(kind, tmp) as url:
        db = Database.connect(url)
        await db.migrate()
        try:
            yield db
        finally:
            await db.dispose()


async def main_async(args: argparse.Namespace, console: Console) -> None:
    table = Table(title=f"Reads across tasks — {args.db} ({args.tasks_a_day} ended tasks a "
                        f"day, {args.today} today, {args.attempts} attempts each)")
    for col in ("past days", "tasks", "attempts", "budget check", "p90", "tokens", "queue",
                "list page", "checkpoints page", "claims"):
        table.add_column(col, justify="right")
    for days in args.days:
        with tempfile.TemporaryDirectory(prefix="shoal-history-") as name:
            async with migrated(args.db, Path(name)) as db:
                began = time.perf_counter()
                user_id = await filled(db, days, args.tasks_a_day, args.today, args.attempts)
                if args.db == "postgres":  # what autovacuum does on a server in use
                    async with db.connection() as conn:
                        await conn.execute(sa.text("ANALYZE"))
                print(f"{days} past days written in {time.perf_counter() - began:.1f} s",
                      file=sys.stderr)
                p50, p90, found = await checked(db, user_id, args.checks)
                queue = await queue_read(db, user_id, args.checks)
                page = await listed(db, user_id, args.checks)
                points = await checkpoints_page(db, user_id, args.checks)
                claims = await renewed(db, args.checks)
        past = days * args.tasks_a_day
        table.add_row(str(days), f"{past:,}", f"{past * args.attempts:,}", f"{p50:.2f} ms",
                      f"{p90:.2f} ms", f"{found[0]:,}", f"{queue[0]:.2f} ms",
                      f"{page[0]:.2f} ms", f"{points[0]:.2f} ms", f"{claims[0]:.2f} ms")
    console.print(table)


def days_list(text: str) -> list[int]:
    """`--days`: whole numbers ≥ 0."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not whole numbers of days: {text!r}") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("days are 0 or more")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--days", type=days_list, default=[0, 1, 5])
    parser.add_argument("--tasks-a-day", type=int, default=100)
    parser.add_argument("--attempts", type=int, default=200)
    parser.add_argument("--today", type=int, default=10)
    parser.add_argument("--checks", type=int, default=50)
    args = parser.parse_args()
    if min(args.tasks_a_day, args.attempts, args.checks) < 1 or args.today < 0:
        parser.error("--tasks-a-day, --attempts and --checks are 1 or more, --today 0 or more")
    uvloop.run(main_async(args, Console(width=150)))


if __name__ == "__main__":
    main()
