"""PostgreSQL writes a runtime batch as one self-committing statement (ADR 0023): every row
change and event of the batch, one round trip, no BEGIN or COMMIT, and all or nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from shoal.engine import planning
from shoal.engine.inputs import CancelRequested, Dispatched, Start
from shoal.engine.model import TaskRecord, TaskState
from shoal.engine.step import Context
from shoal.errors import Conflict
from shoal.events import EventType, NewEvent
from shoal.runtime.batch import TaskWork
from shoal.states import SubtaskStatus, TaskStatus
from shoal.store import accounts, pg_batch
from shoal.store.db import Database
from shoal.store.events import events
from shoal.store.files import artifacts, manifest_rows, subtask_files
from shoal.store.state import BatchWriter, insert_task
from shoal.workflows import decide
from tests.store.test_state import (
    NOW,
    PLAN,
    attempt_for,
    load,
    started_task,
    unsaved_task,
    write,
)

pytestmark = pytest.mark.postgres


@asynccontextmanager
async def statements(db: Database) -> AsyncIterator[list[str]]:
    """Every statement sent on the writer's connections while checked out, and on the one
    `fetch_row_autocommit` keeps (asyncpg's query log). Warm up first (`warm`): a new
    connection's set-up queries count too."""
    seen: list[str] = []

    def log(query: Any) -> None:
        seen.append(query.query)

    def checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.driver_connection.add_query_logger(log)

    def checkin(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.driver_connection.remove_query_logger(log)

    pool = db._write_engine.sync_engine.pool
    sa.event.listen(pool, "checkout", checkout)
    sa.event.listen(pool, "checkin", checkin)
    kept = db._autocommit[1] if db._autocommit is not None else None  # checked out already
    if kept is not None:
        kept.add_query_logger(log)
    try:
        yield seen
        await asyncio.sleep(0)  # asyncpg calls query loggers with call_soon: let them run
    finally:
        sa.event.remove(pool, "checkout", checkout)
        sa.event.remove(pool, "checkin", checkin)
        if kept is not None:
            kept.remove_query_logger(log)


async def warm(db: Database) -> None:
    """Open the writer's connection and run its set-up queries."""
    assert (await db.fetch_row_autocommit("SELECT 1", []))[0] == 1


def note(task_id: uuid.UUID, n: int) -> NewEvent:
    return NewEvent(EventType.NOTICE, {"n": n}, task_id=task_id)


async def stored_events(db: Database, task_id: uuid.UUID) -> list[tuple[int, Any]]:
    async with db.connection() as conn:
        rows = (await conn.execute(sa.select(events.c.seq, events.c.data)
                                   .where(events.c.task_id == task_id)
                                   .order_by(events.c.seq))).all()
    return [(r.seq, r.data) for r in rows]


async def test_rows_and_events_go_in_one_statement(pg_db: Database) -> None:
    """A dispatch's rows and two events: one statement (once asyncpg has prepared that shape
    of batch), read back as staged, events in order with consecutive sequence numbers."""
    started = await started_task(pg_db)
    first = BatchWriter()
    state = first.stage(started, decide(started, Dispatched(attempt_for(started, "a")),
                                        Context(now=NOW)))
    await pg_batch.commit(pg_db, first, [note(started.task.id, 0), note(started.task.id, 0)],
                          NOW)  # the same shape of batch: asyncpg prepares it here
    writer = BatchWriter()
    staged = writer.stage(state, decide(state, Dispatched(attempt_for(state, "b")),
                                        Context(now=NOW)))
    async with statements(pg_db) as sent:
        stored = await pg_batch.commit(pg_db, writer, [note(started.task.id, 1),
                                                       note(started.task.id, 2)], NOW)
    assert stored is not None
    assert len(sent) == 1  # no BEGIN, no COMMIT: the statement commits by itself
    assert sent[0].startswith("WITH ")
    assert await load(pg_db, started.task.id) == staged
    assert [e.data for e in stored] == [{"n": 1}, {"n": 2}]
    assert [e.text for e in stored] == ['{"n": 1}', '{"n": 2}']  # encoded once, for the row
    assert stored[1].seq == stored[0].seq + 1
    assert (await stored_events(pg_db, started.task.id))[-2:] == [(e.seq, e.data)
                                                                  for e in stored]


async def test_a_stale_row_rolls_the_whole_statement_back(pg_db: Database) -> None:
    """An update whose row moved on makes the statement fail with Conflict: the task update
    and the events of the same statement are not kept either."""
    started = await started_task(pg_db)
    fresh = await write(pg_db, started, Dispatched(attempt_for(started, "a")))
    before = await stored_events(pg_db, started.task.id)
    writer = BatchWriter()
    writer.stage(started, decide(started, CancelRequested(), Context(now=NOW)))
    with pytest.raises(Conflict) as caught:
        await pg_batch.commit(pg_db, writer, [note(started.task.id, 3)], NOW)
    assert caught.value.code == "stale_write"
    assert await load(pg_db, started.task.id) == fresh
    assert await stored_events(pg_db, started.task.id) == before
    retry = await pg_batch.commit(pg_db, BatchWriter(), [note(started.task.id, 4)], NOW)
    assert retry is not None  # the connection is fine after the failed statement
    assert [e.data for e in retry] == [{"n": 4}]


async def test_an_attempt_may_refer_to_a_subtask_the_same_statement_inserts(
    pg_db: Database,
) -> None:
    """Foreign keys are checked at the end of the statement: the plan's subtasks and the
    first one's attempt go in together."""
    async with pg_db.begin() as conn:
        user_id = await accounts.create_user(conn, username="bob", password_hash="x",
                                             is_admin=False, email=None, now=NOW)
        task = TaskRecord(id=uuid.uuid4(), user_id=user_id, description="Plan and go",
                          status=TaskStatus.PENDING, created_at=NOW, updated_at=NOW)
        await insert_task(conn, task)
    empty = TaskState(task=task, subtasks={}, attempts={})
    work = TaskWork(empty)
    work.apply(decide(empty, Start(plan=planning.user_plan(PLAN)), Context(now=NOW)))
    attempt = attempt_for(work.state, "a")
    work.apply(decide(work.state, Dispatched(attempt), Context(now=NOW)))
    writer = BatchWriter()
    staged = writer.stage(work.old, work.merged)
    assert await pg_batch.commit(pg_db, writer, [], NOW) == []
    loaded = await load(pg_db, task.id)
    assert loaded == staged
    assert loaded.subtasks[attempt.subtask_id].status is SubtaskStatus.IN_PROGRESS
    assert loaded.attempts == {attempt.id: attempt}


async def test_a_new_task_goes_in_with_its_plan_in_one_statement(pg_db: Database) -> None:
    """A submission: the task row (with the values its start left it, and its claim), the
    plan's subtasks and the first attempt in one statement; no insert-then-update of the task."""
    task = await unsaved_task(pg_db, "carol")
    empty = TaskState(task=task, subtasks={}, attempts={})
    work = TaskWork(empty)
    work.apply(decide(empty, Start(plan=planning.user_plan(PLAN)), Context(now=NOW)))
    work.apply(decide(work.state, Dispatched(attempt_for(work.state, "a")), Context(now=NOW)))
    await warm(pg_db)
    writer = BatchWriter()
    staged = writer.stage_new(work.old, work.merged, owner_id="copy-1", owner_expires_at=NOW)
    assert staged.task.status is TaskStatus.IN_PROGRESS
    async with statements(pg_db) as sent:
        stored = await pg_batch.commit(pg_db, writer, [note(task.id, 1)], NOW)
    assert stored is not None
    (batch,) = [s for s in sent if "INSERT INTO tasks" in s]  # asyncpg may also look up types
    assert "INSERT INTO subtasks" in batch
    assert "UPDATE tasks" not in batch
    assert not any(s.strip().upper() in ("BEGIN", "COMMIT") for s in sent)
    assert await load(pg_db, task.id) == staged
    async with pg_db.connection() as conn:
        owner = (await conn.execute(sa.text("SELECT owner_id FROM tasks WHERE id = :i"),
                                    {"i": task.id})).scalar()
    assert owner == "copy-1"


async def test_a_results_file_manifest_goes_in_the_same_statement(pg_db: Database) -> None:
    """The `artifacts` rows of a result travel with the batch's rows and events."""
    started = await started_task(pg_db)
    att = attempt_for(started, "a")
    writer = BatchWriter()
    writer.stage(started, decide(started, Dispatched(att), Context(now=NOW)))
    manifest = manifest_rows(task_id=started.task.id, subtask_id=att.subtask_id,
                             attempt_id=att.id, now=NOW, entries=[
                                 {"path": "a.py", "size": 3, "sha256": "0" * 64},
                                 {"path": "b/c.txt", "size": 5, "sha256": "1" * 64}])
    await warm(pg_db)
    async with statements(pg_db) as sent:
        stored = await pg_batch.commit(pg_db, writer, [note(started.task.id, 1)], NOW,
                                       rows=[(artifacts, manifest)])
    assert stored is not None
    (batch,) = [s for s in sent if "INSERT INTO artifacts" in s]  # asyncpg may also look up
    assert "UPDATE subtasks" in batch  # the array types of a new shape: that is all else
    assert "INSERT INTO events" in batch
    assert not any(s.strip().upper() in ("BEGIN", "COMMIT") for s in sent)
    async with pg_db.connection() as conn:
        files = await subtask_files(conn, att.subtask_id)
    assert [(f.path, f.size) for f in files] == [("a.py", 3), ("b/c.txt", 5)]


async def test_nothing_to_write_sends_nothing(pg_db: Database) -> None:
    """An empty batch costs no round trip."""
    await started_task(pg_db)
    await warm(pg_db)
    async with statements(pg_db) as sent:
        assert await pg_batch.commit(pg_db, BatchWriter(), [], NOW) == []
    assert sent == []


async def test_statements_share_one_kept_connection(pg_db: Database) -> None:
    """The autocommit statements run on one connection kept out of the pool, not a checkout
    each (ADR 0025); a statement error keeps it, a cancellation mid-flight replaces it, and
    `dispose` gives it back."""
    checkouts: list[object] = []

    def counted(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        checkouts.append(dbapi_conn)

    pool = pg_db._write_engine.sync_engine.pool
    sa.event.listen(pool, "checkout", counted)
    try:
        await warm(pg_db)
        assert pg_db._autocommit is not None
        kept = pg_db._autocommit[1]
        for n in range(3):
            assert (await pg_db.fetch_row_autocommit("SELECT $1::int", [n]))[0] == n
        with pytest.raises(Exception, match="division by zero"):
            await pg_db.fetch_row_autocommit("SELECT 1 / $1::int", [0])
        assert pg_db._autocommit[1] is kept  # a failed statement leaves it usable
        assert len(checkouts) == 1
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pg_db.fetch_row_autocommit("SELECT pg_sleep(30)", []), 0.1)
        assert pg_db._autocommit is None  # its state is unknown: dropped
        assert (await pg_db.fetch_row_autocommit("SELECT 2", []))[0] == 2
        assert pg_db._autocommit[1] is not kept
        assert len(checkouts) == 2
    finally:
        sa.event.remove(pool, "checkout", counted)
    await pg_db.dispose()
    assert pg_db._autocommit is None


async def test_the_kept_connection_plans_for_key_lookups(pg_db: Database) -> None:
    """The kept connection finds a batch's rows by their keys, whatever the statistics say
    (ADR 0049): on a table of a few rows, where PostgreSQL would otherwise read it whole into
    a hash join, an update by id goes through the primary key's index, with one generic plan
    per statement; and its settings never reach a connection the pool hands out."""
    task_id = (await started_task(pg_db)).task.id
    await warm(pg_db)
    assert pg_db._autocommit is not None
    kept = pg_db._autocommit[1]
    assert await kept.fetchval("SHOW enable_seqscan") == "off"
    assert await kept.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
    update = ("UPDATE subtasks AS t SET progress = v.progress FROM unnest($1::uuid[], "
              "$2::int[]) AS v(id, progress) WHERE t.id = v.id")
    async with pg_db._write_engine.connect() as pooled:
        raw = (await pooled.get_raw_connection()).driver_connection
        ids = [r[0] for r in await raw.fetch("SELECT id FROM subtasks WHERE task_id = $1",
                                             task_id)]
        assert ids
        await raw.execute("ANALYZE subtasks")  # a table of a few rows, and PostgreSQL knows it
        default_plan = "\n".join(r[0] for r in await raw.fetch(
            f"EXPLAIN {update}", ids[:1], [5]))
        keyed_plan = "\n".join(r[0] for r in await kept.fetch(
            f"EXPLAIN {update}", ids[:1], [5]))
        # Let go while the pool has room for it: closed all the same, settings and all.
        await pg_db._release_autocommit()
        assert kept.is_closed()
    assert "Seq Scan on subtasks" in default_plan  # what the settings are for
    assert "pk_subtasks" in keyed_plan, keyed_plan  # through the key's index (a plain or
    assert "Seq Scan" not in keyed_plan, keyed_plan  # a bitmap scan: the planner's to choose)
    async with pg_db._write_engine.connect() as pooled:
        raw = (await pooled.get_raw_connection()).driver_connection
        assert await raw.fetchval("SHOW enable_seqscan") == "on"
        assert await raw.fetchval("SHOW plan_cache_mode") == "auto"
