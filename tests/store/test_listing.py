"""What the dashboard reads, on SQLite and PostgreSQL: the task list's workflow filter and
case-blind search (with `%` and `_` taken literally), its tasks by the start of their id, and
a file's versions across a piece of work (the subtask and the correction that rewrote its
files)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from shoal.engine.model import TaskMeta, TaskRecord
from shoal.ids import id_range
from shoal.states import TaskStatus
from shoal.store import accounts, queries, slots
from shoal.store import files as file_rows
from shoal.store.db import Database
from shoal.store.models import Subtask, table_of
from shoal.store.state import insert_task
from tests.store.plans import migrated_sqlite, plans_of
from tests.store.test_state import NOW, started_task


async def test_tasks_are_found_by_workflow_and_words(db: Database) -> None:
    async with db.begin() as conn:
        user = await accounts.create_user(conn, username="alice", password_hash="x",
                                          is_admin=False, email=None, now=NOW)
        made = {}
        for n, (text, workflow) in enumerate((("Compare SALES figures", "dag"),
                                              ("Raise by 5% now", "dag"),
                                              ("compare two databases", "pipeline"))):
            task = TaskRecord(id=uuid.uuid4(), user_id=user, description=text,
                              status=TaskStatus.PENDING, created_at=NOW + timedelta(seconds=n),
                              updated_at=NOW, workflow=workflow, meta=TaskMeta())
            await insert_task(conn, task)
            made[text] = task.id

    async def found(**filters: str) -> list[uuid.UUID]:
        async with db.connection() as conn:
            rows, total = await queries.list_tasks(conn, user_id=user, status=None, limit=10,
                                                   offset=0, **filters)
        assert total == len(rows)
        return [r.id for r in rows]

    assert await found(search="COMPARE") == [made["compare two databases"],
                                             made["Compare SALES figures"]]
    assert await found(search="compare", workflow="pipeline") == [
        made["compare two databases"]]
    assert await found(search="5%") == [made["Raise by 5% now"]]
    assert await found(search="5_") == []
    assert await found(search="%") == [made["Raise by 5% now"]]
    assert len(await found(workflow="dag")) == 2


async def test_tasks_are_found_by_the_start_of_their_id(db: Database) -> None:
    """A prefix finds the user's tasks whose id starts with it (dashes or not, any case), and
    no one else's; the whole id finds its task alone."""
    ids = [uuid.UUID(i) for i in ("abcdef01-0000-4000-8000-000000000001",
                                  "abcdef01-0000-4000-8000-000000000002",
                                  "abcdef02-0000-4000-8000-000000000003",
                                  "00000000-0000-4000-8000-000000000004",
                                  "ffffffff-ffff-4fff-bfff-ffffffffffff")]
    async with db.begin() as conn:
        alice, bob = [await accounts.create_user(conn, username=name, password_hash="x",
                                                 is_admin=False, email=None, now=NOW)
                      for name in ("alice", "bob")]
        for n, (tid, owner) in enumerate(zip(ids, (alice, alice, alice, alice, bob),
                                             strict=True)):
            await insert_task(conn, TaskRecord(
                id=tid, user_id=owner, description="t", status=TaskStatus.COMPLETED,
                created_at=NOW + timedelta(seconds=n), updated_at=NOW, meta=TaskMeta()))

    async def found(prefix: str, user: uuid.UUID = alice) -> set[uuid.UUID]:
        async with db.connection() as conn:
            rows, total = await queries.list_tasks(conn, user_id=user, status=None, limit=10,
                                                   offset=0, ids=id_range(prefix))
        assert total == len(rows)
        return {r.id for r in rows}

    assert await found("abcdef") == set(ids[:3])
    assert await found("ABCDEF01-0") == set(ids[:2])
    assert await found("abcdef01000040008000000000000002") == {ids[1]}
    assert await found(str(ids[2])) == {ids[2]}
    assert await found("0") == {ids[3]}
    assert await found("f") == set()  # bob's
    assert await found("f", bob) == {ids[4]}


async def test_a_files_versions_span_the_work_and_its_correction(db: Database) -> None:
    state = await started_task(db)
    work, other, correction = sorted(state.subtasks.values(), key=lambda s: s.name)
    subtasks = table_of(Subtask)
    async with db.begin() as conn:  # the third subtask plays a correction of the first
        await conn.execute(sa.update(subtasks).where(subtasks.c.id == correction.id)
                           .values(target_id=work.id))
        for at, (sub, sha) in enumerate(((work, "a" * 64), (other, "b" * 64),
                                         (correction, "c" * 64))):
            await conn.execute(sa.insert(file_rows.artifacts), file_rows.manifest_rows(
                task_id=state.task.id, subtask_id=sub.id, attempt_id=uuid.uuid4(),
                entries=[{"path": "calc.py", "size": 1, "sha256": sha}],
                now=datetime(2026, 1, 2, 3, 5, at, tzinfo=UTC)))
    async with db.connection() as conn:
        of_work = await file_rows.file_versions(conn, work.id, None, "calc.py")
        of_fix = await file_rows.file_versions(conn, correction.id, work.id, "calc.py")
        of_other = await file_rows.file_versions(conn, other.id, None, "calc.py")
    assert [v.sha256[0] for v in of_work] == ["c", "a"]  # newest first, not the other's
    assert [v.sha256[0] for v in of_fix] == ["c", "a"]
    assert [v.sha256[0] for v in of_other] == ["b"]


async def test_a_users_list_and_queue_are_read_in_their_own_order(tmp_path: Path) -> None:
    """A page of a user's tasks, and of their checkpoints, comes from the index that holds
    them newest first, so a page reads its own rows (sorting by the id only where two began at
    the same microsecond), and the user's queue, which each submission reads, from the index
    of queued tasks alone: none grows with the tasks the user ever made (SQLite's plans)."""
    url = await migrated_sqlite(tmp_path / "plans.db")
    user = uuid.uuid4()
    queued = TaskRecord(id=uuid.uuid4(), user_id=user, description="waits",
                        status=TaskStatus.QUEUED, created_at=NOW, updated_at=NOW)

    async def store(conn: AsyncConnection) -> None:
        await conn.execute(sa.insert(accounts.users).values(
            id=user, username="alice", password_hash="x", is_admin=False, created_at=NOW))
        await insert_task(conn, queued)
    await plans_of(url, store)

    async def reads(conn: AsyncConnection) -> None:
        await queries.list_tasks(conn, user_id=user, status=None, limit=20, offset=0)
        await slots.user_slots(conn, user, default_limit=3)
        await slots.queue_position(conn, queued.id)
        await slots.queued_count(conn, user)
        await queries.list_checkpoints(conn, user_id=user, task_id=None, status=None, limit=20,
                                       offset=0)
    (count, page, _limit, _taken, queue, _task, ahead, waiting,
     points_count, points) = await plans_of(url, reads)
    assert page == ("SEARCH tasks USING INDEX ix_tasks_user_id_created_at (user_id=?) | "
                    "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY"), page
    assert count.startswith("SEARCH tasks USING COVERING INDEX ix_tasks_user_id_"), count
    for plan in (points_count, points):
        assert plan.startswith("SEARCH checkpoints USING INDEX ix_checkpoints_user_id_created_at"
                               " (user_id=?)"), plan
    assert "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY" in points, points
    assert "FOR ORDER BY" not in points.replace("FOR RIGHT PART OF ORDER BY", ""), points
    for plan in (queue, ahead, waiting):
        assert plan.startswith("SEARCH tasks USING COVERING INDEX ix_tasks_queued (user_id=?"), \
            plan
        assert "TEMP B-TREE" not in plan, plan
