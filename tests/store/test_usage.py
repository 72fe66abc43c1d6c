"""A user's spending since a moment (the daily budget's check), from tasks the engine ran
across two days: what finished that day counts; the tasks that ended before it are not read."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from shoal.engine import planning
from shoal.engine.inputs import Dispatched, Finished, Start
from shoal.engine.model import AttemptRecord, TaskMeta, TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.states import AttemptStatus, TaskStatus
from shoal.store import accounts, usage
from shoal.store.convert import attempts
from shoal.store.db import Database
from shoal.store.state import insert_task, write_decision
from shoal.workflows import decide
from tests.store.plans import migrated_sqlite, plans_of

MIDNIGHT = datetime(2026, 3, 4, tzinfo=UTC)
YESTERDAY = MIDNIGHT - timedelta(hours=5)
TODAY = MIDNIGHT + timedelta(hours=2)


async def start(db: Database, user_id: uuid.UUID, names: list[str], at: datetime) -> TaskState:
    """A task of `user_id` with one independent step per name, stored and started at `at`."""
    task = TaskRecord(id=uuid.uuid4(), user_id=user_id, description="spend",
                      status=TaskStatus.PENDING, created_at=at, updated_at=at,
                      meta=TaskMeta(quality=False))
    plan = planning.user_plan([{"name": n, "description": n, "tool": "echo"} for n in names])
    empty = TaskState(task=task, subtasks={}, attempts={})
    async with db.begin() as conn:
        await insert_task(conn, task)
        return await write_decision(conn, empty, decide(empty, Start(plan=plan), Context(now=at)))


async def run_step(db: Database, state: TaskState, name: str, tokens: int,
                   at: datetime) -> TaskState:
    """Dispatch step `name` and finish it at `at`, having spent `tokens` and a cent."""
    sub = next(s for s in state.subtasks.values() if s.name == name)
    att = AttemptRecord(id=uuid.uuid4(), subtask_id=sub.id, task_id=state.task.id,
                        worker_id=uuid.uuid4(), fence=sub.attempts + 1, tool="echo",
                        status=AttemptStatus.DISPATCHED, dispatched_at=at)
    spent: dict[str, Any] = {"input_tokens": tokens, "output_tokens": 0, "cost_usd": 0.01}
    for inp in (Dispatched(att), Finished(att.id, "succeeded", "ok", usage=spent)):
        async with db.begin() as conn:
            state = await write_decision(conn, state, decide(state, inp, Context(now=at)))
    return state


async def test_the_days_spending_counts_what_finished_that_day(db: Database) -> None:
    """Tokens and dollars of the attempts that finished since midnight, in tasks that ended
    yesterday (none), run on (the step finished today) and ended today; another user's day
    is theirs."""
    async with db.begin() as conn:
        alice = await accounts.create_user(conn, username="alice", password_hash="x",
                                           is_admin=False, email=None, now=YESTERDAY)
        bob = await accounts.create_user(conn, username="bob", password_hash="x",
                                         is_admin=False, email=None, now=YESTERDAY)
    ended = await run_step(db, await start(db, alice, ["a"], YESTERDAY), "a", 1000, YESTERDAY)
    assert ended.task.status is TaskStatus.COMPLETED
    running = await start(db, alice, ["a", "b"], YESTERDAY)
    running = await run_step(db, running, "a", 100, YESTERDAY)
    running = await run_step(db, running, "b", 20, TODAY)
    assert running.task.status is TaskStatus.COMPLETED  # ended today, begun yesterday
    waiting = await start(db, alice, ["a", "b"], YESTERDAY)
    waiting = await run_step(db, waiting, "a", 3, TODAY)
    assert waiting.task.status is TaskStatus.IN_PROGRESS
    await run_step(db, await start(db, bob, ["a"], TODAY), "a", 50_000, TODAY)
    async with db.connection() as conn:
        tokens, cost = await usage.spent_since(conn, alice, MIDNIGHT)
        assert tokens == 23
        assert round(cost, 6) == 0.02
        assert await usage.spent_since(conn, alice, YESTERDAY - timedelta(hours=1)) == (
            1123, 0.04)


async def test_a_task_that_ended_before_the_day_is_not_read(db: Database) -> None:
    """The check reads the attempts of tasks that have not ended or ended that day only: an
    ended task's attempts all ended by the decision that ended it. So an attempt of a task
    that ended yesterday is not counted even where its row says otherwise (a row no decision
    writes: this shows that the check does not read a past task's attempts, which is what
    keeps it from growing with the user's history)."""
    async with db.begin() as conn:
        alice = await accounts.create_user(conn, username="alice", password_hash="x",
                                           is_admin=False, email=None, now=YESTERDAY)
    ended = await run_step(db, await start(db, alice, ["a"], YESTERDAY), "a", 1000, YESTERDAY)
    async with db.begin() as conn:
        await conn.execute(sa.update(attempts).where(attempts.c.task_id == ended.task.id)
                           .values(finished_at=TODAY))
    async with db.connection() as conn:
        assert await usage.spent_since(conn, alice, MIDNIGHT) == (0, 0.0)


async def test_the_check_finds_the_days_tasks_by_index(tmp_path: Path) -> None:
    """The user's running tasks and those that ended since `since` come from the index of a
    user's tasks by when they ended, each a range of it: the check does not read the other
    tasks the user ever made, nor their attempts (SQLite's plan)."""
    url = await migrated_sqlite(tmp_path / "plans.db")
    (plan,) = await plans_of(url, lambda conn: usage.spent_since(conn, uuid.uuid4(), MIDNIGHT))
    assert "SEARCH tasks USING INDEX ix_tasks_user_id_completed_at (user_id=? AND " \
           "completed_at=?)" in plan, plan
    assert "SEARCH tasks USING INDEX ix_tasks_user_id_completed_at (user_id=? AND " \
           "completed_at>?)" in plan, plan
    assert "SCAN" not in plan, plan
